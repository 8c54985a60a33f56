// matmul and linear whose weight is a QFloat matrix, and embedding from a QFloat table: the
// product reads the blocks (quant_matvec.h), the lookup decodes only the rows it reads; neither
// decodes the weight whole.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/quant_matvec.h"
#include "quant/blocks.h"

namespace kiln::cpu {
namespace {

// out [rows, n] = x [rows, k] @ W for W viewed in its stored order [k, n] (blocks along n, not
// along the product's inner dim): tiles of W's rows, decoded to f32 (about 256 KiB each), each a
// gemm accumulating into out.
void product_in_stored_order(const CpuQuantTensor& w, const float* x, std::int64_t rows,
                             float* out) {
  const std::int64_t k = w.stored_shape()[0], n = w.stored_shape()[1];
  const quant::BlockSize block = quant::block_size(w.scheme(), n);
  const std::int64_t row_bytes = n / block.values * block.bytes;
  const std::int64_t tile = std::clamp<std::int64_t>(65536 / n, 1, k);
  std::vector<float> decoded(static_cast<std::size_t>(tile * n));
  for (std::int64_t first = 0; first < k; first += tile) {
    const std::int64_t count = std::min(tile, k - first);
    const std::int64_t blocks = count * n / block.values;
    parallel_for(blocks, std::max<std::int64_t>(1, kParallelGrain / block.values),
                 [&](std::int64_t begin, std::int64_t end) {
                   quant::dequantize_blocks(w.scheme().kind, block,
                                            w.blocks() + first * row_bytes + begin * block.bytes,
                                            end - begin, decoded.data() + begin * block.values);
                 });
    gemm<float>({x + first, rows, count, k, 1}, {decoded.data(), count, n, n, 1},
                {out, rows, n, n, 1}, 1.0f, first == 0 ? 0.0f : 1.0f);
  }
}

}  // namespace

Primitive quantized_product(Backend& backend, Primitive x, const Primitive& weight,
                            OptionalPrimitive bias) {
  const CpuQuantTensor& w = as_quantized(weight);
  const DType dtype = x->dtype();
  const std::int64_t k = weight->shape()[0], n = weight->shape()[1];
  detail::DimVector dims(x->shape().vector());
  dims.back() = n;
  const Shape out_shape(std::move(dims));
  const std::int64_t rows = out_shape.num_elements() / std::max<std::int64_t>(n, 1);
  std::shared_ptr<CpuTensor> values = contiguous_as(x, DType::F32);
  x.reset();
  Primitive out = make_tensor(DType::F32, out_shape);
  float* o = as_cpu(out).data_as<float>();
  if (out_shape.num_elements() > 0) {
    if (w.is_transposed_matrix()) {
      quantized_matmul({w.scheme(), w.blocks(), n, k}, values->data_as<const float>(), rows, o);
    } else if (k == 0) {
      std::fill(o, o + rows * n, 0.0f);
    } else {
      product_in_stored_order(w, values->data_as<const float>(), rows, o);
    }
  }
  values.reset();
  if (bias) {
    detail::DimVector along(out_shape.rank(), 1);
    along.back() = n;
    out = backend.add(std::move(out), backend.reshape(backend.cast(std::move(*bias), DType::F32),
                                                      Shape(std::move(along))));
  }
  return convert(std::move(out), dtype);
}

Primitive quantized_rows(const CpuQuantTensor& table, const std::vector<std::int64_t>& index,
                         const Shape& indices_shape) {
  const std::int64_t width = table.stored_shape()[1];
  detail::DimVector dims(indices_shape.vector());
  dims.push_back(width);
  auto out = make_tensor(DType::F32, Shape(std::move(dims)));
  if (out->shape().num_elements() == 0) return out;
  const quant::BlockSize block = quant::block_size(table.scheme(), width);
  const std::int64_t blocks = width / block.values, row_bytes = blocks * block.bytes;
  float* o = out->data_as<float>();
  parallel_for(
      static_cast<std::int64_t>(index.size()), std::max<std::int64_t>(1, kParallelGrain / width),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const std::int64_t row = index[static_cast<std::size_t>(i)];
          quant::dequantize_blocks(table.scheme().kind, block, table.blocks() + row * row_bytes,
                                   blocks, o + i * width);
        }
      });
  return out;
}

}  // namespace kiln::cpu

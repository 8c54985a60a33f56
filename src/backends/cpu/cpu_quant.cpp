// Quantized tensors on the CPU: quantize and dequantize over kiln's threads, reads and uploads of
// the blocks, and views that permute them (cpu_quant_tensor.h).
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "kiln/quant.h"
#include "quant/blocks.h"

namespace kiln {

using namespace cpu;

namespace {

// The blocks of q decoded to f32, contiguous over its stored shape.
std::shared_ptr<CpuTensor> decode(const CpuQuantTensor& q) {
  auto out = make_tensor(DType::F32, q.stored_shape());
  const std::int64_t n = q.stored_shape().num_elements();
  if (n == 0) return out;
  const QuantScheme::Kind kind = q.scheme().kind;
  const quant::BlockSize block = quant::block_size(q.scheme(), q.stored_shape().dims().back());
  const std::byte* in = q.blocks();
  float* o = out->data_as<float>();
  parallel_for(n / block.values, std::max<std::int64_t>(1, kParallelGrain / block.values),
               [&](std::int64_t begin, std::int64_t end) {
                 quant::dequantize_blocks(kind, block, in + begin * block.bytes, end - begin,
                                          o + begin * block.values);
               });
  return out;
}

}  // namespace

Primitive CpuBackend::quantize(Primitive x, QuantScheme scheme) {
  const char* op = "quantize";
  const std::shared_ptr<CpuTensor> values = contiguous_as(x, DType::F32);
  x.reset();
  const Shape& shape = values->shape();
  const std::size_t bytes = quantized_bytes(shape, scheme, op);
  const float* in = values->data_as<const float>();
  const std::int64_t n = shape.num_elements();
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      detail::fail<InvalidArgument>(op, "value ", in[i], " at flat index ", i,
                                    " cannot be quantized");
    }
  }
  auto storage = std::make_shared<CpuStorage>(bytes);
  if (n > 0) {
    const quant::BlockSize block = quant::block_size(scheme, shape.dims().back());
    std::byte* out = storage->data();
    parallel_for(n / block.values, std::max<std::int64_t>(1, kParallelGrain / block.values),
                 [&](std::int64_t begin, std::int64_t end) {
                   quant::quantize_blocks(scheme.kind, block, in + begin * block.values,
                                          end - begin, out + begin * block.bytes);
                 });
  }
  return std::make_shared<CpuQuantTensor>(scheme, shape, std::move(storage));
}

Primitive CpuBackend::dequantize(Primitive x, DType dtype) {
  const CpuQuantTensor& q = as_quantized(x);
  Primitive values = decode(q);
  if (dtype != DType::F32) values = convert(std::move(values), dtype);
  if (q.in_stored_order()) return values;
  return StridedBackend::permute(std::move(values), q.axes());
}

Primitive CpuBackend::permute_quantized(Primitive x, Axes axes) {
  const CpuQuantTensor& q = as_quantized(x);
  return std::make_shared<CpuQuantTensor>(q.scheme(), q.stored_shape(),
                                          quant_view::permuted(q.axes(), std::move(axes)),
                                          q.storage(), q.offset());
}

Primitive CpuBackend::slice_quantized(Primitive x, ResolvedSlices slices) {
  const CpuQuantTensor& q = as_quantized(x);
  const Shape& stored = q.stored_shape();
  if (!quant_view::whole_rows(q.axes(), stored, slices)) {
    return StridedBackend::slice(dequantize(std::move(x), DType::F32), std::move(slices));
  }
  Shape part = stored;
  part[0] = slices[0].length;
  const std::int64_t row_bytes =
      stored[0] == 0
          ? 0
          : static_cast<std::int64_t>(quantized_bytes(stored, q.scheme(), "slice")) / stored[0];
  return std::make_shared<CpuQuantTensor>(q.scheme(), part, CpuQuantTensor::identity(part.rank()),
                                          q.storage(), q.offset() + slices[0].start * row_bytes);
}

namespace cpu {

Primitive quantized_from_data(const TensorData& data) {
  const std::span<const std::byte> bytes = data.bytes();
  auto storage = std::make_shared<CpuStorage>(bytes.size());
  if (!bytes.empty()) std::memcpy(storage->data(), bytes.data(), bytes.size());
  return std::make_shared<CpuQuantTensor>(data.scheme(), data.shape(), std::move(storage));
}

void assign_quantized(const Primitive& dst, const Primitive& src) {
  const CpuQuantTensor& to = as_quantized(dst);
  if (src->dtype() != DType::QFloat || as_quantized(src).scheme() != to.scheme() ||
      as_quantized(src).stored_shape() != to.stored_shape() ||
      as_quantized(src).axes() != to.axes()) {
    detail::fail<UnsupportedDType>("assign",
                                   "a qfloat tensor takes only blocks of its own "
                                   "scheme and layout");
  }
  const std::size_t bytes = quantized_bytes(to.stored_shape(), to.scheme(), "assign");
  if (bytes != 0) {
    std::memmove(to.storage()->data() + to.offset(), as_quantized(src).blocks(), bytes);
  }
}

TensorData quantized_into_data(Backend& backend, const Primitive& x) {
  const CpuQuantTensor& q = as_quantized(x);
  if (!q.in_stored_order()) return backend.into_data(backend.dequantize(x, DType::F32)).get();
  std::vector<std::byte> bytes(quantized_bytes(q.stored_shape(), q.scheme(), "into_data"));
  if (!bytes.empty()) std::memcpy(bytes.data(), q.blocks(), bytes.size());
  return TensorData::quantized(std::move(bytes), q.stored_shape(), q.scheme());
}

}  // namespace cpu

}  // namespace kiln

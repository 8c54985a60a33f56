// Quantized tensors on the GPU (cuda_quant_tensor.h): their blocks in device memory, views that
// permute them or take whole rows, dequantize as a generated kernel (quant.h), quantize through
// the host encoder, and a capture's replay writing blocks again.
#include <cmath>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_quant_tensor.h"
#include "backends/cuda/quant.h"
#include "kiln/quant.h"

namespace kiln::cuda {

std::size_t CudaQuantTensor::bytes() const { return quantized_bytes(stored_, scheme_, "qfloat"); }

std::int64_t CudaQuantTensor::row_bytes() const {
  const std::int64_t rows =
      stored_.num_elements() / std::max<std::int64_t>(stored_.dims().back(), 1);
  return rows == 0 ? 0 : static_cast<std::int64_t>(bytes()) / rows;
}

TensorPtr block_bytes(const CudaQuantTensor& q) {
  const auto count = static_cast<std::int64_t>(q.bytes());
  const CudaTensor whole(DType::U8, Shape{static_cast<std::int64_t>(q.storage()->bytes())},
                         q.device(), q.storage());
  return std::make_shared<CudaTensor>(whole, Shape{count}, Strides{1}, q.offset());
}

std::shared_ptr<CudaQuantTensor> make_quantized(CudaBackend& backend, const QuantScheme& scheme,
                                                const Shape& stored, const char* op) {
  auto storage = std::make_shared<Storage>(backend.runtime().allocator,
                                           quantized_bytes(stored, scheme, op), op);
  return std::make_shared<CudaQuantTensor>(scheme, stored, CudaQuantTensor::identity(stored.rank()),
                                           backend.device(), std::move(storage), 0);
}

Primitive quantized_from_data(CudaBackend& backend, const TensorData& data) {
  const char* op = "from_data";
  auto q = make_quantized(backend, data.scheme(), data.shape(), op);
  const auto bytes = data.bytes();
  if (!bytes.empty()) {
    Context& context = backend.runtime().context;
    context.make_current();
    // From pageable memory the driver stages the bytes before returning, so data may go.
    KILN_CUDA_CHECK(op,
                    cuMemcpyHtoDAsync(q->blocks(), bytes.data(), bytes.size(), context.stream()));
  }
  return q;
}

namespace {

// Launches kiln_quant_decode: rows rows of q's stored shape (or, with index, the i64 rows it
// names) decoded to f32 at out.
void launch_decode(Runtime& runtime, const CudaQuantTensor& q, CUdeviceptr out, CUdeviceptr index,
                   std::int64_t rows, const char* op) {
  const QuantScheme& scheme = q.scheme();
  const std::int64_t width = q.stored_shape().dims().back();
  QuantDecodeParams p{};
  p.blocks = q.blocks();
  p.out = out;
  p.index = index;
  p.rows = rows;
  p.width = width;
  p.row_bytes = q.row_bytes();
  p.table_rows = q.stored_shape().num_elements() / width;
  p.int8_block = scheme.kind == QuantScheme::Kind::Int8Channel ? width : scheme.block_size;
  if (index != 0) {
    p.error_word = runtime.context.error_word();
    p.error_token = runtime.context.error_token(op, "index out of range");
  }
  const bool int8 =
      scheme.kind == QuantScheme::Kind::Int8Block || scheme.kind == QuantScheme::Kind::Int8Channel;
  const std::string key =
      "quant_decode:" + std::string(quant_kind_name(scheme.kind)) + (index != 0 ? ":indexed" : "");
  CUfunction function = runtime.compiler.function(
      key, "kiln_quant_decode", [&] { return quant_decode_source(scheme.kind, index != 0); });
  const std::int64_t items = int8 ? rows * width : rows * width / 8;
  constexpr unsigned kThreads = 256;
  runtime.launch(op, function, runtime.blocks_for(items, kThreads), kThreads, p);
}

}  // namespace

TensorPtr decode_blocks(CudaBackend& backend, const CudaQuantTensor& q, const char* op) {
  TensorPtr out = backend.make_tensor(DType::F32, q.stored_shape(), op);
  const std::int64_t count = q.stored_shape().num_elements();
  if (count == 0) return out;
  launch_decode(backend.runtime(), q, out->data(), 0, count / q.stored_shape().dims().back(), op);
  return out;
}

Primitive quantized_rows(CudaBackend& backend, const CudaQuantTensor& table,
                         const Primitive& indices) {
  const char* op = "embedding";
  const std::int64_t width = table.stored_shape()[1];
  detail::DimVector dims(indices->shape().vector());
  dims.push_back(width);
  TensorPtr out = backend.make_tensor(DType::F32, Shape(std::move(dims)), op);
  if (out->shape().num_elements() == 0) return out;
  TensorPtr index = backend.contiguous(backend.cast(indices, DType::I64), op);
  launch_decode(backend.runtime(), table, out->data(), index->data(),
                indices->shape().num_elements(), op);
  return out;
}

Primitive CudaBackend::quantize(Primitive x, QuantScheme scheme) {
  const char* op = "quantize";
  if (runtime_.context.capturing_here()) {
    detail::fail<InvalidArgument>(op,
                                  "encodes on the host on cuda, which a CUDA graph cannot replay; "
                                  "quantize before capture()");
  }
  // The host encoder's bytes (src/quant), with the CPU's checks: f32 values, each finite.
  const TensorData values = into_data(std::move(x)).get().convert(DType::F32);
  const std::span<const float> in = values.as_span<float>();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!std::isfinite(in[i])) {
      detail::fail<InvalidArgument>(op, "value ", in[i], " at flat index ", i,
                                    " cannot be quantized");
    }
  }
  return quantized_from_data(*this, values.quantize(scheme));
}

Primitive CudaBackend::dequantize(Primitive x, DType dtype) {
  const CudaQuantTensor& q = as_quantized(x);
  Primitive values = decode_blocks(*this, q, "dequantize");
  if (dtype != DType::F32) values = cast(std::move(values), dtype);
  if (q.in_stored_order()) return values;
  return StridedBackend::permute(std::move(values), q.axes());
}

Primitive CudaBackend::permute_quantized(Primitive x, Axes axes) {
  const CudaQuantTensor& q = as_quantized(x);
  return std::make_shared<CudaQuantTensor>(q.scheme(), q.stored_shape(),
                                           quant_view::permuted(q.axes(), std::move(axes)),
                                           q.device(), q.storage(), q.offset());
}

Primitive CudaBackend::slice_quantized(Primitive x, ResolvedSlices slices) {
  const CudaQuantTensor& q = as_quantized(x);
  const Shape& stored = q.stored_shape();
  if (!quant_view::whole_rows(q.axes(), stored, slices)) {
    return StridedBackend::slice(dequantize(std::move(x), DType::F32), std::move(slices));
  }
  Shape part = stored;
  part[0] = slices[0].length;
  const std::int64_t row_bytes =
      stored[0] == 0 ? 0 : static_cast<std::int64_t>(q.bytes()) / stored[0];
  return std::make_shared<CudaQuantTensor>(q.scheme(), part, CudaQuantTensor::identity(part.rank()),
                                           q.device(), q.storage(),
                                           q.offset() + slices[0].start * row_bytes);
}

void CudaBackend::assign(const Primitive& dst, Primitive src) {
  if (dst->dtype() != DType::QFloat) return StridedBackend::assign(dst, std::move(src));
  const char* op = "assign";
  const CudaQuantTensor& to = as_quantized(dst);
  if (src->dtype() != DType::QFloat || as_quantized(src).scheme() != to.scheme() ||
      as_quantized(src).stored_shape() != to.stored_shape() ||
      as_quantized(src).axes() != to.axes()) {
    detail::fail<UnsupportedDType>(
        op, "a qfloat tensor takes only blocks of its own scheme and layout");
  }
  const CudaQuantTensor& from = as_quantized(src);
  if (to.bytes() == 0) return;
  TensorPtr bytes = block_bytes(from);
  // Two views of one storage may overlap: the source is copied out first.
  if (from.storage() == to.storage()) {
    TensorPtr fresh = make_tensor(DType::U8, bytes->shape(), op);
    copy_into(*fresh, *bytes, op);
    bytes = std::move(fresh);
  }
  copy_into(*block_bytes(to), *bytes, op);
}

}  // namespace kiln::cuda

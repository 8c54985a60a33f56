// gather and select as generated kernels: the loop walks the output, the index operand gives the
// coordinate along dim, and the source is read at that coordinate (GATHER in the expression). An
// index out of range is reported at the next read, naming the op, as an ExecutionError.
#include "backends/cuda/elementwise_ops.h"

namespace kiln::cuda {

namespace {

constexpr const char* kGatherExpression =
    "[&]() { i64 j = (i64)b; if (j < 0 || j >= s1) { err = true; j = 0; } return GATHER(j * s0); "
    "}()";

void check_index_dtype(DType dtype, const char* op) {
  if (!is_int(dtype)) {
    detail::fail<UnsupportedDType>(op, "indices must have an integer dtype, got ",
                                   dtype_name(dtype));
  }
}

// out[p] = x[p with its coordinate along dim replaced by indices[p]] for p over shape; indices is
// already a view of that shape.
Primitive gather_along(CudaBackend& backend, const char* op, std::int64_t dim, const CudaTensor& x,
                       const CudaTensor& indices, const Shape& shape) {
  const std::size_t d = static_cast<std::size_t>(dim);
  Strides strides = x.strides();
  const std::int64_t dim_stride = strides[d];
  const std::int64_t dim_size = x.shape()[d];
  strides[d] = 0;  // the coordinate along dim comes from the index, not from the loop
  TensorPtr source = make_view(x, shape, std::move(strides), x.offset());
  TensorPtr out = backend.make_tensor(x.dtype(), shape, op);
  const DType raw = raw_dtype(x.dtype());
  ElementwiseOp spec{op,  kGatherExpression,        {raw, indices.dtype()}, raw,
                     raw, {DType::I64, DType::I64}, "index out of range"};
  spec.gathered_input = 0;
  const CudaTensor* inputs[] = {source.get(), &indices};
  const std::uint64_t bits[] = {scalar_bits_int(dim_stride), scalar_bits_int(dim_size)};
  launch_elementwise(backend.runtime(), spec, *out, inputs, bits);
  return out;
}

}  // namespace

Primitive CudaBackend::gather(std::int64_t dim, Primitive x, Primitive indices) {
  check_index_dtype(indices->dtype(), "gather");
  return gather_along(*this, "gather", dim, as_cuda(x), as_cuda(indices), indices->shape());
}

Primitive CudaBackend::select(Primitive x, std::int64_t dim, Primitive indices) {
  check_index_dtype(indices->dtype(), "select");
  const CudaTensor& t = as_cuda(x);
  const CudaTensor& i = as_cuda(indices);
  const std::size_t d = static_cast<std::size_t>(dim);
  detail::DimVector dims(t.shape().vector());
  dims[d] = i.shape()[0];
  const Shape shape(std::move(dims));
  // The 1-D indices seen from the output: they vary along dim only.
  Strides strides(shape.rank(), 0);
  strides[d] = i.strides()[0];
  TensorPtr along = make_view(i, shape, std::move(strides), i.offset());
  return gather_along(*this, "select", dim, t, *along, shape);
}

}  // namespace kiln::cuda

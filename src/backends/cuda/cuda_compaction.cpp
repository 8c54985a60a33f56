// mask_select and argwhere on the device (DEFAULT ops whose defaults read the mask back to the
// host): CUB's reduce and select through kiln_cuda_lib (lib/select.h). The result's size is the
// number of set flags, so it is counted first and read back (8 bytes: the one synchronisation,
// unavoidable while shapes are known on the host); the selection and everything else run on the
// device. Same order and dtypes as the CPU backend: row-major, mask_select's result 1-D of x's
// dtype, argwhere's [count, rank] coordinates in the requested integer dtype (converted like a
// cast, as the CPU's static_cast).
#include "backends/cuda/index_kernels.h"
#include "backends/cuda/lib/select.h"
#include "backends/cuda/lib_call.h"

namespace kiln::cuda {

namespace {

// The number of set flags of a contiguous Bool tensor, read back.
std::int64_t count_set(CudaBackend& b, const CudaTensor& flags, const char* op) {
  Runtime& runtime = b.runtime();
  const std::int64_t n = flags.shape().num_elements();
  TensorPtr count = b.make_tensor(DType::I64, Shape{1}, op);
  {
    Workspace workspace(runtime, lib::compaction_workspace_bytes(n, 0), op);
    lib::count_flags(device_address(flags), n, static_cast<std::int64_t*>(device_address(*count)),
                     workspace.get(), workspace.bytes(), lib_stream(runtime));
    runtime.context.note_launch(op);
  }
  return b.into_data(count).get().to_vec<std::int64_t>()[0];
}

}  // namespace

Primitive CudaBackend::mask_select(Primitive x, Primitive mask) {
  const char* op = "mask_select";
  const Shape shape = broadcast_shapes(x->shape(), mask->shape(), op);
  const std::int64_t n = shape.num_elements();
  const DType dtype = x->dtype();
  if (n == 0) return make_tensor(dtype, Shape{0}, op);
  auto spread = [&](Primitive p) { return p->shape() == shape ? p : expand(std::move(p), shape); };
  TensorPtr flags = contiguous(spread(std::move(mask)), op);
  TensorPtr out = make_tensor(dtype, Shape{count_set(*this, *flags, op)}, op);
  if (out->shape().num_elements() == 0) return out;
  TensorPtr items = contiguous(spread(std::move(x)), op);
  const std::size_t item_bytes = dtype_size(dtype);
  Workspace workspace(runtime_, lib::compaction_workspace_bytes(n, item_bytes), op);
  lib::select_flagged(item_bytes, device_address(*items), device_address(*flags), n,
                      device_address(*out), workspace.get(), workspace.bytes(),
                      lib_stream(runtime_));
  runtime_.context.note_launch(op);
  return out;
}

Primitive CudaBackend::argwhere(Primitive mask, DType index_dtype) {
  const char* op = "argwhere";
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
  const Shape shape = mask->shape();
  const auto rank = static_cast<std::int64_t>(shape.rank());
  const std::int64_t n = shape.num_elements();
  if (n == 0) return make_tensor(index_dtype, Shape{0, rank}, op);
  TensorPtr flags = contiguous(mask, op);
  const std::int64_t count = count_set(*this, *flags, op);
  TensorPtr out = make_tensor(index_dtype, Shape{count, rank}, op);
  if (count == 0 || rank == 0) return out;
  TensorPtr positions = make_tensor(DType::I64, Shape{count}, op);
  {
    Workspace workspace(runtime_, lib::compaction_workspace_bytes(n, sizeof(std::int64_t)), op);
    lib::flagged_positions(device_address(*flags), n,
                           static_cast<std::int64_t*>(device_address(*positions)), workspace.get(),
                           workspace.bytes(), lib_stream(runtime_));
    runtime_.context.note_launch(op);
  }
  // Column d of the result: (position / stride of dim d) % size of dim d, one pass per dim.
  const ElementwiseOp unravel = unravel_op(index_dtype);
  const CudaTensor* inputs[] = {positions.get()};
  std::int64_t stride = 1;
  for (std::int64_t d = rank - 1; d >= 0; --d) {
    TensorPtr column = make_view(*out, Shape{count}, Strides(1, rank), out->offset() + d);
    const std::uint64_t bits[] = {scalar_bits_int(stride),
                                  scalar_bits_int(shape[static_cast<std::size_t>(d)])};
    launch_elementwise(runtime_, unravel, *column, inputs, bits);
    stride *= shape[static_cast<std::size_t>(d)];
  }
  return out;
}

}  // namespace kiln::cuda

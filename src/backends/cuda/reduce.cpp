// Launches the plan of plan_reduce (reduce_plan.cpp) with the kernels of reduce_source.cpp.
#include "backends/cuda/reduce.h"

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/runtime.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

TensorPtr reduce_dim(Runtime& runtime, const CudaTensor& x, std::int64_t dim,
                     const Reducer& reducer, DType out_dtype, const char* op) {
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(dim)] = 1;
  TensorPtr out = runtime.make_tensor(out_dtype, out_shape, op);
  ReducePlan plan = plan_reduce(x.shape(), x.strides().span(), x.data(), dim, x.dtype(),
                                runtime.context.sm_count(), op);
  ReduceParams& p = plan.params;
  if (p.outputs == 0) return out;
  if (p.length == 0 && reducer.needs_elements) {
    detail::fail<InvalidArgument>(op, "cannot take ", reducer_name(reducer), " of an empty dim");
  }
  p.in = x.data();
  p.out = out->data();
  TensorPtr scratch;
  if (plan.scratch_bytes > 0) {
    scratch = runtime.make_tensor(DType::U8, Shape{plan.scratch_bytes}, op);
    p.scratch = scratch->data();
  }
  const std::string suffix = std::string(":") + reducer_name(reducer) + ":" +
                             short_name(x.dtype()) + ":" + short_name(out_dtype);
  for (const ReduceLaunch& launch : plan.launches) {
    const char* name = reduce_kernel_name(launch.kernel);
    CUfunction function = runtime.compiler.function(
        std::string("reduce:") + name + suffix, name,
        [&] { return reduce_kernel_source(launch.kernel, reducer, x.dtype(), out_dtype); });
    runtime.launch(op, function, launch.blocks, launch.threads, p);
  }
  return out;
}

}  // namespace kiln::cuda

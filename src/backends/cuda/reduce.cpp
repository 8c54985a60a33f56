// Launches the plan of plan_reduce (reduce_plan.cpp) with the kernels of reduce_source.cpp.
#include "backends/cuda/reduce.h"

#include <cstddef>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/runtime.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {

// Mirrors struct P of a reduction over a fused chain: the reduction's parameters, the chain's.
struct FusedReduceParams {
  ReduceParams reduce;
  FusedTailParams chain;
};
static_assert(offsetof(FusedReduceParams, chain) == sizeof(ReduceParams));
// Mirrors struct P of a reduction with an epilogue: the reduction's parameters, the epilogue's.
struct EpilogueReduceParams {
  ReduceParams reduce;
  FusedParams epilogue;
};
static_assert(offsetof(EpilogueReduceParams, epilogue) == sizeof(ReduceParams));

bool reads_input(ReduceKernel kernel) {
  return kernel != ReduceKernel::FinishWarp && kernel != ReduceKernel::FinishBlock;
}

// Writes the reduction of plan into out. Its input: at address `in`, or with fused (chain: its
// parameters) the chain's value; the finish kernels are the same either way.
// With epilogue (not with fused), every kernel of the plan has its ops on each result written.
void launch_plan(Runtime& runtime, ReducePlan plan, const CudaTensor& out, const Reducer& reducer,
                 DType dtype, const char* op, std::uint64_t in, const FusedLoad* fused = nullptr,
                 const FusedTailParams* chain = nullptr, const TailEpilogue* epilogue = nullptr) {
  ReduceParams& p = plan.params;
  if (p.outputs == 0) return;
  if (p.length == 0 && reducer.needs_elements) {
    detail::fail<InvalidArgument>(op, "cannot take ", reducer_name(reducer), " of an empty dim");
  }
  p.in = in;
  p.out = out.data();
  TensorPtr scratch;
  if (plan.scratch_bytes > 0) {
    scratch = runtime.make_tensor(DType::U8, Shape{plan.scratch_bytes}, op);
    p.scratch = scratch->data();
  }
  FusedReduceParams both{};
  if (fused != nullptr) both = {p, *chain};
  EpilogueReduceParams with_epilogue{};
  if (epilogue != nullptr) with_epilogue = {p, epilogue->params};
  const std::string suffix = std::string(":") + reducer_name(reducer) + ":" + short_name(dtype) +
                             ":" + short_name(out.dtype());
  for (const ReduceLaunch& launch : plan.launches) {
    const char* name = reduce_kernel_name(launch.kernel);
    const FusedLoad* load = reads_input(launch.kernel) ? fused : nullptr;
    std::string key = std::string("reduce:") + name + suffix;
    if (load != nullptr) key += "|" + key_of(*load);
    if (epilogue != nullptr) key += "|e" + *epilogue->key;
    CUfunction function = runtime.compiler.function(key, name, [&] {
      return reduce_kernel_source(launch.kernel, reducer, dtype, out.dtype(), load,
                                  epilogue != nullptr ? epilogue->kernel : nullptr);
    });
    if (load != nullptr)
      runtime.launch(op, function, launch.blocks, launch.threads, both, 0, nullptr,
                     LaunchOrder::Overlapping);
    else if (epilogue != nullptr)
      runtime.launch(op, function, launch.blocks, launch.threads, with_epilogue, 0, nullptr,
                     LaunchOrder::Overlapping);
    else
      runtime.launch(op, function, launch.blocks, launch.threads, p, 0, nullptr,
                     LaunchOrder::Overlapping);
  }
}

// The reduction of x as the active capture's tail: x a placeholder of it, contiguous at address 0
// (the plan is the one of the fresh tensor the chain would write), or a tensor (then the capture
// has no other ops, and the ops after the tail may be its epilogue).
TensorPtr record_tail(KernelCapture& capture, ReducePlan plan, const CudaTensor& x,
                      std::int64_t dim, const Reducer& reducer, DType out_dtype, const char* op) {
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(dim)] = 1;
  const DType dtype = x.dtype();
  CaptureTail tail;
  tail.dim = dim;
  tail.fused = [=, &reducer](Runtime& runtime, const FusedLoad& load,
                             const FusedTailParams& chain) {
    TensorPtr out = runtime.make_tensor(out_dtype, out_shape, op);
    launch_plan(runtime, plan, *out, reducer, dtype, op, 0, &load, &chain);
    return out;
  };
  tail.eager = [=, &reducer](Runtime& runtime, const CudaTensor& in) {
    return reduce_dim(runtime, in, dim, reducer, out_dtype, op);
  };
  // x a tensor (the tail of a capture of no other ops): planned at each run for the tensor bound
  // then, whose address may differ (the plan's vector loads depend on its alignment).
  tail.with_epilogue = [=, &reducer](Runtime& runtime, const CudaTensor& in,
                                     const TailEpilogue& epilogue) {
    ReducePlan fresh = plan_reduce(in.shape(), in.strides().span(), in.data(), dim, in.dtype(),
                                   runtime.context.sm_count(), op);
    TensorPtr out = runtime.make_tensor(out_dtype, out_shape, op);
    launch_plan(runtime, std::move(fresh), *out, reducer, in.dtype(), op, in.data(), nullptr,
                nullptr, &epilogue);
    return out;
  };
  return capture.record_tail(x, out_dtype, out_shape, std::move(tail));
}

}  // namespace

TensorPtr reduce_dim(Runtime& runtime, const CudaTensor& x, std::int64_t dim,
                     const Reducer& reducer, DType out_dtype, const char* op) {
  ReducePlan plan = plan_reduce(x.shape(), x.strides().span(), x.data(), dim, x.dtype(),
                                runtime.context.sm_count(), op);
  if (KernelCapture* capture = KernelCapture::active())
    return record_tail(*capture, std::move(plan), x, dim, reducer, out_dtype, op);
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(dim)] = 1;
  TensorPtr out = runtime.make_tensor(out_dtype, out_shape, op);
  launch_plan(runtime, std::move(plan), *out, reducer, x.dtype(), op, x.data());
  return out;
}

}  // namespace kiln::cuda

// softmax and log_softmax (DEFAULT ops) as generated kernels: one pass over rows that fit in
// registers instead of the default's five (max, sub, exp, sum, div). Plan in softmax_plan.cpp,
// kernels in softmax_source.cpp. Their gradients stay autodiff's rules (sum_dim, mul, sub).
#include <cstddef>

#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/softmax.h"

namespace kiln::cuda {

namespace {

// Mirrors struct P of a softmax over a fused chain: softmax's parameters, then the chain's.
struct FusedSoftmaxParams {
  SoftmaxParams softmax;
  FusedTailParams chain;
};
static_assert(offsetof(FusedSoftmaxParams, chain) == sizeof(SoftmaxParams));

// The output of plan, laid out like x (contiguous in plan.out_order, viewed in x's dim order),
// computed from x at address `in` or, with fused (chain: its parameters), from the chain's value;
// Combine reads neither.
TensorPtr launch_plan(Runtime& runtime, SoftmaxPlan plan, const Shape& shape, DType dtype, bool log,
                      const char* op, std::uint64_t in, const FusedLoad* fused = nullptr,
                      const FusedTailParams* chain = nullptr) {
  Shape stored(std::vector<std::int64_t>(shape.rank()));
  for (std::size_t i = 0; i < shape.rank(); ++i) stored[i] = shape[plan.out_order[i]];
  TensorPtr storage = runtime.make_tensor(dtype, stored, op);
  TensorPtr out =
      make_view(*storage, shape, Strides(std::span<const std::int64_t>(plan.out_strides)), 0);
  SoftmaxParams& p = plan.params;
  p.in = in;
  p.out = out->data();
  TensorPtr partials, totals;
  if (plan.partial_bytes > 0) {
    partials = runtime.make_tensor(DType::U8, Shape{plan.partial_bytes}, op);
    p.partials = partials->data();
  }
  if (plan.total_bytes > 0) {
    totals = runtime.make_tensor(DType::U8, Shape{plan.total_bytes}, op);
    p.totals = totals->data();
  }
  FusedSoftmaxParams both{};
  if (fused != nullptr) both = {p, *chain};
  const std::string suffix = std::string(":") + short_name(dtype) + (log ? ":log" : "");
  for (const SoftmaxLaunch& launch : plan.launches) {
    const char* name = softmax_kernel_name(launch.kernel);
    const FusedLoad* load = launch.kernel != SoftmaxKernel::Combine ? fused : nullptr;
    std::string key = std::string("softmax:") + name + suffix;
    if (load != nullptr) key += "|" + key_of(*load);
    CUfunction function = runtime.compiler.function(
        key, name, [&] { return softmax_kernel_source(launch.kernel, dtype, log, load); });
    if (load != nullptr)
      runtime.launch(op, function, launch.blocks, launch.threads, both, 0, nullptr,
                     LaunchOrder::Overlapping);
    else
      runtime.launch(op, function, launch.blocks, launch.threads, p, 0, nullptr,
                     LaunchOrder::Overlapping);
  }
  return out;
}

TensorPtr softmax_of(Runtime& runtime, const CudaTensor& t, std::int64_t dim, bool log,
                     const char* op) {
  SoftmaxPlan plan = plan_softmax(t.shape(), t.strides().span(), t.data(), dim, t.dtype(),
                                  runtime.context.sm_count(), op);
  return launch_plan(runtime, std::move(plan), t.shape(), t.dtype(), log, op, t.data());
}

// Softmax of t, a placeholder of the active capture, as that capture's tail. t is contiguous at
// address 0: the plan is the one of the fresh tensor the chain would write.
TensorPtr record_tail(KernelCapture& capture, Runtime& runtime, const CudaTensor& t,
                      std::int64_t dim, bool log, const char* op) {
  SoftmaxPlan plan = plan_softmax(t.shape(), t.strides().span(), t.data(), dim, t.dtype(),
                                  runtime.context.sm_count(), op);
  CaptureTail tail;
  tail.dim = dim;
  tail.fused = [plan = std::move(plan), shape = t.shape(), dtype = t.dtype(), log, op](
                   Runtime& runtime, const FusedLoad& load, const FusedTailParams& chain) {
    return launch_plan(runtime, plan, shape, dtype, log, op, 0, &load, &chain);
  };
  tail.eager = [dim, log, op](Runtime& runtime, const CudaTensor& x) {
    return softmax_of(runtime, x, dim, log, op);
  };
  return capture.record_tail(t, t.dtype(), t.shape(), std::move(tail));
}

Primitive run_softmax(CudaBackend& b, Primitive x, std::int64_t dim, bool log, const char* op) {
  check_accepts(x->dtype(), Accepts::Float, op);
  const CudaTensor& t = as_cuda(x);
  if (t.shape().num_elements() == 0) return x;
  if (KernelCapture* capture = KernelCapture::active())
    return record_tail(*capture, b.runtime(), t, dim, log, op);
  return softmax_of(b.runtime(), t, dim, log, op);
}

}  // namespace

Primitive CudaBackend::softmax(Primitive x, std::int64_t dim) {
  return run_softmax(*this, std::move(x), dim, false, "softmax");
}

Primitive CudaBackend::log_softmax(Primitive x, std::int64_t dim) {
  return run_softmax(*this, std::move(x), dim, true, "log_softmax");
}

}  // namespace kiln::cuda

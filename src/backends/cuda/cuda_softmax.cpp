// softmax and log_softmax (DEFAULT ops) as generated kernels: one pass over rows that fit in
// registers instead of the default's five (max, sub, exp, sum, div). Plan in softmax_plan.cpp,
// kernels in softmax_source.cpp. Their gradients stay autodiff's rules (sum_dim, mul, sub).
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/softmax.h"

namespace kiln::cuda {

namespace {

Primitive run_softmax(CudaBackend& b, Primitive x, std::int64_t dim, bool log, const char* op) {
  check_accepts(x->dtype(), Accepts::Float, op);
  const CudaTensor& t = as_cuda(x);
  if (t.shape().num_elements() == 0) return x;
  Runtime& runtime = b.runtime();
  SoftmaxPlan plan = plan_softmax(t.shape(), t.strides().span(), t.data(), dim, t.dtype(),
                                  runtime.context.sm_count(), op);
  // The output is laid out like x: contiguous in plan.out_order, viewed in x's dim order.
  Shape stored(std::vector<std::int64_t>(t.rank()));
  for (std::size_t i = 0; i < t.rank(); ++i) stored[i] = t.shape()[plan.out_order[i]];
  TensorPtr storage = runtime.make_tensor(t.dtype(), stored, op);
  TensorPtr out =
      make_view(*storage, t.shape(), Strides(std::span<const std::int64_t>(plan.out_strides)), 0);
  SoftmaxParams& p = plan.params;
  p.in = t.data();
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
  const std::string suffix = std::string(":") + short_name(t.dtype()) + (log ? ":log" : "");
  for (const SoftmaxLaunch& launch : plan.launches) {
    const char* name = softmax_kernel_name(launch.kernel);
    CUfunction function = runtime.compiler.function(
        std::string("softmax:") + name + suffix, name,
        [&] { return softmax_kernel_source(launch.kernel, t.dtype(), log); });
    runtime.launch(op, function, launch.blocks, launch.threads, p);
  }
  return out;
}

}  // namespace

Primitive CudaBackend::softmax(Primitive x, std::int64_t dim) {
  return run_softmax(*this, std::move(x), dim, false, "softmax");
}

Primitive CudaBackend::log_softmax(Primitive x, std::int64_t dim) {
  return run_softmax(*this, std::move(x), dim, true, "log_softmax");
}

}  // namespace kiln::cuda

// layer_norm (a DEFAULT op) as one generated kernel (norm.h). Its gradient stays autodiff's rule.
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/norm.h"

namespace kiln::cuda {

Primitive CudaBackend::layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                                  double epsilon) {
  const char* op = "layer_norm";
  check_accepts(x->dtype(), Accepts::Float, op);
  check_accepts(gamma->dtype(), Accepts::Float, op);
  if (beta) check_accepts((*beta)->dtype(), Accepts::Float, op);
  // The tensor layer has checked the shapes (gamma and beta of x's last dim) and promoted the
  // dtypes.
  const Shape& shape = x->shape();
  const std::int64_t width = shape[shape.rank() - 1];
  TensorPtr in = contiguous(x, op);
  TensorPtr out = make_tensor(x->dtype(), shape, op);
  if (shape.num_elements() == 0) return out;
  const CudaTensor& g = as_cuda(gamma);
  const DType beta_dtype = beta ? (*beta)->dtype() : g.dtype();
  LayerNormParams p{};
  p.rows = shape.num_elements() / width;
  p.width = width;
  p.gamma_stride = g.strides()[0];
  p.beta_stride = beta ? as_cuda(*beta).strides()[0] : 0;
  p.x = in->data();
  p.out = out->data();
  p.gamma = g.data();
  p.beta = beta ? as_cuda(*beta).data() : 0;
  p.epsilon = epsilon;
  const std::string key = std::string("layer_norm:") + short_name(x->dtype()) + ":" +
                          short_name(g.dtype()) + ":" + short_name(beta_dtype);
  CUfunction function = runtime().compiler.function(
      key, "kiln_layer_norm", [&] { return layer_norm_source(x->dtype(), g.dtype(), beta_dtype); });
  const auto blocks = static_cast<unsigned>(
      std::min<std::int64_t>(p.rows, std::int64_t(runtime().context.sm_count()) * 16));
  runtime().launch(op, function, blocks, 256, p);
  return out;
}

}  // namespace kiln::cuda

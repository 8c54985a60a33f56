// Activations: float tensors only; softmax-like ops take a dim (negative counts from the end).
#include "tensor/common.h"

namespace kiln::detail {

Primitive relu(Primitive x) {
  check_float(x, "relu");
  return backend_of(x).relu(std::move(x));
}

Primitive gelu(Primitive x) {
  check_float(x, "gelu");
  return backend_of(x).gelu(std::move(x));
}

Primitive silu(Primitive x) {
  check_float(x, "silu");
  return backend_of(x).silu(std::move(x));
}

Primitive leaky_relu(Primitive x, double negative_slope) {
  check_float(x, "leaky_relu");
  return backend_of(x).leaky_relu(std::move(x), negative_slope);
}

Primitive prelu(Primitive x, Primitive alpha) {
  check_float(x, "prelu");
  check_float(alpha, "prelu");
  Backend& backend = backend_of(x, alpha, "prelu");
  if (alpha->rank() != x->rank() ||
      broadcast_shape(x->shape(), alpha->shape(), "prelu") != x->shape()) {
    fail<ShapeMismatch>("prelu", "alpha of shape ", alpha->shape().to_string(),
                        " does not broadcast to the input's shape ", x->shape().to_string());
  }
  promote(x, alpha, "prelu");
  return backend.prelu(std::move(x), std::move(alpha));
}

Primitive hard_sigmoid(Primitive x, double alpha, double beta) {
  check_float(x, "hard_sigmoid");
  return backend_of(x).hard_sigmoid(std::move(x), alpha, beta);
}

Primitive log_sigmoid(Primitive x) {
  check_float(x, "log_sigmoid");
  return backend_of(x).log_sigmoid(std::move(x));
}

Primitive softmax(Primitive x, std::int64_t dim) {
  check_float(x, "softmax");
  const std::int64_t d = normalize_dim(dim, x->rank(), "softmax");
  return backend_of(x).softmax(std::move(x), d);
}

Primitive log_softmax(Primitive x, std::int64_t dim) {
  check_float(x, "log_softmax");
  const std::int64_t d = normalize_dim(dim, x->rank(), "log_softmax");
  return backend_of(x).log_softmax(std::move(x), d);
}

Primitive softmin(Primitive x, std::int64_t dim) {
  check_float(x, "softmin");
  const std::int64_t d = normalize_dim(dim, x->rank(), "softmin");
  return backend_of(x).softmin(std::move(x), d);
}

Primitive softmax_cross_entropy(Primitive logits, Primitive target) {
  const char* op = "softmax_cross_entropy";
  check_float(logits, op);
  check_int(target, op);
  Backend& backend = backend_of(logits, target, op);
  if (logits->rank() != 2 || target->rank() != 1 || target->shape()[0] != logits->shape()[0]) {
    fail<ShapeMismatch>(op, "logits ", logits->shape().to_string(),
                        " must be [rows, classes] and target ", target->shape().to_string(),
                        " [rows]");
  }
  if (logits->shape()[1] == 0 && logits->shape()[0] > 0) {
    fail<InvalidArgument>(op, "logits ", logits->shape().to_string(),
                          " have no classes to pick from");
  }
  return backend.softmax_cross_entropy(std::move(logits), std::move(target));
}

}  // namespace kiln::detail

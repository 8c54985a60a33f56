// Linear algebra and the matmul-based module ops: matmul, cross, linear, layer_norm, batch_norm,
// embedding, attention. Everything is checked here; backends trust their inputs.
#include <cmath>
#include <initializer_list>
#include <vector>

#include "decorators/autocast/autocast_layer.h"
#include "tensor/common.h"

namespace kiln::detail {

namespace {

// The backend running an op on several operands: all on one device's hardware
// (DeviceMismatch otherwise); a tracked operand makes the op tracked.
Backend& backend_of_all(const std::vector<const Primitive*>& operands, const char* op) {
  const Primitive& first = *operands.front();
  Device device = first->device();
  for (const Primitive* p : operands) {
    backend_of(first, *p, op);
    device = joined(device, (*p)->device());
  }
  return backend_for(device);
}

// Brings every operand to one dtype (pairwise promotion against the first, then back).
void promote_all(std::initializer_list<Primitive*> operands, const char* op) {
  Primitive& first = **operands.begin();
  for (Primitive* p : operands) promote(first, *p, op);
  for (Primitive* p : operands) promote(first, *p, op);
}

void check_rank(const Primitive& p, std::size_t rank, const char* what, const char* op) {
  if (p->rank() != rank) {
    fail<ShapeMismatch>(op, what, " must have rank ", rank, ", got shape ", p->shape().to_string());
  }
}

// A 1-D parameter of `size` elements (gamma, beta, running statistics, bias).
void check_vector(const Primitive& p, std::int64_t size, const char* what, const char* op) {
  if (p->rank() != 1 || p->shape()[0] != size) {
    fail<ShapeMismatch>(op, what, " must have shape [", size, "], got ", p->shape().to_string());
  }
}

void check_epsilon(double epsilon, const char* op) {
  if (!(epsilon >= 0) || std::isinf(epsilon)) {
    fail<InvalidArgument>(op, "epsilon must be finite and >= 0, got ", epsilon);
  }
}

// True when `from` broadcasts to `to` (same rank, each dim equal or 1).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.rank() != to.rank()) return false;
  for (std::size_t i = 0; i < from.rank(); ++i) {
    if (from[i] != to[i] && from[i] != 1) return false;
  }
  return true;
}

}  // namespace

Primitive matmul(Primitive lhs, Primitive rhs) {
  const char* op = "matmul";
  check_numeric(lhs, op);
  // A quantized rhs (a weight) reaches the backend as it is: its product reads the blocks.
  const bool quantized = rhs->dtype() == DType::QFloat && is_float(lhs->dtype());
  if (!quantized) check_numeric(rhs, op);
  Backend& backend = backend_of(lhs, rhs, op);
  const Shape& a = lhs->shape();
  const Shape& b = rhs->shape();
  if (a.rank() < 2 || b.rank() < 2) {
    fail<ShapeMismatch>(op, "operands need rank >= 2, got shapes ", a.to_string(), " and ",
                        b.to_string());
  }
  if (a[a.rank() - 1] != b[b.rank() - 2]) {
    fail<ShapeMismatch>(op, "inner dims differ: shapes ", a.to_string(), " and ", b.to_string(),
                        " (", a[a.rank() - 1], " vs ", b[b.rank() - 2], ")");
  }
  // Leading (batch) dims broadcast, aligned from the right.
  const std::size_t ba = a.rank() - 2, bb = b.rank() - 2;
  for (std::size_t i = 1; i <= std::min(ba, bb); ++i) {
    const std::int64_t da = a[ba - i], db = b[bb - i];
    if (da != db && da != 1 && db != 1) {
      fail<ShapeMismatch>(op, "batch dims of shapes ", a.to_string(), " and ", b.to_string(),
                          " cannot be broadcast (", da, " vs ", db, ")");
    }
  }
  if (!quantized) promote(lhs, rhs, op);
  return backend.matmul(std::move(lhs), std::move(rhs));
}

Primitive cross(Primitive lhs, Primitive rhs, std::int64_t dim) {
  const char* op = "cross";
  check_numeric(lhs, op);
  check_numeric(rhs, op);
  Backend& backend = backend_of(lhs, rhs, op);
  const Shape shape = broadcast_shape(lhs->shape(), rhs->shape(), op);
  dim = normalize_dim(dim, shape.rank(), op);
  const auto d = static_cast<std::size_t>(dim);
  if (lhs->shape()[d] != 3 || rhs->shape()[d] != 3) {
    fail<ShapeMismatch>(op, "dim ", dim, " must have size 3 in both operands, got shapes ",
                        lhs->shape().to_string(), " and ", rhs->shape().to_string());
  }
  promote(lhs, rhs, op);
  return backend.cross(std::move(lhs), std::move(rhs), dim);
}

Primitive linear(Primitive x, Primitive weight, std::optional<Primitive> bias) {
  const char* op = "linear";
  check_float(x, op);
  // A quantized weight reaches the backend as it is (matmul's rule); x and bias are promoted
  // between themselves.
  const bool quantized = weight->dtype() == DType::QFloat;
  if (!quantized) check_float(weight, op);
  if (bias) check_float(*bias, op);
  Backend& backend = bias ? backend_of_all({&x, &weight, &*bias}, op) : backend_of(x, weight, op);
  check_rank(weight, 2, "weight [in, out]", op);
  if (x->rank() < 1) fail<ShapeMismatch>(op, "input must have rank >= 1");
  const std::int64_t in = x->shape()[x->rank() - 1];
  if (weight->shape()[0] != in) {
    fail<ShapeMismatch>(op, "input shape ", x->shape().to_string(), " has ", in,
                        " features but weight [in, out] has shape ", weight->shape().to_string());
  }
  if (bias) check_vector(*bias, weight->shape()[1], "bias", op);
  if (quantized) {
    if (bias) promote(x, *bias, op);
  } else if (bias) {
    promote_all({&x, &weight, &*bias}, op);
  } else {
    promote(x, weight, op);
  }
  return backend.linear(std::move(x), std::move(weight), std::move(bias));
}

Primitive linear_out_in(Primitive x, Primitive weight, std::optional<Primitive> bias) {
  const char* op = "module::linear";
  check_rank(weight, 2, "weight [out, in]", op);
  if (x->rank() < 1) fail<ShapeMismatch>(op, "input must have rank >= 1");
  const std::int64_t in = x->shape()[x->rank() - 1];
  if (weight->shape()[1] != in) {
    fail<ShapeMismatch>(op, "input shape ", x->shape().to_string(), " has ", in,
                        " features but weight [out, in] has shape ", weight->shape().to_string(),
                        " (PyTorch's layout, as nn::Linear and checkpoints store it; a weight "
                        "stored [in, out] is its transpose)");
  }
  // Inside an autocast scope the weight is cast before the transpose makes a fresh view of it,
  // so that its cast is made once per scope. An f32 input and bias are then cast here too, as the
  // autocast layer would cast them: left f32, linear's promotion would widen the cast weight back
  // to f32 for the layer to narrow again (two passes over the weight, and over its gradient,
  // each written where autodiff keeps it). Beside an f64 input, which is never narrowed, the
  // weight stays f32 too.
  if (weight->dtype() == DType::F32 && x->dtype() != DType::F64) {
    weight = autocast::cast_weight(weight);
    if (weight->dtype() != DType::F32) {
      if (x->dtype() == DType::F32) x = autocast::cast_weight(x);
      if (bias && (*bias)->dtype() == DType::F32) bias = autocast::cast_weight(*bias);
    }
  }
  return linear(std::move(x), transpose(std::move(weight)), std::move(bias));
}

PrimPair layer_norm_backward(Primitive x, Primitive gamma, Primitive grad, double epsilon) {
  const char* op = "layer_norm_backward";
  check_float(x, op);
  check_float(gamma, op);
  check_float(grad, op);
  Backend& backend = backend_of_all({&x, &gamma, &grad}, op);
  if (x->rank() == 0) fail<ShapeMismatch>(op, "the input must have at least one dim");
  check_vector(gamma, x->shape()[x->rank() - 1], "gamma", op);
  if (grad->shape() != x->shape()) {
    fail<ShapeMismatch>(op, "grad ", grad->shape().to_string(), " must have the input's shape ",
                        x->shape().to_string());
  }
  check_epsilon(epsilon, op);
  promote_all({&x, &gamma, &grad}, op);
  return backend.layer_norm_backward(std::move(x), std::move(gamma), std::move(grad), epsilon);
}

Primitive layer_norm(Primitive x, Primitive gamma, std::optional<Primitive> beta, double epsilon) {
  const char* op = "layer_norm";
  check_float(x, op);
  check_float(gamma, op);
  if (beta) check_float(*beta, op);
  Backend& backend = beta ? backend_of_all({&x, &gamma, &*beta}, op) : backend_of(x, gamma, op);
  const std::int64_t width = x->shape()[x->rank() - 1];
  check_vector(gamma, width, "gamma", op);
  if (beta) check_vector(*beta, width, "beta", op);
  check_epsilon(epsilon, op);
  if (beta) {
    promote_all({&x, &gamma, &*beta}, op);
  } else {
    promote(x, gamma, op);
  }
  return backend.layer_norm(std::move(x), std::move(gamma), std::move(beta), epsilon);
}

Primitive batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                     Primitive variance, double epsilon) {
  const char* op = "batch_norm";
  for (Primitive* p : {&x, &gamma, &beta, &mean, &variance}) check_float(*p, op);
  Backend& backend = backend_of_all({&x, &gamma, &beta, &mean, &variance}, op);
  if (x->rank() < 2) {
    fail<ShapeMismatch>(op, "input must have rank >= 2 (N, C, ...), got shape ",
                        x->shape().to_string());
  }
  const std::int64_t channels = x->shape()[1];
  check_vector(gamma, channels, "gamma", op);
  check_vector(beta, channels, "beta", op);
  check_vector(mean, channels, "mean", op);
  check_vector(variance, channels, "variance", op);
  check_epsilon(epsilon, op);
  promote_all({&x, &gamma, &beta, &mean, &variance}, op);
  return backend.batch_norm(std::move(x), std::move(gamma), std::move(beta), std::move(mean),
                            std::move(variance), epsilon);
}

Primitive embedding(Primitive weights, Primitive indices) {
  const char* op = "embedding";
  // A quantized table reaches the backend as it is: only the rows looked up are dequantized.
  if (weights->dtype() != DType::QFloat) check_float(weights, op);
  check_int(indices, op);
  Backend& backend = backend_of(weights, indices, op);
  check_rank(weights, 2, "weights [V, E]", op);
  return backend.embedding(std::move(weights), std::move(indices));
}

Primitive attention(Primitive query, Primitive key, Primitive value, std::optional<Primitive> mask,
                    std::optional<Primitive> bias, AttentionOptions options) {
  const char* op = "attention";
  for (Primitive* p : {&query, &key, &value}) check_float(*p, op);
  if (mask) check_bool(*mask, op);
  if (bias) check_float(*bias, op);
  std::vector<const Primitive*> operands{&query, &key, &value};
  if (mask) operands.push_back(&*mask);
  if (bias) operands.push_back(&*bias);
  Backend& backend = backend_of_all(operands, op);
  check_rank(query, 4, "query [B, H, Sq, D]", op);
  check_rank(key, 4, "key [B, H, Sk, D]", op);
  check_rank(value, 4, "value [B, H, Sk, Dv]", op);
  const Shape& q = query->shape();
  const Shape& k = key->shape();
  const Shape& v = value->shape();
  auto shapes = [&] {
    return concat("query ", q.to_string(), ", key ", k.to_string(), ", value ", v.to_string());
  };
  if (k[3] != q[3]) fail<ShapeMismatch>(op, "query and key dims differ: ", shapes());
  if (v[2] != k[2]) fail<ShapeMismatch>(op, "key and value lengths differ: ", shapes());
  Shape scores{1, 1, q[2], k[2]};
  for (std::size_t d = 0; d < 2; ++d) {
    std::int64_t n = 1;
    for (const Shape* s : {&q, &k, &v}) {
      if ((*s)[d] != 1 && n != 1 && (*s)[d] != n) {
        fail<ShapeMismatch>(op, "batch and head dims cannot be broadcast: ", shapes());
      }
      if ((*s)[d] != 1) n = (*s)[d];
    }
    scores[d] = n;
  }
  if (mask && !broadcasts_to((*mask)->shape(), scores)) {
    fail<ShapeMismatch>(op, "mask shape ", (*mask)->shape().to_string(),
                        " does not broadcast to the scores ", scores.to_string());
  }
  if (bias && !broadcasts_to((*bias)->shape(), scores)) {
    fail<ShapeMismatch>(op, "bias shape ", (*bias)->shape().to_string(),
                        " does not broadcast to the scores ", scores.to_string());
  }
  if (options.scale && !std::isfinite(*options.scale)) {
    fail<InvalidArgument>(op, "scale must be finite, got ", *options.scale);
  }
  if (!(options.dropout >= 0.0 && options.dropout <= 1.0)) {
    fail<InvalidArgument>(op, "dropout must be in [0, 1], got ", options.dropout);
  }
  if (bias) {
    promote_all({&query, &key, &value, &*bias}, op);
  } else {
    promote_all({&query, &key, &value}, op);
  }
  // The mask's seed, from the device's random stream (contract/attention_dropout.h): a tensor,
  // so that a captured region draws a new one before each replay. 2^53: every integer a double
  // holds.
  std::optional<Primitive> dropout_seed;
  if (options.dropout > 0.0) {
    dropout_seed =
        backend.random(Shape{1}, Distribution::uniform(0.0, 0x1.0p53), DType::I64, query->device());
  }
  return backend.attention(std::move(query), std::move(key), std::move(value), std::move(mask),
                           std::move(bias), std::move(dropout_seed), options);
}

}  // namespace kiln::detail

#include "kiln/nn/loss.h"

#include "kiln/activation.h"
#include "kiln/autocast.h"
#include "kiln/detail/format.h"
#include "kiln/graph.h"

namespace kiln::nn {
namespace {

template <std::size_t D>
Tensor<1> reduce(const Tensor<D>& loss, Reduction reduction) {
  return reduction == Reduction::Sum ? loss.sum() : loss.mean();
}

template <std::size_t D>
void check_same_shape(const char* op, const Tensor<D>& input, const Tensor<D>& target) {
  if (!(input.shape() == target.shape())) {
    kiln::detail::fail<ShapeMismatch>(op, "input ", input.shape().to_string(), " and target ",
                                      target.shape().to_string(), " must have the same shape");
  }
}

// v [n] shaped to broadcast along `dim` of a rank-D tensor.
template <std::size_t D>
Tensor<D> along(const Tensor<1>& v, std::size_t dim) {
  if constexpr (D == 1) {
    return v;
  } else {
    kiln::detail::DimVector dims(D, 1);
    dims[dim] = v.dims()[0];
    return v.template reshape<D>(Shape(std::move(dims)));
  }
}

void check_class_vector(const char* op, const char* name, const Tensor<1>& v,
                        std::int64_t classes) {
  if (v.dims()[0] != classes) {
    kiln::detail::fail<ShapeMismatch>(op, name, " ", v.shape().to_string(),
                                      " must have one entry per class (", classes, ")");
  }
}

// The per-sample losses -w[t] * log_probabilities[t] (0 where the target is ignored) and the
// per-sample weights w[t] (1 without class weights, 0 where ignored), whose sum is the divisor
// of the mean.
template <std::size_t D>
struct Picked {
  Tensor<D - 1> loss;
  Tensor<D - 1> weight;
};

// The targets with ignored positions reading class 0 (their loss is then zeroed, so any
// ignore_index works), and the per-sample weights: w[t] (1 without class weights), 0 where
// ignored. The shapes and every target's range are checked here.
template <std::size_t D>
struct Targets {
  Tensor<D - 1, Int> safe;
  Tensor<D - 1> weight;
};

template <std::size_t D>
Targets<D> checked_targets(const char* op, const Shape& shape, DType dtype,
                           const Tensor<D - 1, Int>& target,
                           const std::optional<Tensor<1>>& class_weight,
                           std::int64_t ignore_index) {
  const std::int64_t classes = shape[1];
  bool shapes_agree = target.shape()[0] == shape[0];
  for (std::size_t d = 2; d < D; ++d)
    shapes_agree = shapes_agree && target.shape()[d - 1] == shape[d];
  if (!shapes_agree) {
    kiln::detail::fail<ShapeMismatch>(op, "target ", target.shape().to_string(),
                                      " must be the input ", shape.to_string(),
                                      " without its class dim 1");
  }
  if (class_weight) check_class_vector(op, "weight", *class_weight, classes);
  const Tensor<D - 1, Bool> ignored = target.equal_elem(ignore_index);
  const Tensor<D - 1, Int> safe = target.mask_fill(ignored, 0);
  // Inside a capture nothing is read to the host: a target out of range is then caught by the
  // gather that picks it (at once on the CPU, at the next read on cuda).
  const bool out_of_range = !capture_open() && safe.lower_elem(0)
                                                   .logical_or(safe.greater_equal_elem(classes))
                                                   .any()
                                                   .into_data()
                                                   .template to_vec<bool>()
                                                   .at(0);
  if (out_of_range) {
    kiln::detail::fail<InvalidArgument>(op, "a target is outside [0, ", classes,
                                        ") and is not ignore_index ", ignore_index);
  }
  Tensor<D - 1> weight = ignored.logical_not().float_(dtype);
  if (class_weight) {
    const Tensor<1, Int> flat = safe.template reshape<1>(Shape{safe.num_elements()});
    weight = weight * class_weight->select(0, flat).template reshape<D - 1>(target.shape());
  }
  return {safe, weight};
}

template <std::size_t D>
Picked<D> pick(const char* op, const Tensor<D>& log_probabilities, const Tensor<D - 1, Int>& target,
               const std::optional<Tensor<1>>& class_weight, std::int64_t ignore_index) {
  const Targets<D> t = checked_targets<D>(op, log_probabilities.shape(), log_probabilities.dtype(),
                                          target, class_weight, ignore_index);
  const Tensor<D - 1> picked =
      log_probabilities.gather(1, t.safe.unsqueeze(1)).template squeeze<D - 1>(1);
  return {-(picked * t.weight), t.weight};
}

template <std::size_t D>
Tensor<1> reduce_weighted(const Picked<D>& p, const Tensor<D - 1>& loss, Reduction reduction) {
  // A mean of weighted samples divides by their total weight; with every sample ignored that is
  // 0 / 0 = NaN, as in PyTorch.
  return reduction == Reduction::Sum ? loss.sum() : loss.sum() / p.weight.sum();
}

}  // namespace

// ---- regression ----

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> mse_loss_unreduced(const Tensor<D>& input,
                                                        const Tensor<D>& target) {
  check_same_shape("mse_loss", input, target);
  return (input - target).square();
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> mse_loss(const Tensor<D>& input, const Tensor<D>& target,
                                              Reduction reduction) {
  return reduce(mse_loss_unreduced(input, target), reduction);
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> l1_loss_unreduced(const Tensor<D>& input,
                                                       const Tensor<D>& target) {
  check_same_shape("l1_loss", input, target);
  return (input - target).abs();
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> l1_loss(const Tensor<D>& input, const Tensor<D>& target,
                                             Reduction reduction) {
  return reduce(l1_loss_unreduced(input, target), reduction);
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> huber_loss_unreduced(const Tensor<D>& input,
                                                          const Tensor<D>& target, double delta) {
  const char* op = "huber_loss";
  check_same_shape(op, input, target);
  if (!(delta > 0.0)) kiln::detail::fail<InvalidArgument>(op, "delta ", delta, " must be positive");
  // With q = min(d, delta): q^2 / 2 + delta (d - q) is d^2 / 2 below delta and
  // delta (d - delta / 2) above, with no branch.
  const Tensor<D> distance = (input - target).abs();
  const Tensor<D> quadratic = distance.clamp_max(delta);
  return quadratic.square() * 0.5 + (distance - quadratic) * delta;
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> huber_loss(const Tensor<D>& input, const Tensor<D>& target,
                                                double delta, Reduction reduction) {
  return reduce(huber_loss_unreduced(input, target, delta), reduction);
}

// ---- classification ----

template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<D - 1> nll_loss_unreduced(const Tensor<D>& log_probabilities,
                                                            const Tensor<D - 1, Int>& target,
                                                            const NllOptions& options) {
  return pick("nll_loss", log_probabilities, target, options.weight, options.ignore_index).loss;
}

template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<1> nll_loss(const Tensor<D>& log_probabilities,
                                              const Tensor<D - 1, Int>& target,
                                              const NllOptions& options, Reduction reduction) {
  const Picked<D> p =
      pick("nll_loss", log_probabilities, target, options.weight, options.ignore_index);
  return reduce_weighted(p, p.loss, reduction);
}

namespace {

// The unreduced cross entropy and the per-sample weights for the mean. Logits of rank 2 without
// label smoothing go through softmax_cross_entropy (ops.def): the log-probabilities are never
// written, only the logits are kept for the backward pass, and 16-bit logits are read as they
// are. The loss is then f32 for 16-bit logits; outside an autocast scope it is cast back to the
// logits' dtype, as log_softmax's path gives.
template <std::size_t D>
std::pair<Tensor<D - 1>, Picked<D>> cross_entropy_parts(const Tensor<D>& logits,
                                                        const Tensor<D - 1, Int>& target,
                                                        const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  const double s = options.label_smoothing;
  if (!(s >= 0.0 && s <= 1.0)) {
    kiln::detail::fail<InvalidArgument>(op, "label_smoothing ", s, " is not in [0, 1]");
  }
  if constexpr (D == 2) {
    if (s == 0.0) {
      const DType dtype = logits.dtype();
      const bool narrow = dtype == DType::F16 || dtype == DType::BF16;
      const DType loss_dtype = narrow ? DType::F32 : dtype;
      const Targets<D> t = checked_targets<D>(op, logits.shape(), loss_dtype, target,
                                              options.weight, options.ignore_index);
      const Tensor<1> rows = Tensor<1>::wrap(
          kiln::detail::softmax_cross_entropy(logits.primitive(), t.safe.primitive()));
      Picked<D> p{rows * t.weight, t.weight};
      if (narrow && !autocast_dtype(logits.device())) {
        p = {p.loss.cast(dtype), p.weight.cast(dtype)};
      }
      return {p.loss, p};
    }
  }
  const Tensor<D> log_probabilities = activation::log_softmax(logits, 1);
  Picked<D> p = pick(op, log_probabilities, target, options.weight, options.ignore_index);
  if (s == 0.0) return {p.loss, p};
  // The uniform part of the smoothed target: -sum_c w[c] log p_c per sample, zero where
  // ignored, averaged over classes.
  const std::int64_t classes = logits.dims()[1];
  Tensor<D> weighted = log_probabilities;
  if (options.weight) weighted = weighted * along<D>(*options.weight, 1);
  const Tensor<D - 1> keep = target.not_equal_elem(options.ignore_index).float_(logits.dtype());
  const Tensor<D - 1> uniform = -(weighted.sum_dim(1).template squeeze<D - 1>(1) * keep);
  const Tensor<D - 1> loss = p.loss * (1.0 - s) + uniform * (s / static_cast<double>(classes));
  return {loss, p};
}

}  // namespace

template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<D - 1> cross_entropy_unreduced(
    const Tensor<D>& logits, const Tensor<D - 1, Int>& target, const CrossEntropyOptions& options) {
  return cross_entropy_parts(logits, target, options).first;
}

template <std::size_t D>
requires(D >= 2 &&
         D <= 5) Tensor<1> cross_entropy(const Tensor<D>& logits, const Tensor<D - 1, Int>& target,
                                         const CrossEntropyOptions& options, Reduction reduction) {
  const auto [loss, p] = cross_entropy_parts(logits, target, options);
  return reduce_weighted(p, loss, reduction);
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> binary_cross_entropy_with_logits_unreduced(
    const Tensor<D>& logits, const Tensor<D>& target, const BinaryCrossEntropyOptions& options) {
  const char* op = "binary_cross_entropy_with_logits";
  check_same_shape(op, logits, target);
  const std::int64_t last = logits.dims()[D - 1];
  // log(1 + exp(-x)) without overflow: log1p(exp(-|x|)) + max(-x, 0).
  const Tensor<D> softplus_of_negative = (-logits.abs()).exp().log1p() + (-logits).clamp_min(0.0);
  Tensor<D> positive_weight = softplus_of_negative;
  if (options.pos_weight) {
    check_class_vector(op, "pos_weight", *options.pos_weight, last);
    positive_weight =
        (target * (along<D>(*options.pos_weight, D - 1) - 1.0) + 1.0) * softplus_of_negative;
  }
  Tensor<D> loss = (1.0 - target) * logits + positive_weight;
  if (options.weight) {
    check_class_vector(op, "weight", *options.weight, last);
    loss = loss * along<D>(*options.weight, D - 1);
  }
  return loss;
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> binary_cross_entropy_with_logits(
    const Tensor<D>& logits, const Tensor<D>& target, const BinaryCrossEntropyOptions& options,
    Reduction reduction) {
  return reduce(binary_cross_entropy_with_logits_unreduced(logits, target, options), reduction);
}

// ---- the ranks the header promises ----
#define KILN_ELEMENTWISE_LOSSES(D)                                                         \
  template Tensor<D> mse_loss_unreduced<D>(const Tensor<D>&, const Tensor<D>&);            \
  template Tensor<1> mse_loss<D>(const Tensor<D>&, const Tensor<D>&, Reduction);           \
  template Tensor<D> l1_loss_unreduced<D>(const Tensor<D>&, const Tensor<D>&);             \
  template Tensor<1> l1_loss<D>(const Tensor<D>&, const Tensor<D>&, Reduction);            \
  template Tensor<D> huber_loss_unreduced<D>(const Tensor<D>&, const Tensor<D>&, double);  \
  template Tensor<1> huber_loss<D>(const Tensor<D>&, const Tensor<D>&, double, Reduction); \
  template Tensor<D> binary_cross_entropy_with_logits_unreduced<D>(                        \
      const Tensor<D>&, const Tensor<D>&, const BinaryCrossEntropyOptions&);               \
  template Tensor<1> binary_cross_entropy_with_logits<D>(                                  \
      const Tensor<D>&, const Tensor<D>&, const BinaryCrossEntropyOptions&, Reduction);
KILN_ELEMENTWISE_LOSSES(1)
KILN_ELEMENTWISE_LOSSES(2)
KILN_ELEMENTWISE_LOSSES(3)
KILN_ELEMENTWISE_LOSSES(4)
KILN_ELEMENTWISE_LOSSES(5)
#undef KILN_ELEMENTWISE_LOSSES

#define KILN_CLASSIFICATION_LOSSES(D)                                                            \
  template Tensor<D - 1> nll_loss_unreduced<D>(const Tensor<D>&, const Tensor<D - 1, Int>&,      \
                                               const NllOptions&);                               \
  template Tensor<1> nll_loss<D>(const Tensor<D>&, const Tensor<D - 1, Int>&, const NllOptions&, \
                                 Reduction);                                                     \
  template Tensor<D - 1> cross_entropy_unreduced<D>(const Tensor<D>&, const Tensor<D - 1, Int>&, \
                                                    const CrossEntropyOptions&);                 \
  template Tensor<1> cross_entropy<D>(const Tensor<D>&, const Tensor<D - 1, Int>&,               \
                                      const CrossEntropyOptions&, Reduction);
KILN_CLASSIFICATION_LOSSES(2)
KILN_CLASSIFICATION_LOSSES(3)
KILN_CLASSIFICATION_LOSSES(4)
KILN_CLASSIFICATION_LOSSES(5)
#undef KILN_CLASSIFICATION_LOSSES

}  // namespace kiln::nn

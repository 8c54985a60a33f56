// Loss functions, as PyTorch's torch.nn.functional ones. Each reduces to a one-element tensor
// (Reduction::Mean by default, or Sum) ready for backward(); the *_unreduced forms return the
// per-element (per-sample for classification) losses, PyTorch's reduction='none'.
//
//   Tensor<1> loss = nn::cross_entropy(logits, labels);   // logits [N, C], labels Tensor<1, Int>
//   [N] Tensor<1> smooth = nn::cross_entropy(logits, labels, {.label_smoothing = 0.1}); Tensor<1>
//   mse = nn::mse_loss(prediction, target); Gradients g = loss.backward();
//
// Classification losses take the class dim at 1: logits [N, C] with targets [N], or
// [N, C, d1, ...] with targets [N, d1, ...]. Shapes, class counts and ranges are checked
// (ShapeMismatch / InvalidArgument naming the values); a target outside [0, C) that is not
// ignore_index throws InvalidArgument.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/tensor.h"

namespace kiln::nn {

enum class Reduction : std::uint8_t {
  Mean,  // the average (weighted, for losses with class weights)
  Sum,
};

// ---- regression: input and target of one shape ----

// (input - target)^2
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> mse_loss_unreduced(const Tensor<D>& input,
                                                        const Tensor<D>& target);
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> mse_loss(const Tensor<D>& input, const Tensor<D>& target,
                                              Reduction reduction = Reduction::Mean);

// |input - target|
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> l1_loss_unreduced(const Tensor<D>& input,
                                                       const Tensor<D>& target);
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> l1_loss(const Tensor<D>& input, const Tensor<D>& target,
                                             Reduction reduction = Reduction::Mean);

// With d = |input - target|: d^2 / 2 where d < delta, delta (d - delta / 2) elsewhere
// (quadratic near zero, linear beyond; delta > 0).
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> huber_loss_unreduced(const Tensor<D>& input,
                                                          const Tensor<D>& target,
                                                          double delta = 1.0);
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> huber_loss(const Tensor<D>& input, const Tensor<D>& target,
                                                double delta = 1.0,
                                                Reduction reduction = Reduction::Mean);

// ---- classification ----

struct CrossEntropyOptions {
  // [C]: the loss of a sample of class c is multiplied by weight[c], and Mean divides by the
  // sum of the weights of the counted samples (as PyTorch).
  std::optional<Tensor<1>> weight = std::nullopt;
  // Samples with this target add nothing and are not counted.
  std::int64_t ignore_index = -100;
  // In [0, 1]: the target becomes (1 - s) one_hot + s / C (PyTorch's formula, weights
  // included).
  double label_smoothing = 0.0;
};

// -log softmax(logits)[target], computed with log_softmax (stable for any logits).
template <std::size_t D>
requires(D >= 2 &&
         D <= 5) Tensor<D - 1> cross_entropy_unreduced(const Tensor<D>& logits,
                                                       const Tensor<D - 1, Int>& target,
                                                       const CrossEntropyOptions& options = {});
template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<1> cross_entropy(const Tensor<D>& logits,
                                                   const Tensor<D - 1, Int>& target,
                                                   const CrossEntropyOptions& options = {},
                                                   Reduction reduction = Reduction::Mean);

struct NllOptions {
  std::optional<Tensor<1>> weight = std::nullopt;  // [C], as in CrossEntropyOptions
  std::int64_t ignore_index = -100;
};

// -log_probabilities[target] (the input holds log-probabilities, e.g. from log_softmax).
template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<D - 1> nll_loss_unreduced(const Tensor<D>& log_probabilities,
                                                            const Tensor<D - 1, Int>& target,
                                                            const NllOptions& options = {});
template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<1> nll_loss(const Tensor<D>& log_probabilities,
                                              const Tensor<D - 1, Int>& target,
                                              const NllOptions& options = {},
                                              Reduction reduction = Reduction::Mean);

struct BinaryCrossEntropyOptions {
  // [C] along the last dim: a rescaling weight per class (for a weight per sample, multiply the
  // unreduced loss).
  std::optional<Tensor<1>> weight = std::nullopt;
  // [C] along the last dim: the weight of the positive term, > 1 favouring recall.
  std::optional<Tensor<1>> pos_weight = std::nullopt;
};

// -(pos_weight y log σ(x) + (1 - y) log(1 - σ(x))) * weight, with targets y in [0, 1], computed
// as (1 - y) x + (1 + (pos_weight - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)): no overflow for
// any logit.
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> binary_cross_entropy_with_logits_unreduced(
    const Tensor<D>& logits, const Tensor<D>& target,
    const BinaryCrossEntropyOptions& options = {});
template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<1> binary_cross_entropy_with_logits(
    const Tensor<D>& logits, const Tensor<D>& target, const BinaryCrossEntropyOptions& options = {},
    Reduction reduction = Reduction::Mean);

}  // namespace kiln::nn

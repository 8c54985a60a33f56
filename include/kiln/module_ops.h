// Module ops on channels-first tensors (N, C, spatial...):
//   auto y = kiln::module::conv2d(x, weight, bias, {.stride = {1, 1}, .padding = {1, 1}});
//   auto p = kiln::module::max_pool2d(y, {.kernel_size = {2, 2}});    // stride = kernel_size
//   auto z = kiln::module::interpolate(p, {64, 64}, {.mode = InterpolateMode::Bilinear});
// Option vectors left empty take their defaults (stride 1, padding 0, dilation 1, padding_out 0;
// pooling stride = kernel_size); a given vector has one entry per spatial dim. Shapes and
// options are checked (ShapeMismatch / InvalidArgument naming the op and the values).
#pragma once

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::module {

// x [N, C_in, L], weight [C_out, C_in / groups, K]
inline Tensor<3> conv1d(const Tensor<3>& x, const Tensor<3>& weight,
                        const std::optional<Tensor<1>>& bias = std::nullopt,
                        ConvOptions options = {}) {
  return Tensor<3>::wrap(detail::conv(x.primitive(), weight.primitive(),
                                      bias ? std::optional(bias->primitive()) : std::nullopt,
                                      std::move(options), 1));
}
inline Tensor<4> conv2d(const Tensor<4>& x, const Tensor<4>& weight,
                        const std::optional<Tensor<1>>& bias = std::nullopt,
                        ConvOptions options = {}) {
  return Tensor<4>::wrap(detail::conv(x.primitive(), weight.primitive(),
                                      bias ? std::optional(bias->primitive()) : std::nullopt,
                                      std::move(options), 2));
}
inline Tensor<5> conv3d(const Tensor<5>& x, const Tensor<5>& weight,
                        const std::optional<Tensor<1>>& bias = std::nullopt,
                        ConvOptions options = {}) {
  return Tensor<5>::wrap(detail::conv(x.primitive(), weight.primitive(),
                                      bias ? std::optional(bias->primitive()) : std::nullopt,
                                      std::move(options), 3));
}
// weight [C_in, C_out / groups, k...]
template <std::size_t D>
Tensor<D> conv_transpose(const Tensor<D>& x, const Tensor<D>& weight,
                         const std::optional<Tensor<1>>& bias = std::nullopt,
                         ConvTransposeOptions options = {}) {
  static_assert(D >= 3 && D <= 5, "conv_transpose takes 1, 2 or 3 spatial dims");
  return Tensor<D>::wrap(detail::conv_transpose(
      x.primitive(), weight.primitive(), bias ? std::optional(bias->primitive()) : std::nullopt,
      std::move(options), D - 2));
}
inline Tensor<3> conv_transpose1d(const Tensor<3>& x, const Tensor<3>& w,
                                  const std::optional<Tensor<1>>& b = std::nullopt,
                                  ConvTransposeOptions o = {}) {
  return conv_transpose(x, w, b, std::move(o));
}
inline Tensor<4> conv_transpose2d(const Tensor<4>& x, const Tensor<4>& w,
                                  const std::optional<Tensor<1>>& b = std::nullopt,
                                  ConvTransposeOptions o = {}) {
  return conv_transpose(x, w, b, std::move(o));
}
inline Tensor<5> conv_transpose3d(const Tensor<5>& x, const Tensor<5>& w,
                                  const std::optional<Tensor<1>>& b = std::nullopt,
                                  ConvTransposeOptions o = {}) {
  return conv_transpose(x, w, b, std::move(o));
}

// Pooling over D - 2 spatial dims: kernel_size is required; NaN wins a max window.
template <std::size_t D>
Tensor<D> max_pool(const Tensor<D>& x, PoolOptions options) {
  static_assert(D >= 3 && D <= 5, "max_pool takes 1, 2 or 3 spatial dims");
  return Tensor<D>::wrap(detail::max_pool(x.primitive(), std::move(options), D - 2));
}
inline Tensor<3> max_pool1d(const Tensor<3>& x, PoolOptions o) { return max_pool(x, std::move(o)); }
inline Tensor<4> max_pool2d(const Tensor<4>& x, PoolOptions o) { return max_pool(x, std::move(o)); }
inline Tensor<5> max_pool3d(const Tensor<5>& x, PoolOptions o) { return max_pool(x, std::move(o)); }
// Values and the flat index (within each spatial plane, e.g. h * W + w) of each maximum.
template <std::size_t D>
std::pair<Tensor<D>, Tensor<D, Int>> max_pool_with_indices(const Tensor<D>& x,
                                                           PoolOptions options) {
  static_assert(D >= 3 && D <= 5, "max_pool_with_indices takes 1, 2 or 3 spatial dims");
  auto [values, indices] = detail::max_pool_with_indices(x.primitive(), std::move(options), D - 2);
  return {Tensor<D>::wrap(std::move(values)), Tensor<D, Int>::wrap(std::move(indices))};
}
inline std::pair<Tensor<4>, Tensor<4, Int>> max_pool2d_with_indices(const Tensor<4>& x,
                                                                    PoolOptions o) {
  return max_pool_with_indices(x, std::move(o));
}
// Average pooling; count_include_pad and ceil_mode as in PyTorch (dilation must stay 1).
template <std::size_t D>
Tensor<D> avg_pool(const Tensor<D>& x, PoolOptions options) {
  static_assert(D >= 3 && D <= 5, "avg_pool takes 1, 2 or 3 spatial dims");
  return Tensor<D>::wrap(detail::avg_pool(x.primitive(), std::move(options), D - 2));
}
inline Tensor<3> avg_pool1d(const Tensor<3>& x, PoolOptions o) { return avg_pool(x, std::move(o)); }
inline Tensor<4> avg_pool2d(const Tensor<4>& x, PoolOptions o) { return avg_pool(x, std::move(o)); }
inline Tensor<5> avg_pool3d(const Tensor<5>& x, PoolOptions o) { return avg_pool(x, std::move(o)); }
// Output index i averages input [floor(i * in / out), ceil((i + 1) * in / out)).
template <std::size_t D>
Tensor<D> adaptive_avg_pool(const Tensor<D>& x, std::vector<std::int64_t> output_size) {
  static_assert(D >= 3 && D <= 5, "adaptive_avg_pool takes 1, 2 or 3 spatial dims");
  return Tensor<D>::wrap(detail::adaptive_avg_pool(x.primitive(), std::move(output_size)));
}
inline Tensor<3> adaptive_avg_pool1d(const Tensor<3>& x, std::int64_t size) {
  return adaptive_avg_pool(x, {size});
}
inline Tensor<4> adaptive_avg_pool2d(const Tensor<4>& x, std::array<std::int64_t, 2> size) {
  return adaptive_avg_pool(x, {size[0], size[1]});
}
inline Tensor<5> adaptive_avg_pool3d(const Tensor<5>& x, std::array<std::int64_t, 3> size) {
  return adaptive_avg_pool(x, {size[0], size[1], size[2]});
}
// Row lookup: weights [V, E], indices [...] -> [..., E], e.g. token ids [B, S] -> [B, S, E].
// An index outside [0, V) throws InvalidArgument.
template <std::size_t D>
Tensor<D + 1> embedding(const Tensor<2>& weights, const Tensor<D, Int>& indices) {
  return Tensor<D + 1>::wrap(detail::embedding(weights.primitive(), indices.primitive()));
}
// x [N, C, H, W] resized to output_size {H', W'}: Nearest (source floor(i * in / out)),
// Bilinear or Bicubic (A = -0.75), with PyTorch's align_corners rule either way.
inline Tensor<4> interpolate(const Tensor<4>& x, std::array<std::int64_t, 2> output_size,
                             InterpolateOptions options = {}) {
  return Tensor<4>::wrap(
      detail::interpolate(x.primitive(), {output_size[0], output_size[1]}, options));
}
// im2col: [N, C, H, W] -> [N, C * kh * kw, L]
inline Tensor<3> unfold4d(const Tensor<4>& x, UnfoldOptions options) {
  return Tensor<3>::wrap(detail::unfold_patches(x.primitive(), std::move(options)));
}
// col2im, the adjoint of unfold4d: [N, C * kh * kw, L] -> [N, C, H, W]
inline Tensor<4> fold4d(const Tensor<3>& x, std::array<std::int64_t, 2> output_size,
                        UnfoldOptions options) {
  return Tensor<4>::wrap(
      detail::fold_patches(x.primitive(), {output_size[0], output_size[1]}, std::move(options)));
}
// x [..., in] @ weightᵀ (+ bias [out]) with weight [out, in]: PyTorch's layout
// (torch.nn.functional.linear), as nn::Linear and every checkpoint store it. A weight whose
// in-features do not match x's last dim is a ShapeMismatch naming the layout (a square weight
// cannot be told apart: pass the transpose of one stored [in, out]).
template <std::size_t D>
Tensor<D> linear(const Tensor<D>& x, const Tensor<2>& weight,
                 const std::optional<Tensor<1>>& bias = std::nullopt) {
  return Tensor<D>::wrap(detail::linear_out_in(
      x.primitive(), weight.primitive(), bias ? std::optional(bias->primitive()) : std::nullopt));
}
// Normalises over the last dim: (x - mean) / sqrt(var + epsilon) * gamma + beta, with the
// biased variance; gamma and beta have the size of the last dim.
template <std::size_t D>
Tensor<D> layer_norm(const Tensor<D>& x, const Tensor<1>& gamma,
                     const std::optional<Tensor<1>>& beta = std::nullopt, double epsilon = 1e-5) {
  return Tensor<D>::wrap(detail::layer_norm(x.primitive(), gamma.primitive(),
                                            beta ? std::optional(beta->primitive()) : std::nullopt,
                                            epsilon));
}
// Inference-form batch norm over dim 1 (x [N, C, ...]) with given per-channel statistics:
// (x - mean) / sqrt(variance + epsilon) * gamma + beta.
template <std::size_t D>
Tensor<D> batch_norm(const Tensor<D>& x, const Tensor<1>& gamma, const Tensor<1>& beta,
                     const Tensor<1>& mean, const Tensor<1>& variance, double epsilon = 1e-5) {
  return Tensor<D>::wrap(detail::batch_norm(x.primitive(), gamma.primitive(), beta.primitive(),
                                            mean.primitive(), variance.primitive(), epsilon));
}
// Which attention scores are left out. A bare bool tensor does not say: PyTorch's
// key_padding_mask marks what is left out, scaled_dot_product_attention's boolean attn_mask and
// Hugging Face's attention_mask mark what is kept. So the polarity is said where a mask is made:
//   module::AttentionMask<4>::exclude(is_padding)  // true: left out
//   module::AttentionMask<4>::attend(may_attend)   // true: attended
// and a bare Tensor<D, Bool> does not convert to one.
template <std::size_t D>
class AttentionMask {
 public:
  static AttentionMask exclude(Tensor<D, Bool> excluded) {
    return AttentionMask(std::move(excluded));
  }
  static AttentionMask attend(const Tensor<D, Bool>& attended) {
    return AttentionMask(attended.logical_not());
  }
  // true where a score is left out.
  const Tensor<D, Bool>& excluded() const noexcept { return excluded_; }

 private:
  explicit AttentionMask(Tensor<D, Bool> excluded) : excluded_(std::move(excluded)) {}
  Tensor<D, Bool> excluded_;
};

// softmax(q k^T * scale + bias, masked) v on q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv]
// -> [B, H, Sq, Dv]. B and H broadcast (size 1 is shared). mask and bias broadcast to the
// scores [B, H, Sq, Sk]; the mask's excluded entries are left out. is_causal excludes keys j > i
// (top-left aligned, as PyTorch) and combines with mask. scale defaults to 1/sqrt(D). A query
// row whose keys are all excluded gets zero weights: its output row is zeros, not NaN.
//   auto y = kiln::module::attention(q, k, v, std::nullopt, std::nullopt,
//                                    {.scale = std::nullopt, .is_causal = true});
inline Tensor<4> attention(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                           const std::optional<AttentionMask<4>>& mask = std::nullopt,
                           const std::optional<Tensor<4>>& bias = std::nullopt,
                           AttentionOptions options = {}) {
  return Tensor<4>::wrap(
      detail::attention(q.primitive(), k.primitive(), v.primitive(),
                        mask ? std::optional(mask->excluded().primitive()) : std::nullopt,
                        bias ? std::optional(bias->primitive()) : std::nullopt, options));
}

}  // namespace kiln::module

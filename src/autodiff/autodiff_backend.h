// The autodiff decorator: `dev.autodiff()` runs ops here. Each op runs on the inner backend; when
// an input is tracked, the op also records a graph node holding its backward rule. Rules are
// written in ops (on a Backend&), so they run on any backend and, under create_graph, on this
// decorator itself, which makes gradients differentiable again.
//
// AutodiffPassthrough handles every op of ops.def without a rule: inputs are unwrapped, the inner
// backend runs the op, and the result is untracked. That is right for ops whose results carry no
// gradient (comparisons, argmax, integer and bool ops, creation); a float result computed from a
// tracked input without a rule is refused rather than silently cut from the graph.
// AutodiffBackend overrides the differentiable ops; their rules live in rules_<family>.cpp.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "autodiff/autodiff_tensor.h"
#include "autodiff/op_node.h"
#include "backend/backend.h"
#include "kiln/autodiff.h"

namespace kiln::autodiff {

class AutodiffPassthrough : public Backend {
 public:
  explicit AutodiffPassthrough(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  Backend& inner() const noexcept { return *inner_; }

  std::string name() const override { return "autodiff<" + inner_->name() + ">"; }
  Device device() const override { return inner_->device().autodiff(); }
  DeviceSettings default_settings() const override { return inner_->default_settings(); }
  DTypeUsageSet dtype_usage(DType dtype) const override { return inner_->dtype_usage(dtype); }
  void seed(std::uint64_t seed) override { inner_->seed(seed); }
  void sync() override { inner_->sync(); }
  void flush() override { inner_->flush(); }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void memory_cleanup() override { inner_->memory_cleanup(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  bool autodiff_enabled() const override { return true; }

#define KILN_OP(name, group, kinds, result, params, args, availability) result name params override;
#include "backend/ops.def"
#undef KILN_OP

 private:
  std::shared_ptr<Backend> inner_;
};

// How an op's output relates to memory traffic: elementwise outputs are cheap to recompute and
// are not stored under balanced checkpointing; everything else keeps what its rule needs.
enum class Cost : std::uint8_t { Elementwise, Stored };

// Which values a rule reads: bit i for input i, kKeepOut for the output.
using Keep = std::uint32_t;
inline constexpr Keep kKeepNone = 0;
inline constexpr Keep kKeepIn0 = 1u << 0;
inline constexpr Keep kKeepIn1 = 1u << 1;
inline constexpr Keep kKeepIn2 = 1u << 2;
inline constexpr Keep kKeepIn3 = 1u << 3;
inline constexpr Keep kKeepIn4 = 1u << 4;
inline constexpr Keep kKeepAllIn = (1u << 30) - 1;
inline constexpr Keep kKeepOut = 1u << 31;

template <std::size_t N>
using Inputs = InputArray<N, Primitive>;

// The longest run of elementwise ops that balanced checkpointing recomputes in one go.
inline constexpr std::uint8_t kMaxRecomputeChain = 8;

class AutodiffBackend final : public AutodiffPassthrough {
 public:
  using AutodiffPassthrough::AutodiffPassthrough;

  // Runs forward(inner backend, inner inputs) and, when an input is tracked, records a node whose
  // rule(BackwardArgs&, output gradient) returns one gradient per input (null for none).
  // `precomputed` supplies the output when the caller already has it (ops with two outputs).
  template <std::size_t N, class Forward, class Rule>
  Primitive record(const char* op, Cost cost, Inputs<N> inputs, Keep keep, Forward forward,
                   Rule rule, Primitive precomputed = nullptr);

  // ---- the ops with backward rules (rules_<family>.cpp) ----
  Primitive to_device(Primitive x, Device device) override;
  Primitive cast(Primitive x, DType dtype) override;

  // arithmetic
  Primitive add(Primitive lhs, Primitive rhs) override;
  Primitive sub(Primitive lhs, Primitive rhs) override;
  Primitive mul(Primitive lhs, Primitive rhs) override;
  Primitive div(Primitive lhs, Primitive rhs) override;
  Primitive remainder(Primitive lhs, Primitive rhs) override;
  Primitive pow(Primitive lhs, Primitive rhs) override;
  Primitive atan2(Primitive lhs, Primitive rhs) override;
  Primitive maximum(Primitive lhs, Primitive rhs) override;
  Primitive minimum(Primitive lhs, Primitive rhs) override;
  Primitive hypot(Primitive lhs, Primitive rhs) override;
  Primitive add_scalar(Primitive x, Scalar value) override;
  Primitive sub_scalar(Primitive x, Scalar value) override;
  Primitive mul_scalar(Primitive x, Scalar value) override;
  Primitive div_scalar(Primitive x, Scalar value) override;
  Primitive remainder_scalar(Primitive x, Scalar value) override;
  Primitive pow_scalar(Primitive x, Scalar value) override;
  Primitive neg(Primitive x) override;
  Primitive clamp(Primitive x, Scalar min, Scalar max) override;
  Primitive clamp_min(Primitive x, Scalar min) override;
  Primitive clamp_max(Primitive x, Scalar max) override;
  Primitive matmul(Primitive lhs, Primitive rhs) override;
  Primitive cross(Primitive lhs, Primitive rhs, std::int64_t dim) override;

  // unary maths
#define KILN_AD_UNARY(name) Primitive name(Primitive x) override;
  KILN_AD_UNARY(abs) KILN_AD_UNARY(sign) KILN_AD_UNARY(square) KILN_AD_UNARY(recip)
  KILN_AD_UNARY(exp) KILN_AD_UNARY(expm1) KILN_AD_UNARY(exp2) KILN_AD_UNARY(log)
  KILN_AD_UNARY(log1p) KILN_AD_UNARY(log2) KILN_AD_UNARY(log10) KILN_AD_UNARY(sqrt)
  KILN_AD_UNARY(rsqrt) KILN_AD_UNARY(sin) KILN_AD_UNARY(cos) KILN_AD_UNARY(tan)
  KILN_AD_UNARY(asin) KILN_AD_UNARY(acos) KILN_AD_UNARY(atan) KILN_AD_UNARY(sinh)
  KILN_AD_UNARY(cosh) KILN_AD_UNARY(tanh) KILN_AD_UNARY(asinh) KILN_AD_UNARY(acosh)
  KILN_AD_UNARY(atanh) KILN_AD_UNARY(erf) KILN_AD_UNARY(round) KILN_AD_UNARY(floor)
  KILN_AD_UNARY(ceil) KILN_AD_UNARY(trunc)
#undef KILN_AD_UNARY

  // reductions (rules_reduce.cpp)
  Primitive sum(Primitive x) override;
  Primitive sum_dim(Primitive x, std::int64_t dim) override;
  Primitive mean(Primitive x) override;
  Primitive mean_dim(Primitive x, std::int64_t dim) override;
  Primitive prod(Primitive x) override;
  Primitive prod_dim(Primitive x, std::int64_t dim) override;
  Primitive max(Primitive x) override;
  Primitive min(Primitive x) override;
  Primitive max_dim(Primitive x, std::int64_t dim) override;
  Primitive min_dim(Primitive x, std::int64_t dim) override;
  PrimitivePair max_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) override;
  PrimitivePair min_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) override;
  // cumulative (rules_scan.cpp)
  Primitive cumsum(Primitive x, std::int64_t dim) override;
  Primitive cumprod(Primitive x, std::int64_t dim) override;
  Primitive cummin(Primitive x, std::int64_t dim) override;
  Primitive cummax(Primitive x, std::int64_t dim) override;
  // indexing (rules_index.cpp)
  Primitive gather(std::int64_t dim, Primitive x, Primitive indices) override;
  Primitive scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                    IndexingUpdate update) override;
  Primitive select(Primitive x, std::int64_t dim, Primitive indices) override;
  Primitive select_assign(Primitive x, std::int64_t dim, Primitive indices, Primitive values,
                          IndexingUpdate update) override;
  Primitive gather_nd(Primitive x, Primitive indices) override;
  Primitive scatter_nd(Primitive x, Primitive indices, Primitive values,
                       IndexingUpdate update) override;
  Primitive slice(Primitive x, ResolvedSlices slices) override;
  Primitive slice_assign(Primitive x, ResolvedSlices slices, Primitive values) override;
  Primitive mask_where(Primitive x, Primitive mask, Primitive values) override;
  Primitive mask_fill(Primitive x, Primitive mask, Scalar value) override;
  Primitive mask_select(Primitive x, Primitive mask) override;
  // layout (rules_layout.cpp)
  Primitive reshape(Primitive x, Shape shape) override;
  Primitive expand(Primitive x, Shape shape) override;
  Primitive permute(Primitive x, Axes axes) override;
  Primitive swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) override;
  Primitive flip(Primitive x, Axes axes) override;
  Primitive unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) override;
  Primitive cat(PrimitiveList xs, std::int64_t dim) override;
  Primitive repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) override;
  // sorting (rules_sort.cpp)
  Primitive sort(Primitive x, std::int64_t dim, bool descending) override;
  PrimitivePair sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                  DType index_dtype) override;
  PrimitivePair topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim, bool largest,
                                  DType index_dtype) override;
  // module ops (rules_module.cpp)
  Primitive conv(Primitive x, Primitive weight, OptionalPrimitive bias,
                 ConvOptions options) override;
  Primitive conv_transpose(Primitive x, Primitive weight, OptionalPrimitive bias,
                           ConvTransposeOptions options) override;
  Primitive conv_x_backward(Primitive x, Primitive weight, Primitive output_grad,
                            ConvOptions options) override;
  Primitive conv_weight_backward(Primitive x, Primitive weight, Primitive output_grad,
                                 ConvOptions options) override;
  Primitive conv_bias_backward(Primitive output_grad) override;
  Primitive avg_pool(Primitive x, PoolOptions options) override;
  Primitive avg_pool_backward(Primitive x, Primitive output_grad, PoolOptions options) override;
  Primitive adaptive_avg_pool(Primitive x, Axes output_size) override;
  Primitive adaptive_avg_pool_backward(Primitive x, Primitive output_grad) override;
  Primitive max_pool(Primitive x, PoolOptions options) override;
  PrimitivePair max_pool_with_indices(Primitive x, PoolOptions options,
                                      DType index_dtype) override;
  Primitive max_pool_with_indices_backward(Primitive x, Primitive output_grad, Primitive indices,
                                           PoolOptions options) override;
  Primitive embedding(Primitive weights, Primitive indices) override;
  Primitive embedding_backward(Primitive weights, Primitive output_grad,
                               Primitive indices) override;
  Primitive interpolate(Primitive x, Axes output_size, InterpolateOptions options) override;
  Primitive interpolate_backward(Primitive x, Primitive output_grad, Axes output_size,
                                 InterpolateOptions options) override;
  Primitive unfold_patches(Primitive x, UnfoldOptions options) override;
  Primitive fold_patches(Primitive x, Axes output_size, UnfoldOptions options) override;
  Primitive linear(Primitive x, Primitive weight, OptionalPrimitive bias) override;
  Primitive layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                       double epsilon) override;
  Primitive batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                       Primitive variance, double epsilon) override;
  Primitive attention(Primitive query, Primitive key, Primitive value, OptionalPrimitive mask,
                      OptionalPrimitive bias, AttentionOptions options) override;
  // activations (rules_activation.cpp)
  Primitive relu(Primitive x) override;
  Primitive relu_backward(Primitive output, Primitive grad) override;
  Primitive leaky_relu(Primitive x, Scalar negative_slope) override;
  Primitive prelu(Primitive x, Primitive alpha) override;
  Primitive gelu(Primitive x) override;
  Primitive gelu_backward(Primitive x, Primitive grad) override;
  Primitive sigmoid(Primitive x) override;
  Primitive sigmoid_backward(Primitive output, Primitive grad) override;
  Primitive silu(Primitive x) override;
  Primitive hard_sigmoid(Primitive x, Scalar alpha, Scalar beta) override;
  Primitive log_sigmoid(Primitive x) override;
  Primitive softmax(Primitive x, std::int64_t dim) override;
  Primitive log_softmax(Primitive x, std::int64_t dim) override;
  Primitive softmin(Primitive x, std::int64_t dim) override;
};

template <std::size_t N, class Forward, class Rule>
Primitive AutodiffBackend::record(const char* op, Cost cost, Inputs<N> inputs, Keep keep,
                                  Forward forward, Rule rule, Primitive precomputed) {
  using OpNodeType = OpNode<N, Forward, Rule>;
  const std::size_t count = inputs.size();
  const Node* newest = nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    const Node* parent = node_of(inputs[i]).get();
    if (parent != nullptr && (newest == nullptr || parent->order() > newest->order())) newest = parent;
  }
  Inputs<N> inner_inputs{};
  if constexpr (N == 0) inner_inputs.resize(count);
  InputArray<N, Lent> lent{};
  if constexpr (N == 0) lent.resize(count);
  // Lends input i to the inner op (see lend_inner), remembering the wrapper for reown.
  auto lend = [&](std::size_t i) { inner_inputs[i] = lend_inner(std::move(inputs[i]), lent[i]); };
  auto run_forward = [&] {
    Primitive out = forward(inner(), std::move(inner_inputs));
    for (const Lent& l : lent) out = reown(std::move(out), l);
    return out;
  };
  if (newest == nullptr) {
    if (precomputed) return wrap(std::move(precomputed));
    for (std::size_t i = 0; i < count; ++i) lend(i);
    return wrap(run_forward());
  }
  bool recompute = checkpointing() == CheckpointStrategy::Balanced &&
                   cost == Cost::Elementwise && !precomputed;
  std::uint8_t depth = 0;
  if (recompute) {
    for (std::size_t i = 0; i < count; ++i) {
      const Node* parent = node_of(inputs[i]).get();
      if (parent != nullptr && parent->recomputable()) depth = std::max(depth, parent->recompute_depth());
    }
    // Every kMaxRecomputeChain-th op of an elementwise chain is stored after all: backward then
    // recomputes (and holds) at most that many values at once, and recursion stays shallow.
    if (++depth > kMaxRecomputeChain) recompute = false;
  }
  auto node = std::allocate_shared<OpNodeType>(PoolAllocator<OpNodeType>{}, op, newest->order(),
                                               count, std::move(rule));
  auto& parents = node->parent_slots();
  auto& saved = node->saved_slots();
  for (std::size_t i = 0; i < count; ++i) {
    parents[i] = node_of(inputs[i]);
    const bool keep_input = recompute || (keep & (1u << std::min<std::size_t>(i, 29))) != 0;
    if (keep_input) {
      // An input that is itself recomputed is saved as its producer, not as a value.
      const bool lazy = parents[i] != nullptr && parents[i]->recomputable();
      saved[i] = Saved{lazy ? nullptr : inner_of(inputs[i]), parents[i]};
      inner_inputs[i] = inner_of(inputs[i]);
    } else {
      lend(i);
    }
  }
  Primitive out = precomputed ? std::move(precomputed) : run_forward();
  if ((keep & kKeepOut) != 0 && !recompute) node->set_output(out);
  if (recompute) {
    node->set_forward(std::move(forward));
    node->set_recompute_depth(depth);
  }
  return wrap(std::move(out), std::move(node));
}

// The gradient of a broadcast operand: g summed over the dims where shape has size 1.
Primitive reduce_to(Backend& b, Primitive g, const Shape& shape);

}  // namespace kiln::autodiff

// The CPU backend: every op overridden with a single-pass, multi-threaded kernel on strided
// views. Definitions are spread over one file per op family (cpu_<family>.cpp).
#pragma once

#include <atomic>
#include <memory>

#include "backend/backend.h"

namespace kiln {

class CpuBackend final : public Backend {
 public:
  // ---- device-level (cpu_backend.cpp) ----
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu(); }
  DeviceSettings default_settings() const override { return {}; }
  DTypeUsageSet dtype_usage(DType dtype) const override;
  void seed(std::uint64_t seed) override;
  MemoryStats memory_stats() const override;
  void memory_cleanup() override;
  void reset_peak_memory() override;
  // Reserves count random values: returns the counter of the first (thread-safe).
  std::uint64_t take_random_counter(std::uint64_t count) noexcept;
  std::uint64_t random_seed() const noexcept { return seed_.load(); }

  // ---- creation and movement (cpu_creation.cpp) ----
  Primitive from_data(TensorData data, Device device) override;
  Primitive empty(Shape shape, DType dtype, Device device) override;
  Primitive full(Shape shape, Scalar value, DType dtype, Device device) override;
  Primitive arange(std::int64_t start, std::int64_t end, std::int64_t step, DType dtype,
                   Device device) override;
  Primitive random(Shape shape, Distribution distribution, DType dtype, Device device) override;
  ReadFuture into_data(Primitive x) override;
  Primitive to_device(Primitive x, Device device) override;
  Primitive cast(Primitive x, DType dtype) override;

  // ---- elementwise: arithmetic, unary math, comparisons, logic, bitwise (cpu_elementwise*.cpp)
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
#define KILN_CPU_UNARY(name) Primitive name(Primitive x) override;
  KILN_CPU_UNARY(abs) KILN_CPU_UNARY(sign) KILN_CPU_UNARY(square) KILN_CPU_UNARY(recip)
  KILN_CPU_UNARY(exp) KILN_CPU_UNARY(expm1) KILN_CPU_UNARY(exp2) KILN_CPU_UNARY(log)
  KILN_CPU_UNARY(log1p) KILN_CPU_UNARY(log2) KILN_CPU_UNARY(log10) KILN_CPU_UNARY(sqrt)
  KILN_CPU_UNARY(rsqrt) KILN_CPU_UNARY(sin) KILN_CPU_UNARY(cos) KILN_CPU_UNARY(tan)
  KILN_CPU_UNARY(asin) KILN_CPU_UNARY(acos) KILN_CPU_UNARY(atan) KILN_CPU_UNARY(sinh)
  KILN_CPU_UNARY(cosh) KILN_CPU_UNARY(tanh) KILN_CPU_UNARY(asinh) KILN_CPU_UNARY(acosh)
  KILN_CPU_UNARY(atanh) KILN_CPU_UNARY(erf) KILN_CPU_UNARY(round) KILN_CPU_UNARY(floor)
  KILN_CPU_UNARY(ceil) KILN_CPU_UNARY(trunc)
#undef KILN_CPU_UNARY
  Primitive equal(Primitive lhs, Primitive rhs) override;
  Primitive not_equal(Primitive lhs, Primitive rhs) override;
  Primitive greater(Primitive lhs, Primitive rhs) override;
  Primitive greater_equal(Primitive lhs, Primitive rhs) override;
  Primitive lower(Primitive lhs, Primitive rhs) override;
  Primitive lower_equal(Primitive lhs, Primitive rhs) override;
  Primitive equal_elem(Primitive x, Scalar value) override;
  Primitive not_equal_elem(Primitive x, Scalar value) override;
  Primitive greater_elem(Primitive x, Scalar value) override;
  Primitive greater_equal_elem(Primitive x, Scalar value) override;
  Primitive lower_elem(Primitive x, Scalar value) override;
  Primitive lower_equal_elem(Primitive x, Scalar value) override;
  Primitive is_nan(Primitive x) override;
  Primitive is_inf(Primitive x) override;
  Primitive logical_not(Primitive x) override;
  Primitive logical_and(Primitive lhs, Primitive rhs) override;
  Primitive logical_or(Primitive lhs, Primitive rhs) override;
  Primitive logical_xor(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_and(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_or(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_xor(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_not(Primitive x) override;
  Primitive bitwise_left_shift(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_right_shift(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_and_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_or_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_xor_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_left_shift_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_right_shift_scalar(Primitive x, Scalar value) override;

  // ---- layout: views (cpu_layout.cpp) ----
  Primitive reshape(Primitive x, Shape shape) override;
  Primitive expand(Primitive x, Shape shape) override;
  Primitive permute(Primitive x, Axes axes) override;
  Primitive swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) override;
  Primitive flip(Primitive x, Axes axes) override;
  Primitive unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step) override;
  Primitive slice(Primitive x, ResolvedSlices slices) override;

  // ---- reductions, scans, sorting (cpu_reduce.cpp, cpu_scan.cpp, cpu_sort.cpp) ----
  // (section: reductions)
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
  Primitive argmax(Primitive x, std::int64_t dim, DType index_dtype) override;
  Primitive argmin(Primitive x, std::int64_t dim, DType index_dtype) override;
  PrimitivePair max_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) override;
  PrimitivePair min_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) override;
  Primitive any(Primitive x) override;
  Primitive all(Primitive x) override;
  Primitive any_dim(Primitive x, std::int64_t dim) override;
  Primitive all_dim(Primitive x, std::int64_t dim) override;
  Primitive cumsum(Primitive x, std::int64_t dim) override;
  Primitive cumprod(Primitive x, std::int64_t dim) override;
  Primitive cummin(Primitive x, std::int64_t dim) override;
  Primitive cummax(Primitive x, std::int64_t dim) override;
  Primitive sort(Primitive x, std::int64_t dim, bool descending) override;
  PrimitivePair sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                  DType index_dtype) override;
  Primitive argsort(Primitive x, std::int64_t dim, bool descending, DType index_dtype) override;
  PrimitivePair topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim, bool largest,
                                  DType index_dtype) override;



  // ---- indexing and copies (cpu_index.cpp, cpu_cat.cpp) ----
  // (section: indexing)
  Primitive gather(std::int64_t dim, Primitive x, Primitive indices) override;
  Primitive scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                    IndexingUpdate update) override;
  Primitive select(Primitive x, std::int64_t dim, Primitive indices) override;
  Primitive select_assign(Primitive x, std::int64_t dim, Primitive indices, Primitive values,
                          IndexingUpdate update) override;
  Primitive gather_nd(Primitive x, Primitive indices) override;
  Primitive scatter_nd(Primitive x, Primitive indices, Primitive values,
                       IndexingUpdate update) override;
  Primitive slice_assign(Primitive x, ResolvedSlices slices, Primitive values) override;
  Primitive mask_where(Primitive x, Primitive mask, Primitive values) override;
  Primitive mask_fill(Primitive x, Primitive mask, Scalar value) override;
  Primitive mask_select(Primitive x, Primitive mask) override;
  Primitive argwhere(Primitive mask, DType index_dtype) override;
  Primitive cat(PrimitiveList xs, std::int64_t dim) override;
  Primitive repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) override;



  // ---- linear algebra: matmul, linear, attention, norms, embedding (cpu_matmul.cpp, ...) ----
  // (section: linalg)
  Primitive matmul(Primitive lhs, Primitive rhs) override;
  Primitive cross(Primitive lhs, Primitive rhs, std::int64_t dim) override;
  Primitive linear(Primitive x, Primitive weight, OptionalPrimitive bias) override;
  Primitive layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                       double epsilon) override;
  Primitive batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                       Primitive variance, double epsilon) override;
  Primitive embedding(Primitive weights, Primitive indices) override;
  Primitive embedding_backward(Primitive weights, Primitive output_grad,
                               Primitive indices) override;
  Primitive attention(Primitive query, Primitive key, Primitive value, OptionalPrimitive mask,
                      OptionalPrimitive bias, AttentionOptions options) override;

  // ---- convolution, pooling, interpolation, unfold/fold (cpu_conv.cpp, cpu_pool.cpp, ...) ----
  // (section: spatial)
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
  Primitive interpolate(Primitive x, Axes output_size, InterpolateOptions options) override;
  Primitive interpolate_backward(Primitive x, Primitive output_grad, Axes output_size,
                                 InterpolateOptions options) override;
  Primitive unfold_patches(Primitive x, UnfoldOptions options) override;
  Primitive fold_patches(Primitive x, Axes output_size, UnfoldOptions options) override;



  // ---- activations (cpu_activation.cpp) ----
  // (section: activation)
  Primitive relu(Primitive x) override;
  Primitive leaky_relu(Primitive x, Scalar negative_slope) override;
  Primitive gelu(Primitive x) override;
  Primitive sigmoid(Primitive x) override;
  Primitive silu(Primitive x) override;
  Primitive log_sigmoid(Primitive x) override;
  Primitive softmax(Primitive x, std::int64_t dim) override;
  Primitive log_softmax(Primitive x, std::int64_t dim) override;



 private:
  std::atomic<std::uint64_t> seed_{0x5eed'0000'0000'0001ull};
  std::atomic<std::uint64_t> counter_{0};
};

std::shared_ptr<Backend> make_cpu_backend();

}  // namespace kiln

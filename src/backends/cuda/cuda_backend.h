// The CUDA backend of one GPU. Every REQUIRED op of ops.def is declared here (generated from the
// list, so the class is concrete by construction); each has a GPU kernel (cuda_*.cpp).
// Some DEFAULT ops are overridden with kernels too, where a generated kernel beats the
// composition of other ops.
#pragma once

#include <atomic>
#include <memory>

#include "backend/backend.h"
#include "backends/cuda/runtime.h"

namespace kiln::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);

  // ---- device-level (cuda_backend.cpp) ----
  std::string name() const override { return "cuda<" + runtime_.context.arch() + ">"; }
  Device device() const override { return runtime_.device(); }
  DTypeUsageSet dtype_usage(DType dtype) const override;
  void seed(std::uint64_t seed) override;
  void sync() override;
  void flush() override;
  MemoryStats memory_stats() const override { return runtime_.allocator.stats(); }
  void memory_cleanup() override { runtime_.allocator.release_cache(); }
  void reset_peak_memory() override { runtime_.allocator.reset_peak(); }

  Runtime& runtime() noexcept { return runtime_; }

  // ---- every REQUIRED op ----
#define KILN_OP_DECL_REQUIRED(result, name, params) result name params override;
#define KILN_OP_DECL_DEFAULT(result, name, params)
#define KILN_OP_DECL_LATER(result, name, params)
#define KILN_OP(name, group, kinds, result, params, args, availability) \
  KILN_OP_DECL_##availability(result, name, params)
#include "backend/ops.def"
#undef KILN_OP
#undef KILN_OP_DECL_REQUIRED
#undef KILN_OP_DECL_DEFAULT
#undef KILN_OP_DECL_LATER

  // ---- DEFAULT ops overridden with kernels ----
  Primitive full(Shape shape, Scalar value, DType dtype, Device device) override;
  Primitive arange(std::int64_t start, std::int64_t end, std::int64_t step, DType dtype,
                   Device device) override;
  Primitive to_device(Primitive x, Device device) override;
  ReadManyFuture read_many(PrimitiveList xs) override;
  Primitive maximum(Primitive lhs, Primitive rhs) override;
  Primitive minimum(Primitive lhs, Primitive rhs) override;
  Primitive hypot(Primitive lhs, Primitive rhs) override;
  Primitive neg(Primitive x) override;
  Primitive clamp(Primitive x, Scalar min, Scalar max) override;
  Primitive clamp_min(Primitive x, Scalar min) override;
  Primitive clamp_max(Primitive x, Scalar max) override;
  Primitive sign(Primitive x) override;
  Primitive square(Primitive x) override;
  Primitive expm1(Primitive x) override;
  Primitive exp2(Primitive x) override;
  Primitive log2(Primitive x) override;
  Primitive log10(Primitive x) override;
  Primitive rsqrt(Primitive x) override;
  Primitive not_equal(Primitive lhs, Primitive rhs) override;
  Primitive not_equal_elem(Primitive x, Scalar value) override;
  Primitive is_nan(Primitive x) override;
  Primitive is_inf(Primitive x) override;
  Primitive logical_xor(Primitive lhs, Primitive rhs) override;
  Primitive bitwise_and_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_or_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_xor_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_left_shift_scalar(Primitive x, Scalar value) override;
  Primitive bitwise_right_shift_scalar(Primitive x, Scalar value) override;
  Primitive swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2) override;
  Primitive mean_dim(Primitive x, std::int64_t dim) override;
  Primitive prod_dim(Primitive x, std::int64_t dim) override;
  Primitive any_dim(Primitive x, std::int64_t dim) override;
  Primitive all_dim(Primitive x, std::int64_t dim) override;
  // Counted, then compacted on the device (cuda_compaction.cpp).
  Primitive mask_select(Primitive x, Primitive mask) override;
  Primitive argwhere(Primitive mask, DType index_dtype) override;
  // Full reductions of permuted or flipped tensors read in place (cuda_reduce.cpp).
  Primitive sum(Primitive x) override;
  Primitive mean(Primitive x) override;
  Primitive prod(Primitive x) override;
  Primitive max(Primitive x) override;
  Primitive min(Primitive x) override;
  Primitive any(Primitive x) override;
  Primitive all(Primitive x) override;
  // One kernel per row (cuda_softmax.cpp).
  Primitive softmax(Primitive x, std::int64_t dim) override;
  Primitive log_softmax(Primitive x, std::int64_t dim) override;
  // One product per group over every image and position (cuda_conv.cpp).
  Primitive conv_weight_backward(Primitive x, Primitive weight, Primitive output_grad,
                                 ConvOptions options) override;
  // CUB row sorts of kiln_cuda_lib; topk by generated selection kernels (cuda_sort.cpp).
  Primitive sort(Primitive x, std::int64_t dim, bool descending) override;
  PrimitivePair sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                  DType index_dtype) override;
  Primitive argsort(Primitive x, std::int64_t dim, bool descending, DType index_dtype) override;
  PrimitivePair topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim, bool largest,
                                  DType index_dtype) override;

  // ---- helpers for the op files ----
  // x as a contiguous tensor on this device (x itself when it already is).
  TensorPtr contiguous(const Primitive& x, const char* op);
  // A fresh contiguous tensor.
  TensorPtr make_tensor(DType dtype, const Shape& shape, const char* op) {
    return runtime_.make_tensor(dtype, shape, op);
  }
  // Copies src into dst elementwise (same shape; any strides on both sides).
  void copy_into(const CudaTensor& dst, const CudaTensor& src, const char* op);

 private:
  Runtime runtime_;
  std::atomic<std::uint64_t> seed_{0x5eed'0000'0000'0001ull};  // the CPU backend's default
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace kiln::cuda

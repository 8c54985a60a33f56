// The CUDA backend of one GPU. It declares the ops ops.def marks G (generated from the list; with
// the layout ops marked S, which StridedBackend has, every REQUIRED op is among them, so the class
// is concrete by construction); each has a GPU kernel (cuda_*.cpp). A DEFAULT op gets a G where a
// generated kernel beats the composition of other ops.
#pragma once

#include <atomic>
#include <memory>

#include "backends/cuda/lib/matmul.h"
#include "backends/cuda/runtime.h"
#include "contract/strided_backend.h"
#include "kiln/detail/op_columns.h"

namespace kiln::cuda {

// What run_fused learned of the groups it ran, to run them again without capturing
// (cuda_fused.cpp).
class FusedPlans;
std::shared_ptr<FusedPlans> make_fused_plans();

// What CudaBackend::linear_epilogue adds to a product in the same cuBLASLt call (epilogue None
// only): alpha · product + beta · addend, addend of the result's dtype and shape; in_place
// writes the result into addend and returns it where addend is dense and on no storage of x or
// weight (an optimizer's W - lr · Xᵀ·dY).
struct ProductSum {
  const Primitive* addend = nullptr;
  double alpha = 1.0;
  double beta = 0.0;
  bool in_place = false;
};

class CudaBackend final : public StridedBackend {
 public:
  explicit CudaBackend(int index);

  // ---- device-level (cuda_backend.cpp) ----
  std::string name() const override { return "cuda<" + runtime_.context.arch() + ">"; }
  Device device() const override { return runtime_.device(); }
  DTypeUsageSet dtype_usage(DType dtype) const override;
  void seed(std::uint64_t seed) override;
  // Reserves count random values (thread-safe): the seed and the counter of the first.
  std::optional<RandomStream> reserve_random(std::uint64_t count) override;
  void sync() override;
  void flush() override;
  MemoryStats memory_stats() const override { return runtime_.allocator.stats(); }
  void memory_cleanup() override { runtime_.allocator.release_cache(); }
  void reset_peak_memory() override { runtime_.allocator.reset_peak(); }
  // A stream capture into a CUDA graph over a pool of its own (cuda_graph.cpp).
  void begin_device_capture() override;
  bool records_device_graph() const override { return true; }
  std::unique_ptr<DeviceGraph> end_device_capture(bool keep) override;

  Runtime& runtime() noexcept { return runtime_; }
  // A QFloat dst takes src's blocks (a capture's replay writing a quantize's result again:
  // cuda_quant.cpp); every other tensor StridedBackend's copy.
  void assign(const Primitive& dst, Primitive src) override;

  // A fused group: its runs of elementwise steps as one generated kernel each (cuda_fused.cpp).
  std::vector<Primitive> run_fused(const FusedProgram& program) override;
  // Any group saves launches: every op with F is recorded, however small.
  std::int64_t min_fused_elements() const override { return 1; }
  // With KILN_CUDA_REDUCE_EPILOGUE=1 (cuda_fused.cpp; off by default until run on a GPU).
  bool fuses_reduction_epilogues() const override;

  // ---- every op whose impl column in ops.def has a G (every REQUIRED op among them) ----
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_CUDA(impl))(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP

  // ---- helpers for the op files ----
  // x as a contiguous tensor on this device (x itself when it already is).
  TensorPtr contiguous(const Primitive& x, const char* op);
  // A fresh contiguous tensor.
  TensorPtr make_tensor(DType dtype, const Shape& shape, const char* op) {
    return runtime_.make_tensor(dtype, shape, op);
  }
  // Copies src into dst elementwise (same shape; any strides on both sides).
  void copy_into(const CudaTensor& dst, const CudaTensor& src, const char* op);
  // x [..., in] @ weight [in, out] (or [1, ..., 1, in, out]), then what epilogue says
  // (lib/matmul.h: + bias [out], an activation) in the same cuBLASLt call (cuda_linear.cpp); null
  // where that call cannot run (integer dtypes, an empty product, layouts or alignments cuBLASLt
  // refuses): the caller composes the ops instead.
  // With sum (epilogue None only): alpha · product + beta · addend in the same call.
  Primitive linear_epilogue(const Primitive& x, const Primitive& weight, const Primitive* bias,
                            lib::Epilogue epilogue, const ProductSum& sum = {});

 private:
  // ---- StridedBackend's hooks (cuda_layout.cpp) ----
  Primitive view_on(const StridedTensor& base, strided::View view) override;
  Primitive contiguous_copy(const StridedTensor& x, const char* op) override;
  void copy_elements(StridedTensor& dst, const StridedTensor& src, const char* op) override;
  // Views of the same blocks (cuda_quant.cpp).
  Primitive permute_quantized(Primitive x, Axes axes) override;
  Primitive slice_quantized(Primitive x, ResolvedSlices slices) override;

  Runtime runtime_;
  std::atomic<std::uint64_t> seed_{0x5eed'0000'0000'0001ull};  // the CPU backend's default
  std::atomic<std::uint64_t> counter_{0};
  const std::shared_ptr<FusedPlans> plans_ = make_fused_plans();
};

}  // namespace kiln::cuda

// The CPU backend: single-pass, multi-threaded kernels on strided views for the ops ops.def marks
// C (the layout ops marked S are StridedBackend's; the rest run their default). Definitions are
// spread over one file per op family (cpu_<family>.cpp).
#pragma once

#include <atomic>
#include <memory>

#include "contract/strided_backend.h"
#include "core/visibility.h"
#include "kiln/detail/op_columns.h"

namespace kiln {

class KILN_INTERNAL CpuBackend final : public StridedBackend {
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
  // Reserves count random values (thread-safe): the seed and the counter of the first.
  std::optional<RandomStream> reserve_random(std::uint64_t count) override;
  std::span<std::byte> host_bytes(const Primitive& fresh) override;
  // A fused group tile by tile, its intermediates in cache (cpu_fused.cpp).
  std::vector<Primitive> run_fused(const FusedProgram& program) override;
  // A src nobody else holds, laid out as dst, moves its storage into dst instead of being copied
  // when dst's storage has no other view (cpu_layout.cpp): an optimizer's in-place update costs
  // no copy. Otherwise StridedBackend's copy.
  void assign(const Primitive& dst, Primitive src) override;

  // ---- every op whose impl column in ops.def has a C: a kernel in cpu_<family>.cpp ----
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_CPU(impl))(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  // ---- StridedBackend's hooks (cpu_layout.cpp) ----
  Primitive view_on(const StridedTensor& base, strided::View view) override;
  Primitive contiguous_copy(const StridedTensor& x, const char* op) override;
  void copy_elements(StridedTensor& dst, const StridedTensor& src, const char* op) override;
  // Views of the same blocks (cpu_quant.cpp).
  Primitive permute_quantized(Primitive x, Axes axes) override;
  Primitive slice_quantized(Primitive x, ResolvedSlices slices) override;

  std::atomic<std::uint64_t> seed_{0x5eed'0000'0000'0001ull};
  std::atomic<std::uint64_t> counter_{0};
};

std::shared_ptr<Backend> make_cpu_backend();

}  // namespace kiln

// ForwardingBackend: the base of decorators (autodiff, fusion, router). Every op forwards to the
// inner backend, arguments moved so the inner backend still sees unique ownership; a decorator
// overrides only what it changes, so an inner backend's fast override is never bypassed.
#pragma once

#include <memory>

#include "contract/backend.h"
#include "kiln/detail/map_macro.h"

// KILN_MOVE_EACH(a, b) -> std::move(a), std::move(b)
#define KILN_MOVE_EACH(...) KILN_MAP_EACH(std::move, __VA_ARGS__)
#define KILN_MOVE_ARGS(args) KILN_MOVE_EACH args

namespace kiln {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  Backend& inner() const noexcept { return *inner_; }

  std::string name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  DeviceSettings default_settings() const override { return inner_->default_settings(); }
  DTypeUsageSet dtype_usage(DType dtype) const override { return inner_->dtype_usage(dtype); }
  void seed(std::uint64_t seed) override { inner_->seed(seed); }
  std::optional<RandomStream> reserve_random(std::uint64_t count) override {
    return inner_->reserve_random(count);
  }
  void sync() override { inner_->sync(); }
  void flush() override { inner_->flush(); }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void memory_cleanup() override { inner_->memory_cleanup(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  bool autodiff_enabled() const override { return inner_->autodiff_enabled(); }
  std::int64_t min_fused_elements() const override { return inner_->min_fused_elements(); }
  bool fuses_reduction_epilogues() const override { return inner_->fuses_reduction_epilogues(); }
  std::vector<Primitive> run_fused(const FusedProgram& program) override {
    return inner_->run_fused(program);
  }
  void assign(const Primitive& dst, Primitive src) override { inner_->assign(dst, std::move(src)); }
  void begin_device_capture() override { inner_->begin_device_capture(); }
  bool records_device_graph() const override { return inner_->records_device_graph(); }
  std::unique_ptr<DeviceGraph> end_device_capture(bool keep) override {
    return inner_->end_device_capture(keep);
  }

#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result name params override { return inner_->name(KILN_MOVE_ARGS(args)); }
#include "kiln/detail/ops.def"
#undef KILN_OP

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace kiln

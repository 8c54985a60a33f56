// ForwardingBackend: the base of decorators (autodiff, fusion, router). Every op forwards to the
// inner backend, arguments moved so the inner backend still sees unique ownership; a decorator
// overrides only what it changes, so an inner backend's fast override is never bypassed.
#pragma once

#include <memory>

#include "backend/backend.h"

// KILN_MAP_EACH(f, a, b, c) -> f(a), f(b), f(c); KILN_MOVE_EACH(a, b) -> std::move(a), ...
#define KILN_MAP_1(f, a) f(a)
#define KILN_MAP_2(f, a, ...) f(a), KILN_MAP_1(f, __VA_ARGS__)
#define KILN_MAP_3(f, a, ...) f(a), KILN_MAP_2(f, __VA_ARGS__)
#define KILN_MAP_4(f, a, ...) f(a), KILN_MAP_3(f, __VA_ARGS__)
#define KILN_MAP_5(f, a, ...) f(a), KILN_MAP_4(f, __VA_ARGS__)
#define KILN_MAP_6(f, a, ...) f(a), KILN_MAP_5(f, __VA_ARGS__)
#define KILN_MAP_7(f, a, ...) f(a), KILN_MAP_6(f, __VA_ARGS__)
#define KILN_MAP_8(f, a, ...) f(a), KILN_MAP_7(f, __VA_ARGS__)
#define KILN_MAP_PICK(_1, _2, _3, _4, _5, _6, _7, _8, name, ...) name
#define KILN_MAP_EACH(f, ...)                                                                 \
  KILN_MAP_PICK(__VA_ARGS__, KILN_MAP_8, KILN_MAP_7, KILN_MAP_6, KILN_MAP_5, KILN_MAP_4,      \
                KILN_MAP_3, KILN_MAP_2, KILN_MAP_1)                                           \
  (f, __VA_ARGS__)
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
  void sync() override { inner_->sync(); }
  void flush() override { inner_->flush(); }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void memory_cleanup() override { inner_->memory_cleanup(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  bool autodiff_enabled() const override { return inner_->autodiff_enabled(); }

#define KILN_OP(name, group, kinds, result, params, args, availability) \
  result name params override { return inner_->name(KILN_MOVE_ARGS(args)); }
#include "backend/ops.def"
#undef KILN_OP

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace kiln

// ForwardingBackend: the base of decorators (autodiff, fusion, router). Every op forwards to the
// inner backend, arguments moved so the inner backend still sees unique ownership; a decorator
// overrides only what it changes, so an inner backend's fast override is never bypassed.
#pragma once

#include <memory>

#include "backend/backend.h"

// KILN_MOVE_EACH(a, b, c) -> std::move(a), std::move(b), std::move(c)
#define KILN_MOVE_1(a) std::move(a)
#define KILN_MOVE_2(a, ...) std::move(a), KILN_MOVE_1(__VA_ARGS__)
#define KILN_MOVE_3(a, ...) std::move(a), KILN_MOVE_2(__VA_ARGS__)
#define KILN_MOVE_4(a, ...) std::move(a), KILN_MOVE_3(__VA_ARGS__)
#define KILN_MOVE_5(a, ...) std::move(a), KILN_MOVE_4(__VA_ARGS__)
#define KILN_MOVE_6(a, ...) std::move(a), KILN_MOVE_5(__VA_ARGS__)
#define KILN_MOVE_7(a, ...) std::move(a), KILN_MOVE_6(__VA_ARGS__)
#define KILN_MOVE_8(a, ...) std::move(a), KILN_MOVE_7(__VA_ARGS__)
#define KILN_MOVE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, name, ...) name
#define KILN_MOVE_EACH(...)                                                              \
  KILN_MOVE_PICK(__VA_ARGS__, KILN_MOVE_8, KILN_MOVE_7, KILN_MOVE_6, KILN_MOVE_5, KILN_MOVE_4, \
                 KILN_MOVE_3, KILN_MOVE_2, KILN_MOVE_1)                                  \
  (__VA_ARGS__)
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
  bool autodiff_enabled() const override { return inner_->autodiff_enabled(); }

#define KILN_OP(name, group, kinds, result, params, args, availability) \
  result name params override { return inner_->name(KILN_MOVE_ARGS(args)); }
#include "backend/ops.def"
#undef KILN_OP

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace kiln

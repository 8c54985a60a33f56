// Every op of ops.def without a backward rule: inputs unwrapped, the inner backend runs the op,
// the result is untracked. Derived mechanically from ops.def.
#include <type_traits>

#include "decorators/autodiff/autodiff_backend.h"
#include "kiln/detail/format.h"

namespace kiln::autodiff {
namespace {

// ---- is any argument tracked? ----
bool tracked(const Primitive& p) { return node_of(p) != nullptr; }
bool tracked(const OptionalPrimitive& p) { return p && tracked(*p); }
bool tracked(const PrimitiveList& xs) {
  for (const Primitive& x : xs) {
    if (tracked(x)) return true;
  }
  return false;
}
template <class T>
bool tracked(const T&) {
  return false;
}
template <class... Args>
bool any_tracked(const Args&... args) {
  return (tracked(args) || ...);
}

// ---- arguments for the inner backend ----
Primitive unwrap(Primitive p) { return take_inner(std::move(p)); }
OptionalPrimitive unwrap(OptionalPrimitive p) {
  if (!p) return p;
  return take_inner(std::move(*p));
}
PrimitiveList unwrap(PrimitiveList xs) {
  for (Primitive& x : xs) x = take_inner(std::move(x));
  return xs;
}
Device unwrap(Device device) { return device.without_autodiff(); }
template <class T>
T&& unwrap(T&& value) {
  return std::forward<T>(value);
}

// ---- results, untracked ----
bool is_float_result(const Primitive& p) { return is_float(p->dtype()); }
bool is_float_result(const PrimitivePair& p) { return is_float_result(p.first); }
template <class T>
bool is_float_result(const T&) {
  return false;
}

Primitive untracked(Primitive p) { return wrap(std::move(p)); }
PrimitivePair untracked(PrimitivePair p) {
  return {wrap(std::move(p.first)), wrap(std::move(p.second))};
}
template <class T>
T untracked(T value) {
  return value;
}

template <class T>
T finish(const char* op, bool had_tracked_input, T result) {
  if (had_tracked_input && is_float_result(result)) {
    detail::fail<AutodiffError>(op,
                                "has no backward rule, so its result cannot carry a gradient; "
                                "detach() the tracked input to use the op on constants");
  }
  return untracked(std::move(result));
}

}  // namespace

#define KILN_UNWRAP(x) unwrap(std::move(x))
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  result AutodiffPassthrough::name params {                                              \
    const bool had_tracked_input = any_tracked args;                                     \
    return finish(#name, had_tracked_input,                                              \
                  inner().name(KILN_MAP_EACH(KILN_UNWRAP, KILN_UNPAREN args)));          \
  }
#define KILN_UNPAREN(...) __VA_ARGS__
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_UNWRAP
#undef KILN_UNPAREN

}  // namespace kiln::autodiff

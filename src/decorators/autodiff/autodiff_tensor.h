// The primitive of the autodiff decorator: the inner backend's primitive plus the graph node
// that produced it (null when the tensor is not tracked). Its device carries the autodiff flag,
// which is how the decorator tells its own primitives from plain ones used as constants.
#pragma once

#include <memory>
#include <utility>

#include "core/block_pool.h"
#include "decorators/autodiff/node.h"
#include "kiln/primitive.h"

namespace kiln::autodiff {

class AutodiffTensor final : public TensorPrimitive {
 public:
  AutodiffTensor(Primitive inner, NodeRef node)
      : TensorPrimitive(inner->dtype(), inner->shape(), inner->device().autodiff()),
        inner_(std::move(inner)),
        node_(std::move(node)) {}

  bool storage_unique() const noexcept override {
    return inner_.use_count() == 1 && inner_->storage_unique();
  }

  const QuantScheme* quant_scheme() const noexcept override { return inner_->quant_scheme(); }

  const Primitive& inner() const noexcept { return inner_; }
  const NodeRef& node() const noexcept { return node_; }
  bool tracked() const noexcept { return node_ != nullptr; }

  // The inner primitive, moved out when nobody else holds this wrapper (so the inner backend
  // may reuse its memory), shared otherwise.
  [[gnu::always_inline]] static Primitive take_inner(Primitive p) {
    auto& self = static_cast<AutodiffTensor&>(*p);
    if (p.use_count() == 1) return std::move(self.inner_);
    return self.inner_;
  }

 private:
  Primitive inner_;
  NodeRef node_;
};

inline bool is_autodiff(const Primitive& p) noexcept { return p && p->device().is_autodiff(); }

inline Primitive wrap(Primitive inner, NodeRef node = nullptr) {
  return std::allocate_shared<AutodiffTensor>(PoolAllocator<AutodiffTensor>{}, std::move(inner),
                                              std::move(node));
}

// The inner primitive of an autodiff primitive; a plain primitive is its own inner.
inline const Primitive& inner_of(const Primitive& p) noexcept {
  return is_autodiff(p) ? static_cast<const AutodiffTensor&>(*p).inner() : p;
}
[[gnu::always_inline]] inline Primitive take_inner(Primitive p) {
  return is_autodiff(p) ? AutodiffTensor::take_inner(std::move(p)) : p;
}
// An inner primitive lent to one inner op by lend_inner: the wrapper it came from and the inner
// itself (both null when nothing was lent).
struct Lent {
  const AutodiffTensor* wrapper = nullptr;
  const TensorPrimitive* inner = nullptr;
};

// The inner primitive of an autodiff input for the duration of one inner op, with as little
// reference counting as possible:
//  - a wrapper held only here hands its inner over (the inner backend may then reuse it);
//  - a shared wrapper whose inner nobody else holds lends it through an aliasing handle that
//    owns the wrapper: no count changes, and the inner backend sees exactly the sharing there
//    is (the handle is unique only when the wrapper, and so the inner, is); `lent` records it,
//    for reown;
//  - otherwise (the inner is shared, e.g. saved by a graph node) a plain shared handle.
[[gnu::always_inline]] inline Primitive lend_inner(Primitive p, Lent& lent) {
  if (!is_autodiff(p)) return p;
  if (p.use_count() == 1) return AutodiffTensor::take_inner(std::move(p));
  const auto* wrapper = static_cast<const AutodiffTensor*>(p.get());
  if (wrapper->inner().use_count() != 1) return wrapper->inner();
  lent = {wrapper, wrapper->inner().get()};
  return Primitive(std::move(p), wrapper->inner().get());
}
// An op's result that is a lent input handed straight back (a backend may return an operand
// unchanged) would own the wrapper it was lent from, which must not outlive the op: it is
// swapped for an owner of the inner primitive itself. The wrapper is only read when the result
// is that handle, which keeps it alive (another thread may have dropped every other reference
// to it during the op).
[[gnu::always_inline]] inline Primitive reown(Primitive out, const Lent& lent) {
  if (lent.inner == nullptr || out.get() != lent.inner) return out;
  return lent.wrapper->inner();
}

// Constant-initialised, so reading it costs no guard (a function-local static would).
inline const NodeRef kNoNode{};
inline const NodeRef& node_of(const Primitive& p) noexcept {
  return is_autodiff(p) ? static_cast<const AutodiffTensor&>(*p).node() : kNoNode;
}

}  // namespace kiln::autodiff

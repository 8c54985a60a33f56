// A non-owning reference to a callable, for parameters called before the function returns: unlike
// std::function it allocates nothing and makes no type-erasure class (manager, typeinfo) per
// lambda, which matters where a template makes one lambda per op (capture's checker).
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace kiln::detail {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>) FunctionRef(F&& f)
  noexcept  // NOLINT(google-explicit-constructor): used like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return std::invoke(*static_cast<std::remove_reference_t<F>*>(object),
                             std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace kiln::detail

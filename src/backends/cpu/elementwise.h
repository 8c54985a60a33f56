// The CPU elementwise layer: a type-erased driver and typed 1-D kernels.
//
// Planning (broadcast, output reuse, merging dims), the split over threads and the walk over
// 1-D runs are ordinary code compiled once (elementwise.cpp); the only code instantiated per
// (op, element type) is a Loop1D, which applies the op to one run of n elements. A Loop1D
// depends on nothing but its run, so a chain of them can later be applied tile by tile.
//
//   const float v = 2;
//   auto f = [v](float a) { return a * v; };
//   Primitive y = run_unary(x, DType::F32, make_unary_kernel<float, float>(f), "mul_scalar");
//
// f16 and bf16 have no kernels of their own: their ops take the f32 kernel, and the driver
// converts each run through small f32 tiles. Integer ops that do not depend on signedness take
// the kernel of the unsigned type of the same width (bits_t), which the driver runs on the
// signed storage as it is.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "backends/cpu/cpu_tensor.h"
#include "contract/fused_program.h"
#include "core/dtype_dispatch.h"
#include "kiln/scalar.h"

namespace kiln::cpu {

// One run of n elements: data[0] is the output, data[1..] the inputs; strides[i] is operand
// i's step in bytes (0 for a broadcast operand). context is the kernel's own state.
using Loop1D = void (*)(std::int64_t n, char* const* data, const std::int64_t* strides,
                        const void* context);

// A 1-D loop with the element types it writes and reads. context must outlive the run.
struct Kernel {
  Loop1D loop = nullptr;
  const void* context = nullptr;
  DType out = DType::F32;
  DType in = DType::F32;
  // Cost of an element relative to a plain arithmetic op: the driver splits a run over threads
  // at a grain this many times smaller.
  std::int64_t cost = 1;
  // The input read as Bool, a mask (mask_fill's second, mask_where's second of three), or -1:
  // every input is of dtype in.
  std::int32_t mask_input = -1;
};

// out = kernel(x) over x's shape; the output reuses x's memory when x is uniquely owned,
// contiguous and of the output's shape and dtype. x's dtype is the kernel's input type, or a
// 16-bit float for an f32 kernel, or an integer of the kernel's width.
Primitive run_unary(Primitive x, DType out_dtype, const Kernel& kernel, const char* op);
// out = kernel(lhs, rhs) over the broadcast of their shapes (ShapeMismatch naming op otherwise);
// the output reuses lhs's, else rhs's memory under the conditions of run_unary.
Primitive run_binary(Primitive lhs, Primitive rhs, DType out_dtype, const Kernel& kernel,
                     const char* op);
// out = kernel(x, scalar) with *scalar, of the kernel's input type, as a broadcast operand: a
// tensor-scalar op runs its tensor-tensor kernel.
Primitive run_binary_scalar(Primitive x, const void* scalar, DType out_dtype, const Kernel& kernel,
                            const char* op);

// x converted to dtype element by element (convert_element's rules), through the cast kernels:
// a new contiguous tensor, or x itself when it already has dtype.
Primitive convert(Primitive x, DType dtype);

// Elements below which the driver keeps a plain kernel on one thread (kParallelGrain as this
// build of the library has it: the ThreadSanitizer build lowers it).
std::int64_t elementwise_grain() noexcept;

// ---- element types of kernels ----

// The type a kernel computes on for a storage type: float for f16 and bf16.
template <class T>
using kernel_t = compute_t<T>;
// For ops blind to signedness (wrapping add, bitwise logic, equality): one kernel per width.
template <class T>
using bits_t =
    typename std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                                std::make_unsigned<T>, std::type_identity<kernel_t<T>>>::type;

// visit_dtype and friends, calling f with the kernel type (kernel_t) of the dtype, so that f16
// and bf16 share f32's kernels.
template <class Visit, class F>
decltype(auto) visit_kernel_type(Visit visit, DType dtype, std::string_view op, F&& f) {
  return visit(dtype, op, [&]<class T>(type_tag<T>) { return f(type_tag<kernel_t<T>>{}); });
}
template <class F>
decltype(auto) visit_kernel(DType dtype, std::string_view op, F&& f) {
  return visit_kernel_type([](auto... a) -> decltype(auto) { return visit_dtype(a...); }, dtype, op,
                           std::forward<F>(f));
}
template <class F>
decltype(auto) visit_numeric_kernel(DType dtype, std::string_view op, F&& f) {
  return visit_kernel_type([](auto... a) -> decltype(auto) { return visit_numeric_dtype(a...); },
                           dtype, op, std::forward<F>(f));
}
template <class F>
decltype(auto) visit_float_kernel(DType dtype, std::string_view op, F&& f) {
  return visit_kernel_type([](auto... a) -> decltype(auto) { return visit_float_dtype(a...); },
                           dtype, op, std::forward<F>(f));
}

// ---- 1-D loops ----

namespace loops_1d {

template <class T>
T load(const char* p) noexcept {
  return *reinterpret_cast<const T*>(p);
}
template <class T>
void store(char* p, T v) noexcept {
  *reinterpret_cast<T*>(p) = v;
}

template <class Out, class In, class F>
void unary_loop(std::int64_t n, char* const* data, const std::int64_t* strides,
                const void* context) {
  const F& f = *static_cast<const F*>(context);
  char* o = data[0];
  const char* a = data[1];
  if (strides[0] == sizeof(Out) && strides[1] == sizeof(In)) {
    Out* out = reinterpret_cast<Out*>(o);
    const In* in = reinterpret_cast<const In*>(a);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f(in[i]));
  } else if (strides[0] == sizeof(Out) && strides[1] == 0) {
    const Out v = static_cast<Out>(f(load<In>(a)));
    Out* out = reinterpret_cast<Out*>(o);
    for (std::int64_t i = 0; i < n; ++i) out[i] = v;
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      store<Out>(o + i * strides[0], static_cast<Out>(f(load<In>(a + i * strides[1]))));
    }
  }
}

template <class Out, class In, class F>
void binary_loop(std::int64_t n, char* const* data, const std::int64_t* strides,
                 const void* context) {
  const F& f = *static_cast<const F*>(context);
  char* o = data[0];
  const char* a = data[1];
  const char* b = data[2];
  if (strides[0] == sizeof(Out) && strides[1] == sizeof(In) && strides[2] == sizeof(In)) {
    Out* out = reinterpret_cast<Out*>(o);
    const In* x = reinterpret_cast<const In*>(a);
    const In* y = reinterpret_cast<const In*>(b);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f(x[i], y[i]));
  } else if (strides[0] == sizeof(Out) && strides[1] == sizeof(In) && strides[2] == 0) {
    Out* out = reinterpret_cast<Out*>(o);
    const In* x = reinterpret_cast<const In*>(a);
    const In v = load<In>(b);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f(x[i], v));
  } else if (strides[0] == sizeof(Out) && strides[1] == 0 && strides[2] == sizeof(In)) {
    Out* out = reinterpret_cast<Out*>(o);
    const In u = load<In>(a);
    const In* y = reinterpret_cast<const In*>(b);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f(u, y[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      store<Out>(o + i * strides[0],
                 static_cast<Out>(f(load<In>(a + i * strides[1]), load<In>(b + i * strides[2]))));
    }
  }
}

// f(x, mask), or f(x, mask, values) with kValues, the mask read as bool (mask_fill, mask_where).
// On contiguous runs the mask's bytes are read as integers and every operand is loaded whatever
// the mask says: GCC vectorises that form into a blend, not a select of bool lanes (which it
// leaves scalar). The functor is copied: its value cannot then alias the output.
template <class T, class F, bool kValues>
void masked_loop(std::int64_t n, char* const* data, const std::int64_t* strides,
                 const void* context) {
  const F f = *static_cast<const F*>(context);
  const auto apply = [&](T x, bool mask, const char* values) {
    if constexpr (kValues) {
      return f(x, mask, load<T>(values));
    } else {
      return f(x, mask);
    }
  };
  if (strides[0] == sizeof(T) && strides[1] == sizeof(T) && strides[2] == sizeof(bool) &&
      (!kValues || strides[3] == sizeof(T))) {
    T* out = reinterpret_cast<T*>(data[0]);
    const T* x = reinterpret_cast<const T*>(data[1]);
    const auto* m = reinterpret_cast<const std::uint8_t*>(data[2]);
    for (std::int64_t i = 0; i < n; ++i) {
      const T a = x[i];
      out[i] = apply(a, m[i] != 0, kValues ? data[3] + i * sizeof(T) : nullptr);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    store<T>(data[0] + i * strides[0],
             apply(load<T>(data[1] + i * strides[1]), load<bool>(data[2] + i * strides[2]),
                   kValues ? data[3] + i * strides[3] : nullptr));
  }
}

}  // namespace loops_1d

// The Loop1D applying f (In -> Out, or (In, In) -> Out) element by element, with fast paths for
// contiguous and broadcast (stride 0) runs. f is the context: it must outlive the run.
template <class Out, class In, class F>
Kernel make_unary_kernel(const F& f) {
  return {&loops_1d::unary_loop<Out, In, F>, &f, dtype_of<Out>::value, dtype_of<In>::value};
}
template <class Out, class In, class F>
Kernel make_binary_kernel(const F& f) {
  return {&loops_1d::binary_loop<Out, In, F>, &f, dtype_of<Out>::value, dtype_of<In>::value};
}

// A kernel that owns its context: its functor (copied in), the scalar operand of a tensor-scalar
// op, and the flag an integer op raises (division by zero). An op of the families that make
// one (arith, unary maths, activations) builds it and runs it; a fused CPU group keeps one per
// step and calls its loop on every piece of every tile (cpu_fused.cpp), so both run the same
// code. Not copyable: the kernel's context points inside.
class OwnedKernel {
 public:
  OwnedKernel() = default;
  OwnedKernel(const OwnedKernel&) = delete;
  OwnedKernel& operator=(const OwnedKernel&) = delete;

  // The loop over state, a small value that needs no destructor (a functor, a VectorFunction).
  template <class State>
  void set(Loop1D loop, const State& state, DType out, DType in, std::int64_t cost = 1) {
    static_assert(std::is_trivially_destructible_v<State> && sizeof(State) <= kStateBytes &&
                  alignof(State) <= kStateAlign);
    kernel_ = {loop, new (state_) State(state), out, in, cost};
  }
  template <class Out, class In, class F>
  void unary(const F& f, std::int64_t cost = 1) {
    set(&loops_1d::unary_loop<Out, In, F>, f, dtype_of<Out>::value, dtype_of<In>::value, cost);
  }
  template <class Out, class In, class F>
  void binary(const F& f, std::int64_t cost = 1) {
    set(&loops_1d::binary_loop<Out, In, F>, f, dtype_of<Out>::value, dtype_of<In>::value, cost);
  }
  // f(x, mask) or f(x, mask, values) over elements of T, the mask (input 1) read as bool.
  template <class T, class F>
  void masked_binary(const F& f) {
    set(&loops_1d::masked_loop<T, F, false>, f, dtype_of<T>::value, dtype_of<T>::value);
    kernel_.mask_input = 1;
  }
  template <class T, class F>
  void masked_ternary(const F& f) {
    set(&loops_1d::masked_loop<T, F, true>, f, dtype_of<T>::value, dtype_of<T>::value);
    kernel_.mask_input = 1;
  }
  // A tensor-scalar op: its binary kernel reads value as a broadcast second input.
  template <class K>
  void bind_scalar(K value) {
    static_assert(std::is_trivially_copyable_v<K> && sizeof(K) <= sizeof(scalar_));
    std::memcpy(scalar_, &value, sizeof(K));
    has_scalar_ = true;
  }

  const Kernel& kernel() const noexcept { return kernel_; }
  // The scalar operand's bytes, or null for an op over tensors only.
  const void* scalar() const noexcept { return has_scalar_ ? scalar_ : nullptr; }
  std::atomic<bool>& flag() noexcept { return flag_; }
  bool flagged() const noexcept { return flag_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t kStateBytes = 32, kStateAlign = 16;
  Kernel kernel_;
  std::atomic<bool> flag_{false};
  bool has_scalar_ = false;
  alignas(kStateAlign) std::byte state_[kStateBytes] = {};
  alignas(16) std::byte scalar_[16] = {};
};

// The kernel of an elementwise op of these families for inputs of dtype (a recorded step of a
// fused group: its op code and parameters), in k; false when the family has no such op.
// contiguous: every run the kernel will see has unit strides (a vector maths form needs them).
// Each family file defines its own (cpu_arith.cpp, cpu_unary.cpp, cpu_activation.cpp, ...), from
// the same list and makers as its eager ops. Throws what the op would for a dtype it cannot run.
// The families' makers share one signature, make_<op>(dtype, params, contiguous, k), so each
// family's switch is a list of these cases.
#define KILN_CPU_STEP_KERNEL_CASE(name, ...)   \
  case OpCode::name:                           \
    make_##name(dtype, params, contiguous, k); \
    return true;

// The families with step kernels, each <family>_step_kernel defined in its file: arith, unary
// and activation (cpu_<family>.cpp); compare, with a tensor or a scalar (cpu_compare.cpp); cast
// (cpu_creation.cpp: dtype is the input's, params.dtype the result's); mask, mask_fill and
// mask_where (cpu_mask.cpp: dtype is x's, the mask is Bool).
#define KILN_CPU_STEP_KERNEL_FAMILIES(X) X(arith) X(unary) X(activation) X(compare) X(cast) X(mask)
#define KILN_CPU_DECLARE_STEP_KERNEL(family)                                                   \
  bool family##_step_kernel(OpCode op, DType dtype, const StepParams& params, bool contiguous, \
                            OwnedKernel& k);
KILN_CPU_STEP_KERNEL_FAMILIES(KILN_CPU_DECLARE_STEP_KERNEL)
#undef KILN_CPU_DECLARE_STEP_KERNEL

}  // namespace kiln::cpu

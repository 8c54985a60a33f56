// Binary arithmetic with broadcasting, and its scalar forms.
#include <atomic>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"
#include "contract/integer_power.h"

namespace kiln {

using namespace cpu;

namespace {

// The arithmetic ops, each a generic function on compute values plus the zero-division flag.
struct AddOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    return wrap_add(a, b);
  }
};
struct SubOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    return wrap_sub(a, b);
  }
};
struct MulOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    return wrap_mul(a, b);
  }
};
struct DivOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>)
      return int_floor_div(a, b, zero);
    else
      return a / b;
  }
};
struct RemainderOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>)
      return int_remainder(a, b, zero);
    else
      return float_remainder(a, b);
  }
};
struct PowOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>)
      return int_pow(a, b, zero);
    else
      return std::pow(a, b);
  }
};
struct MaximumOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();  // NaN propagates
    }
    return a < b ? b : a;
  }
};
struct MinimumOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    }
    return b < a ? b : a;
  }
};
struct Atan2Op {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    return std::atan2(a, b);
  }
};
struct HypotOp {
  template <class T>
  T operator()(T a, T b, std::atomic<bool>&) const {
    return std::hypot(a, b);
  }
};

constexpr const char* kDivisionByZero = "integer division by zero";

void throw_if_divided_by_zero(const std::atomic<bool>& zero, const char* op,
                              std::string_view what = kDivisionByZero) {
  if (zero.load()) detail::fail<InvalidArgument>(op, what);
}

// Wrapping add, sub and mul give the same bits for signed and unsigned integers of one width,
// so both run one kernel.
template <class Op>
constexpr bool kSignBlind =
    std::is_same_v<Op, AddOp> || std::is_same_v<Op, SubOp> || std::is_same_v<Op, MulOp>;
template <class Op, class T>
using op_kernel_t = std::conditional_t<kSignBlind<Op>, bits_t<T>, kernel_t<T>>;

// An op with the zero-division flag bound: one type per op, so the tensor-tensor and the
// tensor-scalar forms share its kernels.
template <class Op>
struct Flagged {
  std::atomic<bool>* zero;
  template <class T>
  T operator()(T a, T b) const {
    return Op{}(a, b, *zero);
  }
};

// The kernel of Op over tensors of dtype, and of Op with a scalar operand.
template <class Op>
void make_binary(DType dtype, bool float_only, const char* op, OwnedKernel& k) {
  auto make = [&]<class T>(type_tag<T>) {
    using K = op_kernel_t<Op, T>;
    k.binary<K, K>(Flagged<Op>{&k.flag()});
  };
  if (float_only) {
    visit_float_kernel(dtype, op, make);
  } else {
    visit_numeric_kernel(dtype, op, make);
  }
}
template <class Op>
void make_binary_scalar(DType dtype, const Scalar& value, const char* op, OwnedKernel& k) {
  // The storage type reads the scalar (it saturates or wraps as that type), carried bit for bit
  // into the kernel type.
  visit_numeric_dtype(dtype, op, [&]<class T>(type_tag<T>) {
    using K = op_kernel_t<Op, T>;
    k.binary<K, K>(Flagged<Op>{&k.flag()});
    k.bind_scalar(static_cast<K>(value.as<compute_t<T>>()));
  });
}

template <class Op>
Primitive binary(Primitive lhs, Primitive rhs, const char* op, bool float_only = false,
                 std::string_view failure = kDivisionByZero) {
  const DType dtype = lhs->dtype();
  OwnedKernel k;
  make_binary<Op>(dtype, float_only, op, k);
  Primitive out = run_binary(std::move(lhs), std::move(rhs), dtype, k.kernel(), op);
  throw_if_divided_by_zero(k.flag(), op, failure);
  return out;
}

template <class Op>
Primitive binary_scalar(Primitive x, Scalar value, const char* op) {
  const DType dtype = x->dtype();
  OwnedKernel k;
  make_binary_scalar<Op>(dtype, value, op, k);
  Primitive out = run_binary_scalar(std::move(x), k.scalar(), dtype, k.kernel(), op);
  throw_if_divided_by_zero(k.flag(), op);
  return out;
}

// pow_scalar of an integer tensor, with the exponent read whole from the scalar (an exponent
// past the dtype's range is not narrowed to it first; see backend/integer_power.h).
Primitive int_pow_scalar(Primitive x, const Scalar& value) {
  const char* op = "pow_scalar";
  const DType dtype = x->dtype();
  const integer_power::Exponent e = integer_power::exponent_of(value, dtype, op);
  std::atomic<bool> zero{false};
  Primitive out = visit_int_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    if (e.negative) {
      const auto f = [&zero, odd = e.odd](T a) { return int_pow_negative(a, odd, zero); };
      return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), op);
    }
    const auto f = [&zero, exponent = static_cast<T>(e.value)](T a) {
      return int_pow(a, exponent, zero);
    };
    return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), op);
  });
  if (zero.load()) {
    const std::string exponent =
        value.is_float() ? detail::concat(value.to_double()) : detail::concat(value.to_int());
    detail::fail<InvalidArgument>(op, "0 raised to the negative power ", exponent,
                                  ": integer division by zero");
  }
  return out;
}

}  // namespace

// The ops of binary and binary_scalar: (name, Op, float only, what an integer zero divisor
// means). Both their CpuBackend methods and their fused steps' kernels come from these lists.
// clang-format off
#define KILN_CPU_ARITH_BINARY(X)                                                             \
  X(add, AddOp, false, kDivisionByZero) X(sub, SubOp, false, kDivisionByZero)              \
  X(mul, MulOp, false, kDivisionByZero) X(div, DivOp, false, kDivisionByZero)              \
  X(remainder, RemainderOp, false, kDivisionByZero)                                        \
  X(pow, PowOp, false, "0 raised to a negative power: integer division by zero")           \
  X(maximum, MaximumOp, false, kDivisionByZero) X(minimum, MinimumOp, false, kDivisionByZero) \
  X(atan2, Atan2Op, true, kDivisionByZero) X(hypot, HypotOp, true, kDivisionByZero)
#define KILN_CPU_ARITH_SCALAR(X)                                                         \
  X(add_scalar, AddOp) X(sub_scalar, SubOp) X(mul_scalar, MulOp) X(div_scalar, DivOp) \
  X(remainder_scalar, RemainderOp)
// clang-format on

// Each op's kernel maker, as the fused steps ask for it (elementwise.h).
#define KILN_CPU_BINARY_MAKER(name, Op, float_only, failure)               \
  void make_##name(DType dtype, const StepParams&, bool, OwnedKernel& k) { \
    make_binary<Op>(dtype, float_only, #name, k);                          \
  }
#define KILN_CPU_SCALAR_MAKER(name, Op)                                           \
  void make_##name(DType dtype, const StepParams& params, bool, OwnedKernel& k) { \
    make_binary_scalar<Op>(dtype, params.scalars[0], #name, k);                   \
  }
namespace {
KILN_CPU_ARITH_BINARY(KILN_CPU_BINARY_MAKER)
KILN_CPU_ARITH_SCALAR(KILN_CPU_SCALAR_MAKER)
}  // namespace
#undef KILN_CPU_BINARY_MAKER
#undef KILN_CPU_SCALAR_MAKER

#define KILN_CPU_BINARY_METHOD(name, Op, float_only, failure)                  \
  Primitive CpuBackend::name(Primitive l, Primitive r) {                       \
    return binary<Op>(std::move(l), std::move(r), #name, float_only, failure); \
  }
KILN_CPU_ARITH_BINARY(KILN_CPU_BINARY_METHOD)
#undef KILN_CPU_BINARY_METHOD
#define KILN_CPU_SCALAR_METHOD(name, Op)              \
  Primitive CpuBackend::name(Primitive x, Scalar v) { \
    return binary_scalar<Op>(std::move(x), v, #name); \
  }
KILN_CPU_ARITH_SCALAR(KILN_CPU_SCALAR_METHOD)
#undef KILN_CPU_SCALAR_METHOD

Primitive CpuBackend::pow_scalar(Primitive x, Scalar v) {
  const DType dtype = x->dtype();
  if (is_float(dtype) && v.to_double() == 2.0) return square(std::move(x));
  if (is_int(dtype)) return int_pow_scalar(std::move(x), v);
  return binary_scalar<PowOp>(std::move(x), v, "pow_scalar");
}

namespace cpu {

bool arith_step_kernel(OpCode op, DType dtype, const StepParams& params, bool contiguous,
                       OwnedKernel& k) {
  switch (op) {
    KILN_CPU_ARITH_BINARY(KILN_CPU_STEP_KERNEL_CASE)
    KILN_CPU_ARITH_SCALAR(KILN_CPU_STEP_KERNEL_CASE)
    default:
      return false;
  }
}

}  // namespace cpu

Primitive CpuBackend::clamp(Primitive x, Scalar min, Scalar max) {
  const DType dtype = x->dtype();
  return visit_numeric_kernel(dtype, "clamp", [&]<class T>(type_tag<T>) -> Primitive {
    // min(max(x, lo), hi): with lo > hi every element becomes hi, as in PyTorch.
    const auto f = [lo = min.as<T>(), hi = max.as<T>()](T a) {
      const T low = a < lo ? lo : a;
      return hi < low ? hi : low;
    };
    return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), "clamp");
  });
}
Primitive CpuBackend::clamp_min(Primitive x, Scalar min) {
  const DType dtype = x->dtype();
  return visit_numeric_kernel(dtype, "clamp_min", [&]<class T>(type_tag<T>) -> Primitive {
    const auto f = [lo = min.as<T>()](T a) { return a < lo ? lo : a; };
    return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), "clamp_min");
  });
}
Primitive CpuBackend::clamp_max(Primitive x, Scalar max) {
  const DType dtype = x->dtype();
  return visit_numeric_kernel(dtype, "clamp_max", [&]<class T>(type_tag<T>) -> Primitive {
    const auto f = [hi = max.as<T>()](T a) { return hi < a ? hi : a; };
    return run_unary(std::move(x), dtype, make_unary_kernel<T, T>(f), "clamp_max");
  });
}

}  // namespace kiln

// Binary arithmetic with broadcasting, and its scalar forms.
#include <atomic>
#include <cmath>

#include "backend/integer_power.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/integer_math.h"

namespace kiln {

using namespace cpu;

namespace {

// The arithmetic ops, each a generic function on compute values plus the zero-division flag.
struct AddOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const { return wrap_add(a, b); }
};
struct SubOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const { return wrap_sub(a, b); }
};
struct MulOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const { return wrap_mul(a, b); }
};
struct DivOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>) return int_floor_div(a, b, zero);
    else return a / b;
  }
};
struct RemainderOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>) return int_remainder(a, b, zero);
    else return float_remainder(a, b);
  }
};
struct PowOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>& zero) const {
    if constexpr (std::is_integral_v<T>) return int_pow(a, b, zero);
    else return std::pow(a, b);
  }
};
struct MaximumOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();  // NaN propagates
    }
    return a < b ? b : a;
  }
};
struct MinimumOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    }
    return b < a ? b : a;
  }
};
struct Atan2Op {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const { return std::atan2(a, b); }
};
struct HypotOp {
  template <class T> T operator()(T a, T b, std::atomic<bool>&) const { return std::hypot(a, b); }
};

constexpr const char* kDivisionByZero = "integer division by zero";

void throw_if_divided_by_zero(const std::atomic<bool>& zero, const char* op,
                              std::string_view what = kDivisionByZero) {
  if (zero.load()) detail::fail<InvalidArgument>(op, what);
}

template <class Op>
Primitive binary(Primitive lhs, Primitive rhs, const char* op, bool float_only = false,
                 std::string_view failure = kDivisionByZero) {
  const DType dtype = lhs->dtype();
  std::atomic<bool> zero{false};
  auto run = [&]<class T>(type_tag<T>) -> Primitive {
    return map_binary<T, T>(
        std::move(lhs), std::move(rhs), dtype,
        [&zero](auto a, auto b) { return Op{}(a, b, zero); }, op);
  };
  Primitive out = float_only ? visit_float_dtype(dtype, op, run) : visit_numeric_dtype(dtype, op, run);
  throw_if_divided_by_zero(zero, op, failure);
  return out;
}

template <class Op>
Primitive binary_scalar(Primitive x, Scalar value, const char* op) {
  const DType dtype = x->dtype();
  std::atomic<bool> zero{false};
  Primitive out = visit_numeric_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    using C = compute_t<T>;
    const C v = value.as<C>();
    return map_unary<T, T>(std::move(x), dtype, [&zero, v](C a) { return Op{}(a, v, zero); });
  });
  throw_if_divided_by_zero(zero, op);
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
      return map_unary<T, T>(std::move(x), dtype,
                             [&zero, odd = e.odd](T a) { return int_pow_negative(a, odd, zero); });
    }
    const T exponent = static_cast<T>(e.value);
    return map_unary<T, T>(std::move(x), dtype,
                           [&zero, exponent](T a) { return int_pow(a, exponent, zero); });
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

Primitive CpuBackend::add(Primitive l, Primitive r) { return binary<AddOp>(std::move(l), std::move(r), "add"); }
Primitive CpuBackend::sub(Primitive l, Primitive r) { return binary<SubOp>(std::move(l), std::move(r), "sub"); }
Primitive CpuBackend::mul(Primitive l, Primitive r) { return binary<MulOp>(std::move(l), std::move(r), "mul"); }
Primitive CpuBackend::div(Primitive l, Primitive r) { return binary<DivOp>(std::move(l), std::move(r), "div"); }
Primitive CpuBackend::remainder(Primitive l, Primitive r) {
  return binary<RemainderOp>(std::move(l), std::move(r), "remainder");
}
Primitive CpuBackend::pow(Primitive l, Primitive r) {
  return binary<PowOp>(std::move(l), std::move(r), "pow", false,
                       "0 raised to a negative power: integer division by zero");
}
Primitive CpuBackend::maximum(Primitive l, Primitive r) {
  return binary<MaximumOp>(std::move(l), std::move(r), "maximum");
}
Primitive CpuBackend::minimum(Primitive l, Primitive r) {
  return binary<MinimumOp>(std::move(l), std::move(r), "minimum");
}
Primitive CpuBackend::atan2(Primitive l, Primitive r) {
  return binary<Atan2Op>(std::move(l), std::move(r), "atan2", true);
}
Primitive CpuBackend::hypot(Primitive l, Primitive r) {
  return binary<HypotOp>(std::move(l), std::move(r), "hypot", true);
}

Primitive CpuBackend::add_scalar(Primitive x, Scalar v) { return binary_scalar<AddOp>(std::move(x), v, "add_scalar"); }
Primitive CpuBackend::sub_scalar(Primitive x, Scalar v) { return binary_scalar<SubOp>(std::move(x), v, "sub_scalar"); }
Primitive CpuBackend::mul_scalar(Primitive x, Scalar v) { return binary_scalar<MulOp>(std::move(x), v, "mul_scalar"); }
Primitive CpuBackend::div_scalar(Primitive x, Scalar v) { return binary_scalar<DivOp>(std::move(x), v, "div_scalar"); }
Primitive CpuBackend::remainder_scalar(Primitive x, Scalar v) {
  return binary_scalar<RemainderOp>(std::move(x), v, "remainder_scalar");
}
Primitive CpuBackend::pow_scalar(Primitive x, Scalar v) {
  const DType dtype = x->dtype();
  if (is_float(dtype) && v.to_double() == 2.0) return square(std::move(x));
  if (is_int(dtype)) return int_pow_scalar(std::move(x), v);
  return binary_scalar<PowOp>(std::move(x), v, "pow_scalar");
}

Primitive CpuBackend::clamp(Primitive x, Scalar min, Scalar max) {
  const DType dtype = x->dtype();
  return visit_numeric_dtype(dtype, "clamp", [&]<class T>(type_tag<T>) -> Primitive {
    using C = compute_t<T>;
    const C lo = min.as<C>(), hi = max.as<C>();
    // min(max(x, lo), hi): with lo > hi every element becomes hi, as in PyTorch.
    return map_unary<T, T>(std::move(x), dtype, [lo, hi](C a) {
      const C low = a < lo ? lo : a;
      return hi < low ? hi : low;
    });
  });
}
Primitive CpuBackend::clamp_min(Primitive x, Scalar min) {
  const DType dtype = x->dtype();
  return visit_numeric_dtype(dtype, "clamp_min", [&]<class T>(type_tag<T>) -> Primitive {
    using C = compute_t<T>;
    const C lo = min.as<C>();
    return map_unary<T, T>(std::move(x), dtype, [lo](C a) { return a < lo ? lo : a; });
  });
}
Primitive CpuBackend::clamp_max(Primitive x, Scalar max) {
  const DType dtype = x->dtype();
  return visit_numeric_dtype(dtype, "clamp_max", [&]<class T>(type_tag<T>) -> Primitive {
    using C = compute_t<T>;
    const C hi = max.as<C>();
    return map_unary<T, T>(std::move(x), dtype, [hi](C a) { return hi < a ? hi : a; });
  });
}

}  // namespace kiln

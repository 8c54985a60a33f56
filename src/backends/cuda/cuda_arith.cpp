// Arithmetic and unary math as generated elementwise kernels. The expressions name prelude
// functions (kernel_source.cpp) that carry the CPU backend's semantics.
#include "backends/cuda/elementwise_ops.h"
#include "contract/integer_power.h"
#include "kiln/detail/op_columns.h"

namespace kiln::cuda {

namespace {
constexpr const char* kDivByZero = "integer division by zero";
constexpr const char* kZeroToNegativePower =
    "0 raised to a negative power: integer division by zero";
}  // namespace

Primitive CudaBackend::add(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "add", Accepts::Numeric, "k_add(a, b)");
}
Primitive CudaBackend::sub(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "sub", Accepts::Numeric, "k_sub(a, b)");
}
Primitive CudaBackend::mul(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "mul", Accepts::Numeric, "k_mul(a, b)");
}
Primitive CudaBackend::div(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "div", Accepts::Numeric, "k_div(a, b, err)",
                    std::nullopt, kDivByZero);
}
Primitive CudaBackend::remainder(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "remainder", Accepts::Numeric,
                    "k_rem(a, b, err)", std::nullopt, kDivByZero);
}
Primitive CudaBackend::pow(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "pow", Accepts::Numeric, "k_pow(a, b, err)",
                    std::nullopt, kZeroToNegativePower);
}
Primitive CudaBackend::atan2(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "atan2", Accepts::Float, "k_atan2(a, b)");
}
Primitive CudaBackend::maximum(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "maximum", Accepts::Numeric, "k_max(a, b)");
}
Primitive CudaBackend::minimum(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "minimum", Accepts::Numeric, "k_min(a, b)");
}
Primitive CudaBackend::hypot(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "hypot", Accepts::Float, "k_hypot(a, b)");
}

Primitive CudaBackend::add_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "add_scalar", Accepts::Numeric, "k_add(a, s0)", {v});
}
Primitive CudaBackend::sub_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "sub_scalar", Accepts::Numeric, "k_sub(a, s0)", {v});
}
Primitive CudaBackend::mul_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "mul_scalar", Accepts::Numeric, "k_mul(a, s0)", {v});
}
Primitive CudaBackend::div_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "div_scalar", Accepts::Numeric, "k_div(a, s0, err)", {v},
                    std::nullopt, kDivByZero);
}
Primitive CudaBackend::remainder_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "remainder_scalar", Accepts::Numeric, "k_rem(a, s0, err)",
                    {v}, std::nullopt, kDivByZero);
}
Primitive CudaBackend::pow_scalar(Primitive x, Scalar v) {
  // As the CPU backend: x^2 of a float is x*x (exact, and what users expect of square).
  if (is_float(x->dtype()) && v.to_double() == 2.0) return square(std::move(x));
  if (is_int(x->dtype())) {
    // The exponent read whole from the scalar, as the CPU does (backend/integer_power.h); a
    // negative one leaves only its parity, baked into the expression.
    const integer_power::Exponent e = integer_power::exponent_of(v, x->dtype(), "pow_scalar");
    if (e.negative) {
      return map_scalar(*this, std::move(x), "pow_scalar", Accepts::Int,
                        e.odd ? "k_pow_neg(a, true, err)" : "k_pow_neg(a, false, err)", {},
                        std::nullopt, kZeroToNegativePower);
    }
    return map_scalar(*this, std::move(x), "pow_scalar", Accepts::Int, "k_pow(a, s0, err)",
                      {Scalar(e.value)});
  }
  return map_scalar(*this, std::move(x), "pow_scalar", Accepts::Numeric, "k_pow(a, s0, err)", {v});
}
Primitive CudaBackend::clamp(Primitive x, Scalar lo, Scalar hi) {
  return map_scalar(*this, std::move(x), "clamp", Accepts::Numeric, "k_clamp(a, s0, s1)", {lo, hi});
}
Primitive CudaBackend::clamp_min(Primitive x, Scalar lo) {
  return map_scalar(*this, std::move(x), "clamp_min", Accepts::Numeric, "(a < s0 ? s0 : a)", {lo});
}
Primitive CudaBackend::clamp_max(Primitive x, Scalar hi) {
  return map_scalar(*this, std::move(x), "clamp_max", Accepts::Numeric, "(s0 < a ? s0 : a)", {hi});
}

Primitive CudaBackend::abs(Primitive x) {
  return map_unary(*this, std::move(x), "abs", Accepts::Numeric, "k_abs(a)");
}
Primitive CudaBackend::neg(Primitive x) {
  return map_unary(*this, std::move(x), "neg", Accepts::Numeric, "k_neg(a)");
}
Primitive CudaBackend::sign(Primitive x) {
  return map_unary(*this, std::move(x), "sign", Accepts::Numeric, "k_sign(a)");
}
Primitive CudaBackend::square(Primitive x) {
  return map_unary(*this, std::move(x), "square", Accepts::Numeric, "k_mul(a, a)");
}

// Every float op of form UNARY that ops.def gives a CUDA kernel (impl G) maps k_<name>, the
// prelude function of that name (kernel_source.cpp): a new one needs only its line there.
#define KILN_CUDA_FLOAT_UNARY_UNARY_F KILN_PROBE
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp)           \
  KILN_WHEN(KILN_AND(KILN_IMPL_CUDA(impl), KILN_IS_PROBE(KILN_CUDA_FLOAT_UNARY_##form##_##kinds))) \
  (Primitive CudaBackend::name(Primitive x) {                                                      \
    return map_unary(*this, std::move(x), #name, Accepts::Float, "k_" #name "(a)");                \
  })
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_CUDA_FLOAT_UNARY_UNARY_F

}  // namespace kiln::cuda

// Gradcheck rows: arithmetic, unary maths, conversions.
#include "conformance/gradcheck.h"
#include "conformance/unary_cases.h"
#include "contract/op_code.h"

namespace kiln::conformance {
namespace {

// The numeric unary ops (abs, square, neg, sign); the float ones come from unary_cases.h.
struct NumericUnaryCase {
  const char* name;
  Primitive (*op)(Primitive);
};
const NumericUnaryCase kNumericUnary[] = {
    {"abs", detail::abs}, {"square", detail::square}, {"neg", detail::neg}, {"sign", detail::sign}};

bool is_differentiable(const char* name) {
  for (const OpInfo& op : all_ops()) {
    if (op.name == name) return op.differentiable;
  }
  return false;
}

std::vector<std::string> grad_unary_names() {
  std::vector<std::string> names;
  for (const UnaryFloatCase& c : unary_float_cases()) {
    if (is_differentiable(c.name)) names.push_back(std::string("grad:") + c.name);
  }
  for (const NumericUnaryCase& c : kNumericUnary) names.push_back(std::string("grad:") + c.name);
  return names;
}

void gradcheck_unary(const Device& device, const char* name, Primitive (*op)(Primitive), double lo,
                     double hi) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    x.lo = lo;
    x.hi = hi;
    gradcheck(device, name, {x}, [&](const Prims& in) { return op(in[0]); });
  }
}

}  // namespace

KILN_CONFORMANCE_ROW(grad_unary, (grad_unary_names())) {
  for (const UnaryFloatCase& c : unary_float_cases()) {
    if (is_differentiable(c.name)) gradcheck_unary(device, c.name, c.op, c.grad_lo, c.grad_hi);
  }
  for (const NumericUnaryCase& c : kNumericUnary) gradcheck_unary(device, c.name, c.op, -2, 2);
}

namespace {

struct GradBinaryCase {
  const char* name;
  Primitive (*op)(Primitive, Primitive);
  double lo, hi;  // operand range
};

const GradBinaryCase kBinary[] = {
    {"add", detail::add, -2, 2},
    {"sub", detail::sub, -2, 2},
    {"mul", detail::mul, -2, 2},
    {"div", detail::div, 0.5, 2},
    {"remainder", detail::remainder, 0.3, 3},
    {"pow", detail::pow, 0.3, 2},
    {"atan2", detail::atan2, -2, 2},
    {"hypot", detail::hypot, -2, 2},
    {"maximum", detail::maximum, -2, 2},
    {"minimum", detail::minimum, -2, 2},
};

}  // namespace

// Same shapes in every layout, and broadcasting both ways ([3, 1] with [1, 4]).
KILN_CONFORMANCE_ROW(grad_binary,
                     ({"grad:add", "grad:sub", "grad:mul", "grad:div", "grad:remainder", "grad:pow",
                       "grad:atan2", "grad:hypot", "grad:maximum", "grad:minimum"})) {
  for (const GradBinaryCase& c : kBinary) {
    for (Layout layout : kLayouts) {
      GradInput a{Shape{3, 4}, layout};
      GradInput b{Shape{3, 4}, Layout::Transposed};
      a.lo = b.lo = c.lo;
      a.hi = b.hi = c.hi;
      gradcheck(device, c.name, {a, b}, [&](const Prims& in) { return c.op(in[0], in[1]); });
    }
    GradInput a{Shape{3, 1}};
    GradInput b{Shape{1, 4}};
    a.lo = b.lo = c.lo;
    a.hi = b.hi = c.hi;
    gradcheck(device, std::string(c.name) + " broadcast", {a, b},
              [&](const Prims& in) { return c.op(in[0], in[1]); });
  }
  // One operand a constant: only the tracked one gets a gradient.
  gradcheck(device, "mul by constant", {{Shape{2, 3}}}, [&](const Prims& in) {
    return detail::mul(in[0],
                       detail::full(Shape{2, 3}, 3.0, DType::F64, in[0]->device(), Kind::Float));
  });
}

KILN_CONFORMANCE_ROW(grad_scalar, ({"grad:add_scalar", "grad:sub_scalar", "grad:mul_scalar",
                                    "grad:div_scalar", "grad:remainder_scalar", "grad:pow_scalar",
                                    "grad:clamp", "grad:clamp_min", "grad:clamp_max"})) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    x.lo = 0.2;
    x.hi = 3.0;
    gradcheck(device, "add_scalar", {x},
              [](const Prims& in) { return detail::add_scalar(in[0], 1.5); });
    gradcheck(device, "sub_scalar", {x},
              [](const Prims& in) { return detail::sub_scalar(in[0], 1.5); });
    gradcheck(device, "mul_scalar", {x},
              [](const Prims& in) { return detail::mul_scalar(in[0], -2.5); });
    gradcheck(device, "div_scalar", {x},
              [](const Prims& in) { return detail::div_scalar(in[0], 4.0); });
    gradcheck(device, "remainder_scalar", {x},
              [](const Prims& in) { return detail::remainder_scalar(in[0], 0.7); });
    gradcheck(device, "pow_scalar", {x},
              [](const Prims& in) { return detail::pow_scalar(in[0], 2.5); });
    gradcheck(device, "pow_scalar 0", {x},
              [](const Prims& in) { return detail::pow_scalar(in[0], 0); });
    gradcheck(device, "clamp", {x}, [](const Prims& in) { return detail::clamp(in[0], 0.8, 2.1); });
    gradcheck(device, "clamp_min", {x},
              [](const Prims& in) { return detail::clamp(in[0], 1.1, std::nullopt); });
    gradcheck(device, "clamp_max", {x},
              [](const Prims& in) { return detail::clamp(in[0], std::nullopt, 1.3); });
  }
}

KILN_CONFORMANCE_ROW(grad_matmul, ({"grad:matmul", "grad:cross"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "matmul", {{Shape{3, 4}, layout}, {Shape{4, 5}, Layout::Transposed}},
              [](const Prims& in) { return detail::matmul(in[0], in[1]); });
  }
  // Batched with the rhs broadcast over the batch.
  gradcheck(device, "matmul batched", {{Shape{2, 3, 4}}, {Shape{1, 4, 2}}},
            [](const Prims& in) { return detail::matmul(in[0], in[1]); });
  gradcheck(device, "cross", {{Shape{4, 3}}, {Shape{4, 3}, Layout::Strided}},
            [](const Prims& in) { return detail::cross(in[0], in[1], 1); });
}

KILN_CONFORMANCE_ROW(grad_convert, ({"grad:cast", "grad:to_device"})) {
  gradcheck(device, "cast f32 and back", {{Shape{2, 3}}},
            [](const Prims& in) {
              return detail::cast(
                  detail::mul(detail::cast(in[0], DType::F32), detail::cast(in[0], DType::F32)),
                  DType::F64);
            },
            {.eps = 1e-3, .tolerance = 1e-3, .check_dtypes = false});
  // Leaving autodiff and coming back on the same hardware detaches; moving between autodiff
  // devices keeps the graph (checked across GPUs by their backends' runs of this row).
  gradcheck(device, "to_device same device", {{Shape{2, 3}}}, [](const Prims& in) {
    return detail::mul(detail::to_device(in[0], in[0]->device()), in[0]);
  });
}

}  // namespace kiln::conformance

// Gradcheck rows: reductions (sum, mean, prod, max, min and their _dim forms) and cumulative ops,
// with zeros for the products and two-way ties for max/min.
#include "conformance/gradcheck.h"
#include "kiln/detail/op_columns.h"

namespace kiln::conformance {
namespace {

// [3, 4] inputs with zeros: one; two in different lines; two in one line (row 0 and column 1).
const std::vector<double> kOneZero = {1.1,  -0.8, 0.0,   1.3, 0.9,  1.4,
                                      -1.2, 0.7,  -1.05, 0.6, 1.25, 0.95};
const std::vector<double> kTwoZeros = {1.1, 0.0, -0.8,  1.3, 0.9,  1.4,
                                       0.0, 0.7, -1.05, 0.6, 1.25, 0.95};
const std::vector<double> kTwoZerosInALine = {1.1, 0.0, -0.8,  0.0, 0.9,  0.0,
                                              1.2, 0.7, -1.05, 0.6, 1.25, 0.95};

// The gradient of sum(y) with respect to x, read to the host.
std::vector<double> grad_of_sum(const Primitive& x, const Primitive& y) {
  Gradients grads = detail::backward(detail::sum(y), std::nullopt, {});
  return detail::into_data(*detail::grad(x, grads)).to_f64_vec();
}

}  // namespace

namespace {

// Every differentiable op of form DIM or DIM_NONEMPTY in ops.def (reductions along a dim that keep
// it, scans): generated from the list, so a new one is checked without a line here.
struct DimOpCase {
  const char* name;
  Primitive (*op)(Primitive, std::int64_t);
};
#define KILN_GRAD_DIM_FORM_DIM KILN_PROBE
#define KILN_GRAD_DIM_FORM_DIM_NONEMPTY KILN_PROBE
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_AND(KILN_IMPL_GRAD(impl), KILN_IS_PROBE(KILN_GRAD_DIM_FORM_##form)))    \
  (DimOpCase{#name, detail::name}, )
const DimOpCase kDimOps[] = {
#include "kiln/detail/ops.def"
};
#undef KILN_OP
#undef KILN_GRAD_DIM_FORM_DIM
#undef KILN_GRAD_DIM_FORM_DIM_NONEMPTY

std::vector<std::string> dim_op_names() {
  std::vector<std::string> names;
  for (const DimOpCase& c : kDimOps) names.push_back(std::string("grad:") + c.name);
  return names;
}

}  // namespace

// Random [3, 4] and [2, 3, 2] inputs, every dim, every layout.
KILN_CONFORMANCE_ROW(grad_dim_ops, (dim_op_names())) {
  for (const DimOpCase& c : kDimOps) {
    for (Layout layout : kLayouts) {
      for (std::int64_t dim : {0, 1, -1}) {
        gradcheck(device, std::string(c.name) + " dim " + std::to_string(dim),
                  {{Shape{3, 4}, layout}}, [&](const Prims& in) { return c.op(in[0], dim); });
      }
    }
    gradcheck(device, std::string(c.name) + " 3-d", {{Shape{2, 3, 2}}},
              [&](const Prims& in) { return c.op(in[0], 1); });
  }
}

KILN_CONFORMANCE_ROW(grad_sum_mean, ({"grad:sum", "grad:sum_dim", "grad:mean", "grad:mean_dim"})) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    gradcheck(device, "sum", {x}, [](const Prims& in) { return detail::sum(in[0]); });
    gradcheck(device, "mean", {x}, [](const Prims& in) { return detail::mean(in[0]); });
    for (std::int64_t dim : {0, 1}) {
      const std::string d = std::string(" ").append(std::to_string(dim));
      gradcheck(device, "sum_dim" + d, {x},
                [dim](const Prims& in) { return detail::sum_dim(in[0], dim); });
      gradcheck(device, "mean_dim" + d, {x},
                [dim](const Prims& in) { return detail::mean_dim(in[0], dim); });
    }
  }
  gradcheck(device, "sum_dim 3-d", {{Shape{2, 3, 2}}},
            [](const Prims& in) { return detail::sum_dim(in[0], 1); });
  gradcheck(device, "mean_dim 3-d", {{Shape{2, 3, 2}}},
            [](const Prims& in) { return detail::mean_dim(in[0], 2); });
  gradcheck(device, "sum empty", {{Shape{0, 3}}},
            [](const Prims& in) { return detail::sum(in[0]); });
  gradcheck(device, "sum_dim over an empty dim", {{Shape{2, 0}}},
            [](const Prims& in) { return detail::sum_dim(in[0], 1); });
}

KILN_CONFORMANCE_ROW(grad_prod, ({"grad:prod", "grad:prod_dim"})) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    x.lo = -1.5;
    x.hi = 1.5;
    gradcheck(device, "prod", {x}, [](const Prims& in) { return detail::prod(in[0]); });
    for (std::int64_t dim : {0, 1}) {
      gradcheck(device, "prod_dim " + std::to_string(dim), {x},
                [dim](const Prims& in) { return detail::prod_dim(in[0], dim); });
    }
  }
  const std::pair<const char*, const std::vector<double>*> zeros[] = {
      {"one zero", &kOneZero},
      {"two zeros", &kTwoZeros},
      {"two zeros in a line", &kTwoZerosInALine}};
  for (const auto& [name, values] : zeros) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      GradInput x{Shape{3, 4}, layout, *values};
      gradcheck(device, std::string("prod, ") + name, {x},
                [](const Prims& in) { return detail::prod(in[0]); });
      for (std::int64_t dim : {0, 1}) {
        gradcheck(device, "prod_dim " + std::to_string(dim) + ", " + name, {x},
                  [dim](const Prims& in) { return detail::prod_dim(in[0], dim); });
      }
    }
  }
  // A line of one element, a 3-d input along its middle dim, and empty inputs.
  gradcheck(device, "prod_dim of length 1", {{Shape{3, 1}}},
            [](const Prims& in) { return detail::prod_dim(in[0], 1); });
  gradcheck(device, "prod_dim 3-d", {{Shape{2, 3, 2}, Layout::Strided}},
            [](const Prims& in) { return detail::prod_dim(in[0], 1); });
  gradcheck(device, "prod_dim over an empty dim", {{Shape{2, 0}}},
            [](const Prims& in) { return detail::prod_dim(in[0], 1); });
  gradcheck(device, "prod_dim of an empty tensor", {{Shape{0, 3}}},
            [](const Prims& in) { return detail::prod_dim(in[0], 1); });
  gradcheck(device, "prod of an empty tensor", {{Shape{0, 3}}},
            [](const Prims& in) { return detail::prod(in[0]); });
}

KILN_CONFORMANCE_ROW(grad_extrema, ({"grad:max", "grad:min", "grad:max_dim", "grad:min_dim",
                                     "grad:max_dim_with_indices", "grad:min_dim_with_indices"})) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    gradcheck(device, "max", {x}, [](const Prims& in) { return detail::max(in[0]); });
    gradcheck(device, "min", {x}, [](const Prims& in) { return detail::min(in[0]); });
    for (std::int64_t dim : {0, 1}) {
      const std::string d = std::string(" ").append(std::to_string(dim));
      gradcheck(device, "max_dim" + d, {x},
                [dim](const Prims& in) { return detail::max_dim(in[0], dim); });
      gradcheck(device, "min_dim" + d, {x},
                [dim](const Prims& in) { return detail::min_dim(in[0], dim); });
      gradcheck(device, "max_dim_with_indices" + d, {x},
                [dim](const Prims& in) { return detail::max_dim_with_indices(in[0], dim).first; });
      gradcheck(device, "min_dim_with_indices" + d, {x},
                [dim](const Prims& in) { return detail::min_dim_with_indices(in[0], dim).first; });
    }
  }
  // Two-way ties (the maximum 2 twice, the minimum -1 twice, also within lines): max and min
  // split g evenly, which is what central differences measure there.
  GradInput tied{Shape{3, 4},
                 Layout::Contiguous,
                 {2.0, 0.5, -1.0, 1.5, 0.3, 2.0, 0.7, -0.2, -1.0, 1.1, 0.4, 0.9}};
  gradcheck(device, "max tied", {tied}, [](const Prims& in) { return detail::max(in[0]); });
  gradcheck(device, "min tied", {tied}, [](const Prims& in) { return detail::min(in[0]); });
  GradInput tied_lines{Shape{2, 3}, Layout::Transposed, {1.5, -0.5, 1.5, 0.2, 0.2, 0.9}};
  gradcheck(device, "max_dim tied", {tied_lines},
            [](const Prims& in) { return detail::max_dim(in[0], 1); });
  gradcheck(device, "min_dim tied", {tied_lines},
            [](const Prims& in) { return detail::min_dim(in[0], 1); });
  gradcheck(device, "max_dim 3-d", {{Shape{2, 3, 2}, Layout::Offset}},
            [](const Prims& in) { return detail::max_dim(in[0], 1); });

  // With indices, the whole gradient goes to the element whose index is returned, ties or not.
  const Device ad = device.autodiff();
  for (bool largest : {true, false}) {
    Primitive x = detail::require_grad(make_primitive({1.5, -0.5, 1.5, 0.2, 0.2, 0.9}, Shape{2, 3},
                                                      DType::F32, Layout::Contiguous, ad),
                                       true);
    auto [values, indices] =
        largest ? detail::max_dim_with_indices(x, 1) : detail::min_dim_with_indices(x, 1);
    const std::vector<double> picked = detail::into_data(indices).to_f64_vec();
    std::vector<double> expected(6, 0.0);
    for (std::size_t row = 0; row < 2; ++row)
      expected[row * 3 + static_cast<std::size_t>(picked[row])] = 1.0;
    EXPECT_EQ(grad_of_sum(x, values), expected)
        << (largest ? "max" : "min") << "_dim_with_indices with ties";
  }
}

KILN_CONFORMANCE_ROW(grad_scan, ({"grad:cumsum", "grad:cumprod", "grad:cummax", "grad:cummin"})) {
  for (Layout layout : kLayouts) {
    GradInput x{Shape{3, 4}, layout};
    x.lo = -1.5;
    x.hi = 1.5;
    for (std::int64_t dim : {0, 1}) {
      const std::string d = std::string(" ").append(std::to_string(dim));
      gradcheck(device, "cumsum" + d, {x},
                [dim](const Prims& in) { return detail::cumsum(in[0], dim); });
      gradcheck(device, "cumprod" + d, {x},
                [dim](const Prims& in) { return detail::cumprod(in[0], dim); });
      gradcheck(device, "cummax" + d, {x},
                [dim](const Prims& in) { return detail::cummax(in[0], dim); });
      gradcheck(device, "cummin" + d, {x},
                [dim](const Prims& in) { return detail::cummin(in[0], dim); });
    }
  }
  // cumprod through zeros: before, at and after the first zero of a line, and a second zero.
  const std::pair<const char*, const std::vector<double>*> zeros[] = {
      {"one zero", &kOneZero},
      {"two zeros", &kTwoZeros},
      {"two zeros in a line", &kTwoZerosInALine}};
  for (const auto& [name, values] : zeros) {
    for (std::int64_t dim : {0, 1}) {
      gradcheck(device, "cumprod " + std::to_string(dim) + ", " + name,
                {{Shape{3, 4}, Layout::Strided, *values}},
                [dim](const Prims& in) { return detail::cumprod(in[0], dim); });
    }
  }
  gradcheck(device, "cumprod, zeros first and last",
            {{Shape{2, 4}, Layout::Contiguous, {0.0, 1.2, -0.7, 0.0, 0.9, 0.0, 0.0, 1.3}}},
            [](const Prims& in) { return detail::cumprod(in[0], 1); });
  for (std::int64_t dim : {0, 1, 2}) {
    const std::string d = " 3-d " + std::to_string(dim);
    gradcheck(device, "cumsum" + d, {{Shape{2, 3, 2}}},
              [dim](const Prims& in) { return detail::cumsum(in[0], dim); });
    gradcheck(device, "cummax" + d, {{Shape{2, 3, 2}}},
              [dim](const Prims& in) { return detail::cummax(in[0], dim); });
  }
  gradcheck(device, "cumsum empty", {{Shape{0, 3}}},
            [](const Prims& in) { return detail::cumsum(in[0], 1); });
  gradcheck(device, "cumprod empty", {{Shape{2, 0}}},
            [](const Prims& in) { return detail::cumprod(in[0], 1); });
  gradcheck(device, "cummin empty", {{Shape{2, 0}}},
            [](const Prims& in) { return detail::cummin(in[0], 1); });
}

namespace {

// d/dx sum(f(x)²), computed with create_graph so that it is itself differentiable: gradcheck of
// it checks the second derivatives, i.e. that the rules of f are built of differentiable ops.
GradFn first_derivative(GradFn f) {
  return [f](const Prims& in) {
    Primitive x = detail::is_require_grad(in[0]) ? in[0] : detail::require_grad(in[0], true);
    Primitive loss = detail::sum(detail::square(f({x})));
    Gradients grads = detail::backward(loss, std::nullopt, {.create_graph = true});
    return *detail::grad(x, grads);
  };
}

}  // namespace

// Second derivatives through the rules of reductions, scans, indexing, layout and sorting.
KILN_CONFORMANCE_ROW(grad_second_order_data,
                     ({"grad:prod", "grad:cumprod", "grad:gather", "grad:scatter", "grad:sort"})) {
  const std::pair<const char*, GradFn> cases[] = {
      {"prod_dim", [](const Prims& in) { return detail::prod_dim(in[0], 1); }},
      {"prod with a zero", [](const Prims& in) { return detail::prod(in[0]); }},
      {"cumprod", [](const Prims& in) { return detail::cumprod(in[0], 1); }},
      {"cumsum", [](const Prims& in) { return detail::cumsum(in[0], 0); }},
      {"cummax", [](const Prims& in) { return detail::cummax(in[0], 1); }},
      {"max_dim", [](const Prims& in) { return detail::max_dim(in[0], 0); }},
      {"max", [](const Prims& in) { return detail::max(in[0]); }},
      {"gather",
       [](const Prims& in) {
         return detail::gather(1, in[0], ints({2, 0, 2, 1, 1, 3}, Shape{3, 2}, in[0]));
       }},
      {"scatter assign",
       [](const Prims& in) {
         Primitive values = detail::square(detail::slice(in[0], {Slice(0, 2)}));
         return detail::scatter(0, in[0], ints({1, 1, 0, 2, 0, 1, 0, 2}, Shape{2, 4}, in[0]),
                                values, IndexingUpdate::Assign);
       }},
      {"select_assign",
       [](const Prims& in) {
         return detail::select_assign(detail::square(in[0]), 0, ints({2, 0, 2}, Shape{3}, in[0]),
                                      in[0], IndexingUpdate::Assign);
       }},
      {"mask_select",
       [](const Prims& in) {
         Primitive mask = make_primitive({1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1}, Shape{3, 4},
                                         DType::Bool, Layout::Contiguous, in[0]->device());
         return detail::mask_select(detail::exp(in[0]), mask);
       }},
      {"unfold", [](const Prims& in) { return detail::exp(detail::unfold(in[0], 1, 2, 1)); }},
      {"cat and expand",
       [](const Prims& in) {
         Primitive row = detail::slice(in[0], {Slice(0, 1)});
         return detail::cat({detail::square(in[0]), detail::expand(row, Shape{2, 4})}, 0);
       }},
      {"sort", [](const Prims& in) { return detail::sort(detail::square(in[0]), 1, true); }},
      {"topk", [](const Prims& in) { return detail::topk_with_indices(in[0], 2, 0, true).first; }},
  };
  for (const auto& [name, f] : cases) {
    GradInput x{Shape{3, 4}, Layout::Transposed};
    x.lo = -1.5;
    x.hi = 1.5;
    if (std::string(name) == "prod with a zero") x.values = kOneZero;
    gradcheck(device, std::string("second order: ") + name, {x}, first_derivative(f));
  }
}

}  // namespace kiln::conformance

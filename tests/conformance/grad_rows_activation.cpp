// Gradcheck rows: activations, their fused backward ops, and second derivatives (the gradient
// recorded with create_graph, differentiated again).
#include <algorithm>
#include <functional>

#include "conformance/grad_of.h"
#include "conformance/gradcheck.h"
#include "runtime/registry.h"

namespace kiln::conformance {
namespace {

struct ActivationCase {
  const char* name;
  std::function<Primitive(const Primitive&)> op;
  double lo, hi;
};

// Ranges keep clear of the kinks: relu at 0 is crossed by random values only with probability
// ~1e-6; hard_sigmoid's flat parts start at x = -2.5 and 2.5.
const std::vector<ActivationCase>& activation_cases() {
  static const std::vector<ActivationCase> cases = {
      {"relu", [](const Primitive& x) { return detail::relu(x); }, -2, 2},
      {"leaky_relu", [](const Primitive& x) { return detail::leaky_relu(x, 0.1); }, -2, 2},
      {"gelu", [](const Primitive& x) { return detail::gelu(x); }, -3, 3},
      {"sigmoid", [](const Primitive& x) { return detail::sigmoid(x); }, -4, 4},
      {"silu", [](const Primitive& x) { return detail::silu(x); }, -4, 4},
      {"hard_sigmoid", [](const Primitive& x) { return detail::hard_sigmoid(x, 0.2, 0.5); }, -2.4,
       2.4},
      {"hard_sigmoid flat", [](const Primitive& x) { return detail::hard_sigmoid(x, 0.2, 0.5); },
       2.6, 4},
      {"log_sigmoid", [](const Primitive& x) { return detail::log_sigmoid(x); }, -4, 4},
  };
  return cases;
}

}  // namespace

KILN_CONFORMANCE_ROW(grad_activation, ({"grad:relu", "grad:leaky_relu", "grad:gelu", "grad:sigmoid",
                                        "grad:silu", "grad:hard_sigmoid", "grad:log_sigmoid"})) {
  for (const ActivationCase& c : activation_cases()) {
    for (Layout layout : kLayouts) {
      GradInput x{Shape{3, 4}, layout};
      x.lo = c.lo;
      x.hi = c.hi;
      gradcheck(device, c.name, {x}, [&](const Prims& in) { return c.op(in[0]); });
    }
    gradcheck(device, std::string(c.name) + " empty", {{Shape{0, 3}}},
              [&](const Prims& in) { return c.op(in[0]); });
  }
  // A negative leaky slope, and hard_sigmoid with a negative alpha (its band mirrored).
  gradcheck(device, "leaky_relu negative slope", {{Shape{2, 5}}},
            [](const Prims& in) { return detail::leaky_relu(in[0], -0.7); });
  GradInput mirrored{Shape{2, 5}};
  mirrored.lo = -3;
  mirrored.hi = 3;
  mirrored.values = {-3, -2.2, -1.5, -0.4, 0.3, 0.9, 1.7, 2.3, 2.6, 2.9};
  gradcheck(device, "hard_sigmoid negative alpha", {mirrored},
            [](const Prims& in) { return detail::hard_sigmoid(in[0], -0.25, 0.5); });
}

// alpha broadcasts against x (one per column, one per row, one for all) or matches it.
KILN_CONFORMANCE_ROW(grad_prelu, ({"grad:prelu"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "prelu per column", {{Shape{3, 4}, layout}, {Shape{1, 4}}},
              [](const Prims& in) { return detail::prelu(in[0], in[1]); });
  }
  gradcheck(device, "prelu per row", {{Shape{3, 4}}, {Shape{3, 1}, Layout::Strided}},
            [](const Prims& in) { return detail::prelu(in[0], in[1]); });
  gradcheck(device, "prelu shared", {{Shape{2, 3}}, {Shape{1, 1}}},
            [](const Prims& in) { return detail::prelu(in[0], in[1]); });
  gradcheck(device, "prelu full", {{Shape{2, 3}, Layout::Transposed}, {Shape{2, 3}}},
            [](const Prims& in) { return detail::prelu(in[0], in[1]); });
}

// Along the last dim, the first and a middle one; empty rows.
KILN_CONFORMANCE_ROW(grad_softmax, ({"grad:softmax", "grad:log_softmax", "grad:softmin"})) {
  using Op = Primitive (*)(Primitive, std::int64_t);
  const std::pair<const char*, Op> ops[] = {{"softmax", detail::softmax},
                                            {"log_softmax", detail::log_softmax},
                                            {"softmin", detail::softmin}};
  for (const auto& entry : ops) {
    // Named copies rather than a structured binding, which clang before 16 cannot capture.
    const char* const name = entry.first;
    const Op op = entry.second;
    for (Layout layout : kLayouts) {
      for (std::int64_t dim : {0, 1}) {
        gradcheck(device, std::string(name) + " dim " + std::to_string(dim),
                  {{Shape{3, 4}, layout}}, [&](const Prims& in) { return op(in[0], dim); });
      }
    }
    gradcheck(device, std::string(name) + " 3-d dim 1", {{Shape{2, 3, 2}}},
              [&](const Prims& in) { return op(in[0], 1); });
    gradcheck(device, std::string(name) + " empty", {{Shape{0, 3}}},
              [&](const Prims& in) { return op(in[0], 1); });
    // Second derivatives: d/dx and d/dseed of the recorded gradient.
    gradcheck(device, std::string(name) + " second derivative", {{Shape{2, 3}}, {Shape{2, 3}}},
              [&](const Prims& in) {
                return grad_of(in[0], in[1], [&](const Primitive& x) { return op(x, 1); });
              });
  }
}

// Every row's target a different class; a second derivative through the recorded gradient.
KILN_CONFORMANCE_ROW(grad_softmax_cross_entropy, ({"grad:softmax_cross_entropy"})) {
  auto loss = [](const std::vector<double>& targets) {
    return [targets](const Prims& in) {
      const auto rows = static_cast<std::int64_t>(targets.size());
      return detail::softmax_cross_entropy(in[0], ints(targets, Shape{rows}, in[0]));
    };
  };
  for (Layout layout : kLayouts) {
    gradcheck(device, "softmax_cross_entropy", {{Shape{3, 4}, layout}}, loss({2, 0, 3}));
  }
  gradcheck(device, "softmax_cross_entropy one class", {{Shape{2, 1}}}, loss({0, 0}));
  gradcheck(device, "softmax_cross_entropy empty", {{Shape{0, 3}}}, loss({}));
  gradcheck(device, "softmax_cross_entropy second derivative", {{Shape{2, 3}}, {Shape{2}}},
            [&](const Prims& in) {
              return grad_of(in[0], in[1], [&](const Primitive& x) { return loss({1, 2})({x}); });
            });
}

// The fused backward ops, called on the backend: linear in the incoming gradient, and (gelu,
// sigmoid) differentiable in the saved value too.
KILN_CONFORMANCE_ROW(grad_activation_backward,
                     ({"grad:relu_backward", "grad:gelu_backward", "grad:sigmoid_backward"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "relu_backward", {{Shape{3, 4}, layout}, {Shape{3, 4}}}, [](const Prims& in) {
      return backend_for(in[0]->device()).relu_backward(in[0], in[1]);
    });
    gradcheck(
        device, "gelu_backward", {{Shape{3, 4}, layout}, {Shape{3, 4}, Layout::Transposed}},
        [](const Prims& in) { return backend_for(in[0]->device()).gelu_backward(in[0], in[1]); });
    GradInput s{Shape{3, 4}, layout};
    s.lo = 0.05;
    s.hi = 0.95;
    gradcheck(device, "sigmoid_backward", {s, {Shape{3, 4}}}, [](const Prims& in) {
      return backend_for(in[0]->device()).sigmoid_backward(in[0], in[1]);
    });
  }
}

// Second derivatives through create_graph: the first gradient is recorded with the backward ops
// above (and the softmax rows), so these check the rules of the rules.
KILN_CONFORMANCE_ROW(grad_activation_second, ({"grad:relu", "grad:gelu", "grad:sigmoid",
                                               "grad:silu", "grad:log_sigmoid"})) {
  const char* names[] = {"relu", "gelu", "sigmoid", "silu", "log_sigmoid"};
  for (const ActivationCase& c : activation_cases()) {
    if (std::find_if(std::begin(names), std::end(names),
                     [&](const char* n) { return std::string(n) == c.name; }) == std::end(names)) {
      continue;
    }
    GradInput x{Shape{2, 3}};
    x.lo = c.lo;
    x.hi = c.hi;
    gradcheck(device, std::string(c.name) + " second derivative", {x, {Shape{2, 3}}},
              [&](const Prims& in) { return grad_of(in[0], in[1], c.op); });
  }
}

// Under balanced checkpointing the activations' outputs are recomputed, not stored: a chain of
// them reads outputs recomputed from outputs that were themselves recomputed.
KILN_CONFORMANCE_ROW(grad_activation_balanced,
                     ({"grad:relu", "grad:sigmoid", "grad:gelu", "grad:silu", "grad:softmax",
                       "grad:log_softmax"})) {
  const CheckpointScope scope(CheckpointStrategy::Balanced);
  gradcheck(
      device, "relu, sigmoid, softmax (balanced)", {{Shape{3, 4}, Layout::Transposed}},
      [](const Prims& in) { return detail::softmax(detail::sigmoid(detail::relu(in[0])), 1); });
  gradcheck(device, "gelu, silu, log_softmax (balanced)", {{Shape{3, 4}}}, [](const Prims& in) {
    return detail::log_softmax(detail::silu(detail::gelu(in[0])), 0);
  });
}

}  // namespace kiln::conformance

#include "kiln/nn/rnn.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/activation.h"
#include "kiln/detail/format.h"
#include "kiln/module_ops.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

void RecurrentStack::visit(Visitor& visitor, std::string_view prefix) {
  // PyTorch's order: layer 0's four tensors, its reverse direction's four, then layer 1, ...
  auto visit_one = [&](RecurrentWeights& w, const std::string& suffix) {
    detail::visit_member(visitor, prefix, "weight_ih" + suffix, w.weight_ih);
    detail::visit_member(visitor, prefix, "weight_hh" + suffix, w.weight_hh);
    if (w.bias_ih) detail::visit_member(visitor, prefix, "bias_ih" + suffix, *w.bias_ih);
    if (w.bias_hh) detail::visit_member(visitor, prefix, "bias_hh" + suffix, *w.bias_hh);
  };
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const std::string suffix = "_l" + std::to_string(k);
    visit_one(layers[k], suffix);
    if (k < reverse.size()) visit_one(reverse[k], suffix + "_reverse");
  }
}

namespace {

// The layers of an LSTM (4 gates) or GRU (3 gates) as the config describes them.
RecurrentStack make_stack(const char* op, std::int64_t gates, std::int64_t input_size,
                          std::int64_t hidden_size, std::int64_t num_layers, bool bias,
                          bool batch_first, double dropout, bool bidirectional,
                          const Device& device) {
  if (input_size <= 0 || hidden_size <= 0 || num_layers <= 0) {
    kiln::detail::fail<InvalidArgument>(op, "input_size ", input_size, ", hidden_size ",
                                        hidden_size, " and num_layers ", num_layers,
                                        " must all be positive");
  }
  detail::check_dropout_probability(dropout);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const Initializer uniform = Initializer::uniform(-bound, bound);
  // Layers after the first read both directions' outputs side by side.
  const std::int64_t directions = bidirectional ? 2 : 1;
  auto make = [&](std::int64_t in) {
    RecurrentWeights w;
    w.weight_ih = Param<2>(uniform.init<2>(Shape{gates * hidden_size, in}, device));
    w.weight_hh = Param<2>(uniform.init<2>(Shape{gates * hidden_size, hidden_size}, device));
    if (bias) {
      w.bias_ih = Param<1>(uniform.init<1>(Shape{gates * hidden_size}, device));
      w.bias_hh = Param<1>(uniform.init<1>(Shape{gates * hidden_size}, device));
    }
    return w;
  };
  RecurrentStack out;
  for (std::int64_t k = 0; k < num_layers; ++k) {
    const std::int64_t in = k == 0 ? input_size : directions * hidden_size;
    out.layers.push_back(make(in));
    if (bidirectional) out.reverse.push_back(make(in));
  }
  out.hidden_size = hidden_size;
  out.batch_first = batch_first;
  out.dropout = dropout;
  return out;
}

std::optional<Tensor<1>> value_of(const std::optional<Param<1>>& p) {
  if (!p) return std::nullopt;
  return p->val();
}

// x W^T + b for every step at once ([T, B, in] -> [T, B, G * H]) or one step ([B, H] -> ...).
template <std::size_t D>
Tensor<D> project(const Tensor<D>& x, const Param<2>& weight, const std::optional<Param<1>>& bias) {
  return module::linear(x, weight.forward_value(), value_of(bias));
}

// Gate k of [B, G * H].
Tensor<2> gate(const Tensor<2>& gates, std::int64_t k, std::int64_t hidden) {
  return gates.narrow(1, k * hidden, hidden);
}

// The input in time-major form [T, B, in], checked against the first layer.
Tensor<3> time_major(const char* op, const Tensor<3>& x, bool batch_first,
                     const std::vector<RecurrentWeights>& layers) {
  if (layers.empty()) {
    kiln::detail::fail<InvalidArgument>(op, "the module has no layers (build it with its Config)");
  }
  const std::int64_t input_size = layers.front().weight_ih.val().dims()[1];
  if (x.dims()[2] != input_size) {
    kiln::detail::fail<ShapeMismatch>(op, "input ", x.shape().to_string(), " has ", x.dims()[2],
                                      " features (dim 2) but input_size is ", input_size);
  }
  return batch_first ? x.swap_dims(0, 1) : x;
}

// Checks a module's reverse weights against its forward ones: none, or one set per layer.
void check_directions(const char* op, const std::vector<RecurrentWeights>& layers,
                      const std::vector<RecurrentWeights>& reverse) {
  if (!reverse.empty() && reverse.size() != layers.size()) {
    kiln::detail::fail<InvalidArgument>(op, "the module has ", layers.size(),
                                        " forward layer(s) but ", reverse.size(),
                                        " reverse one(s); a bidirectional module needs one each");
  }
}

// The initial state of slot (layer * directions + direction) from [L * D, B, H], or zeros.
Tensor<2> initial(const char* op, const char* name, const std::optional<Tensor<3>>& all,
                  std::size_t slot, std::size_t slots, std::int64_t batch, std::int64_t hidden,
                  const Tensor<3>& like) {
  if (!all) return Tensor<2>::zeros({batch, hidden}, like.device(), like.dtype());
  const auto dims = all->dims();
  if (dims[0] != static_cast<std::int64_t>(slots) || dims[1] != batch || dims[2] != hidden) {
    kiln::detail::fail<ShapeMismatch>(op, name, " ", all->shape().to_string(),
                                      " must be [num_layers * num_directions, batch, hidden] = [",
                                      slots, ", ", batch, ", ", hidden, "]");
  }
  return all->narrow(0, static_cast<std::int64_t>(slot), 1).squeeze<2>(0);
}

// Runs one direction of one layer over sequence [T, B, in]; step(input_gates_t, w) advances the
// caller's state and returns the new h. The outputs come back in time order [T, B, H] whichever
// way the direction reads.
template <class Step>
Tensor<3> run_direction(const Tensor<3>& sequence, const RecurrentWeights& w, bool reverse,
                        Step step) {
  const std::int64_t steps = sequence.dims()[0];
  const Tensor<3> input_gates = project(sequence, w.weight_ih, w.bias_ih);  // [T, B, G * H]
  std::vector<Tensor<2>> outputs;
  outputs.reserve(static_cast<std::size_t>(steps));
  for (std::int64_t i = 0; i < steps; ++i) {
    const std::int64_t t = reverse ? steps - 1 - i : i;
    outputs.push_back(step(input_gates.narrow(0, t, 1).squeeze<2>(0)));
  }
  if (reverse) std::reverse(outputs.begin(), outputs.end());
  return Tensor<2>::stack(outputs, 0);
}

}  // namespace

Lstm LstmConfig::init(const Device& device) const {
  Lstm lstm;
  static_cast<RecurrentStack&>(lstm) =
      make_stack("LstmConfig::init", 4, input_size, hidden_size, num_layers, bias, batch_first,
                 dropout, bidirectional, device);
  return lstm;
}

LstmOutput Lstm::forward(const Tensor<3>& x, const std::optional<LstmState>& state) const {
  const char* op = "Lstm::forward";
  check_directions(op, layers, reverse);
  Tensor<3> sequence = time_major(op, x, batch_first, layers);
  const std::int64_t batch = sequence.dims()[1];
  const std::size_t directions = bidirectional() ? 2 : 1;
  const std::size_t slots = layers.size() * directions;
  std::optional<Tensor<3>> h0, c0;
  if (state) {
    h0 = state->h;
    c0 = state->c;
  }
  std::vector<Tensor<2>> last_h, last_c;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    std::vector<Tensor<3>> outputs;
    for (std::size_t d = 0; d < directions; ++d) {
      const RecurrentWeights& w = d == 0 ? layers[k] : reverse[k];
      const std::size_t slot = k * directions + d;
      Tensor<2> h = initial(op, "h0", h0, slot, slots, batch, hidden_size, sequence);
      Tensor<2> c = initial(op, "c0", c0, slot, slots, batch, hidden_size, sequence);
      outputs.push_back(run_direction(sequence, w, d == 1, [&](const Tensor<2>& from_input) {
        const Tensor<2> gates = from_input + project(h, w.weight_hh, w.bias_hh);
        const Tensor<2> i = gate(gates, 0, hidden_size).sigmoid();
        const Tensor<2> f = gate(gates, 1, hidden_size).sigmoid();
        const Tensor<2> g = gate(gates, 2, hidden_size).tanh();
        const Tensor<2> o = gate(gates, 3, hidden_size).sigmoid();
        c = f * c + i * g;
        h = o * c.tanh();
        return h;
      }));
      last_h.push_back(h);
      last_c.push_back(c);
    }
    sequence = directions == 1 ? outputs[0] : Tensor<3>::cat(outputs, 2);
    if (k + 1 < layers.size()) sequence = Dropout{dropout}.forward(sequence);
  }
  return {batch_first ? sequence.swap_dims(0, 1) : sequence,
          {Tensor<2>::stack(last_h, 0), Tensor<2>::stack(last_c, 0)}};
}

Gru GruConfig::init(const Device& device) const {
  Gru gru;
  static_cast<RecurrentStack&>(gru) =
      make_stack("GruConfig::init", 3, input_size, hidden_size, num_layers, bias, batch_first,
                 dropout, bidirectional, device);
  return gru;
}

GruOutput Gru::forward(const Tensor<3>& x, const std::optional<Tensor<3>>& h0) const {
  const char* op = "Gru::forward";
  check_directions(op, layers, reverse);
  Tensor<3> sequence = time_major(op, x, batch_first, layers);
  const std::int64_t batch = sequence.dims()[1];
  const std::size_t directions = bidirectional() ? 2 : 1;
  const std::size_t slots = layers.size() * directions;
  std::vector<Tensor<2>> last_h;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    std::vector<Tensor<3>> outputs;
    for (std::size_t d = 0; d < directions; ++d) {
      const RecurrentWeights& w = d == 0 ? layers[k] : reverse[k];
      Tensor<2> h = initial(op, "h0", h0, k * directions + d, slots, batch, hidden_size, sequence);
      outputs.push_back(run_direction(sequence, w, d == 1, [&](const Tensor<2>& from_input) {
        const Tensor<2> from_hidden = project(h, w.weight_hh, w.bias_hh);
        const Tensor<2> r =
            (gate(from_input, 0, hidden_size) + gate(from_hidden, 0, hidden_size)).sigmoid();
        const Tensor<2> z =
            (gate(from_input, 1, hidden_size) + gate(from_hidden, 1, hidden_size)).sigmoid();
        const Tensor<2> n =
            (gate(from_input, 2, hidden_size) + r * gate(from_hidden, 2, hidden_size)).tanh();
        // (1 - z) n + z h, written as n + z (h - n)
        h = n + z * (h - n);
        return h;
      }));
      last_h.push_back(h);
    }
    sequence = directions == 1 ? outputs[0] : Tensor<3>::cat(outputs, 2);
    if (k + 1 < layers.size()) sequence = Dropout{dropout}.forward(sequence);
  }
  return {batch_first ? sequence.swap_dims(0, 1) : sequence, Tensor<2>::stack(last_h, 0)};
}

}  // namespace kiln::nn

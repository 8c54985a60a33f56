#include "kiln/nn/rnn.h"

#include <cmath>
#include <string>

#include "kiln/activation.h"
#include "kiln/detail/format.h"
#include "kiln/module_ops.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

namespace detail {

void visit_recurrent(std::vector<RecurrentWeights>& layers, Visitor& visitor,
                     std::string_view prefix) {
  // PyTorch's order: the four tensors of layer 0, then those of layer 1, ...
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const std::string suffix = "_l" + std::to_string(k);
    RecurrentWeights& w = layers[k];
    visit_member(visitor, prefix, "weight_ih" + suffix, w.weight_ih);
    visit_member(visitor, prefix, "weight_hh" + suffix, w.weight_hh);
    if (w.bias_ih) visit_member(visitor, prefix, "bias_ih" + suffix, *w.bias_ih);
    if (w.bias_hh) visit_member(visitor, prefix, "bias_hh" + suffix, *w.bias_hh);
  }
}

}  // namespace detail

namespace {

std::vector<RecurrentWeights> make_layers(const char* op, std::int64_t gates,
                                          std::int64_t input_size, std::int64_t hidden_size,
                                          std::int64_t num_layers, bool bias, double dropout,
                                          const Device& device) {
  if (input_size <= 0 || hidden_size <= 0 || num_layers <= 0) {
    kiln::detail::fail<InvalidArgument>(op, "input_size ", input_size, ", hidden_size ",
                                        hidden_size, " and num_layers ", num_layers,
                                        " must all be positive");
  }
  detail::check_dropout_probability(dropout);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const Initializer uniform = Initializer::uniform(-bound, bound);
  std::vector<RecurrentWeights> layers;
  for (std::int64_t k = 0; k < num_layers; ++k) {
    RecurrentWeights w;
    const std::int64_t in = k == 0 ? input_size : hidden_size;
    w.weight_ih = Param<2>(uniform.init<2>(Shape{gates * hidden_size, in}, device));
    w.weight_hh = Param<2>(uniform.init<2>(Shape{gates * hidden_size, hidden_size}, device));
    if (bias) {
      w.bias_ih = Param<1>(uniform.init<1>(Shape{gates * hidden_size}, device));
      w.bias_hh = Param<1>(uniform.init<1>(Shape{gates * hidden_size}, device));
    }
    layers.push_back(std::move(w));
  }
  return layers;
}

std::optional<Tensor<1>> value_of(const std::optional<Param<1>>& p) {
  if (!p) return std::nullopt;
  return p->val();
}

// x W^T + b for every step at once ([T, B, in] -> [T, B, G * H]) or one step ([B, H] -> ...).
template <std::size_t D>
Tensor<D> project(const Tensor<D>& x, const Param<2>& weight, const std::optional<Param<1>>& bias) {
  return module::linear(x, weight.val().transpose(), value_of(bias));
}

// Gate k of [B, G * H].
Tensor<2> gate(const Tensor<2>& gates, std::int64_t k, std::int64_t hidden) {
  return gates.narrow(1, k * hidden, hidden);
}

// The input in time-major form [T, B, in], checked against the first layer.
Tensor<3> time_major(const char* op, const Tensor<3>& x, bool batch_first,
                     const std::vector<RecurrentWeights>& layers) {
  const std::int64_t input_size = layers.front().weight_ih.val().dims()[1];
  if (x.dims()[2] != input_size) {
    kiln::detail::fail<ShapeMismatch>(op, "input ", x.shape().to_string(), " has ", x.dims()[2],
                                      " features (dim 2) but input_size is ", input_size);
  }
  return batch_first ? x.swap_dims(0, 1) : x;
}

// Layer k's initial state from [L, B, H], or zeros.
Tensor<2> initial(const char* op, const char* name, const std::optional<Tensor<3>>& all,
                  std::size_t layer, std::size_t layers, std::int64_t batch, std::int64_t hidden,
                  const Tensor<3>& like) {
  if (!all) return Tensor<2>::zeros({batch, hidden}, like.device(), like.dtype());
  const auto dims = all->dims();
  if (dims[0] != static_cast<std::int64_t>(layers) || dims[1] != batch || dims[2] != hidden) {
    kiln::detail::fail<ShapeMismatch>(op, name, " ", all->shape().to_string(),
                                      " must be [num_layers, batch, hidden] = [", layers, ", ",
                                      batch, ", ", hidden, "]");
  }
  return all->narrow(0, static_cast<std::int64_t>(layer), 1).squeeze<2>(0);
}

}  // namespace

Lstm LstmConfig::init(const Device& device) const {
  Lstm lstm;
  lstm.layers = make_layers("LstmConfig::init", 4, input_size, hidden_size, num_layers, bias,
                            dropout, device);
  lstm.hidden_size = hidden_size;
  lstm.batch_first = batch_first;
  lstm.dropout = dropout;
  return lstm;
}

LstmOutput Lstm::forward(const Tensor<3>& x, const std::optional<LstmState>& state) const {
  const char* op = "Lstm::forward";
  Tensor<3> sequence = time_major(op, x, batch_first, layers);
  const std::int64_t steps = sequence.dims()[0], batch = sequence.dims()[1];
  std::optional<Tensor<3>> h0, c0;
  if (state) {
    h0 = state->h;
    c0 = state->c;
  }
  std::vector<Tensor<2>> last_h, last_c;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const RecurrentWeights& w = layers[k];
    Tensor<2> h = initial(op, "h0", h0, k, layers.size(), batch, hidden_size, sequence);
    Tensor<2> c = initial(op, "c0", c0, k, layers.size(), batch, hidden_size, sequence);
    const Tensor<3> input_gates = project(sequence, w.weight_ih, w.bias_ih);  // [T, B, 4H]
    std::vector<Tensor<2>> outputs;
    outputs.reserve(static_cast<std::size_t>(steps));
    for (std::int64_t t = 0; t < steps; ++t) {
      const Tensor<2> gates =
          input_gates.narrow(0, t, 1).squeeze<2>(0) + project(h, w.weight_hh, w.bias_hh);
      const Tensor<2> i = gate(gates, 0, hidden_size).sigmoid();
      const Tensor<2> f = gate(gates, 1, hidden_size).sigmoid();
      const Tensor<2> g = gate(gates, 2, hidden_size).tanh();
      const Tensor<2> o = gate(gates, 3, hidden_size).sigmoid();
      c = f * c + i * g;
      h = o * c.tanh();
      outputs.push_back(h);
    }
    sequence = Tensor<2>::stack(outputs, 0);
    if (k + 1 < layers.size()) sequence = Dropout{dropout}.forward(sequence);
    last_h.push_back(h);
    last_c.push_back(c);
  }
  return {batch_first ? sequence.swap_dims(0, 1) : sequence,
          {Tensor<2>::stack(last_h, 0), Tensor<2>::stack(last_c, 0)}};
}

Gru GruConfig::init(const Device& device) const {
  Gru gru;
  gru.layers =
      make_layers("GruConfig::init", 3, input_size, hidden_size, num_layers, bias, dropout, device);
  gru.hidden_size = hidden_size;
  gru.batch_first = batch_first;
  gru.dropout = dropout;
  return gru;
}

GruOutput Gru::forward(const Tensor<3>& x, const std::optional<Tensor<3>>& h0) const {
  const char* op = "Gru::forward";
  Tensor<3> sequence = time_major(op, x, batch_first, layers);
  const std::int64_t steps = sequence.dims()[0], batch = sequence.dims()[1];
  std::vector<Tensor<2>> last_h;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const RecurrentWeights& w = layers[k];
    Tensor<2> h = initial(op, "h0", h0, k, layers.size(), batch, hidden_size, sequence);
    const Tensor<3> input_gates = project(sequence, w.weight_ih, w.bias_ih);  // [T, B, 3H]
    std::vector<Tensor<2>> outputs;
    outputs.reserve(static_cast<std::size_t>(steps));
    for (std::int64_t t = 0; t < steps; ++t) {
      const Tensor<2> from_input = input_gates.narrow(0, t, 1).squeeze<2>(0);
      const Tensor<2> from_hidden = project(h, w.weight_hh, w.bias_hh);
      const Tensor<2> r =
          (gate(from_input, 0, hidden_size) + gate(from_hidden, 0, hidden_size)).sigmoid();
      const Tensor<2> z =
          (gate(from_input, 1, hidden_size) + gate(from_hidden, 1, hidden_size)).sigmoid();
      const Tensor<2> n =
          (gate(from_input, 2, hidden_size) + r * gate(from_hidden, 2, hidden_size)).tanh();
      // (1 - z) n + z h, written as n + z (h - n)
      h = n + z * (h - n);
      outputs.push_back(h);
    }
    sequence = Tensor<2>::stack(outputs, 0);
    if (k + 1 < layers.size()) sequence = Dropout{dropout}.forward(sequence);
    last_h.push_back(h);
  }
  return {batch_first ? sequence.swap_dims(0, 1) : sequence, Tensor<2>::stack(last_h, 0)};
}

}  // namespace kiln::nn

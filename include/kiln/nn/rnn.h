// LSTM and GRU with PyTorch's gate order, parameter names and shapes (weight_ih_l0 [G * H, in],
// weight_hh_l0 [G * H, H], bias_ih_l0, bias_hh_l0, then the reverse direction's
// weight_ih_l0_reverse, ... when bidirectional, then _l1, ...; G = 4 gates i, f, g, o for the
// LSTM, 3 gates r, z, n for the GRU) and initialisation (everything uniform in ±1/sqrt(H)), so
// state dicts interchange with torch.nn.LSTM / nn.GRU (no proj_size).
//
//   nn::Lstm lstm = nn::LstmConfig{.input_size = 8, .hidden_size = 32, .num_layers = 2,
//                                  .batch_first = true}.init(dev);
//   nn::LstmOutput out = lstm.forward(x);   // x [B, T, 8] -> out.output [B, T, 32],
//                                           // out.state.h and .c [2, B, 32]
//
// Bidirectional (as PyTorch): every layer also runs a second set of weights from the last step
// to the first; its output is [.., T, 2H], the forward direction's h in [0, H) and the reverse
// direction's in [H, 2H) at each step, and the next layer reads those 2H features. States are
// [num_layers * 2, B, H], layer k's forward direction at 2k and its reverse one at 2k + 1; the
// reverse direction's final state is the one after it has read step 0.
//
// LSTM:  i = σ(W_ii x + b_ii + W_hi h + b_hi)   f = σ(…f…)   g = tanh(…g…)   o = σ(…o…)
//        c' = f c + i g,  h' = o tanh(c')
// GRU:   r = σ(W_ir x + b_ir + W_hr h + b_hr)   z = σ(…z…)
//        n = tanh(W_in x + b_in + r (W_hn h + b_hn)),  h' = (1 - z) n + z h
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// One layer's weights; the owning Lstm / Gru names them weight_ih_l{k}, ....
struct RecurrentWeights {
  Param<2> weight_ih;               // [gates * hidden, input (layer 0) or hidden]
  Param<2> weight_hh;               // [gates * hidden, hidden]
  std::optional<Param<1>> bias_ih;  // [gates * hidden]
  std::optional<Param<1>> bias_hh;  // [gates * hidden]
};

// What Lstm and Gru share: the stacked layers of each direction, their sizes, and the visitor
// that names the weights as PyTorch does.
struct RecurrentStack {
  std::vector<RecurrentWeights> layers;   // the forward direction, one per layer
  std::vector<RecurrentWeights> reverse;  // bidirectional: the reverse direction; else empty
  std::int64_t hidden_size = 0;
  bool batch_first = false;
  // Dropout on the outputs of every layer but the last, in training only (as PyTorch).
  double dropout = 0.0;

  bool bidirectional() const noexcept { return !reverse.empty(); }
  void visit(Visitor& visitor, std::string_view prefix = {});
  void visit(Visitor& visitor, std::string_view prefix = {}) const {
    const_cast<RecurrentStack*>(this)->visit(visitor, prefix);
  }
};

// Hidden and cell state, each [num_layers * num_directions, batch, hidden].
struct LstmState {
  Tensor<3> h;
  Tensor<3> c;
};

struct LstmOutput {
  // The last layer's h at every step: [B, T, D * H] (batch_first) or [T, B, D * H], D = 2 when
  // bidirectional, else 1.
  Tensor<3> output;
  LstmState state;  // after the last step of each direction
};

struct Lstm : RecurrentStack {
  // x [B, T, in] (batch_first) or [T, B, in]; the state starts at zero unless given.
  LstmOutput forward(const Tensor<3>& x,
                     const std::optional<LstmState>& state = std::nullopt) const;
};

struct LstmConfig {
  std::int64_t input_size;
  std::int64_t hidden_size;
  std::int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;

  Lstm init(const Device& device = Device::default_device()) const;
};

struct GruOutput {
  Tensor<3> output;  // [B, T, D * H] (batch_first) or [T, B, D * H]
  Tensor<3> h;       // [num_layers * D, B, H] after the last step of each direction
};

struct Gru : RecurrentStack {
  // x [B, T, in] (batch_first) or [T, B, in]; h0 [num_layers * D, B, H] (zeros unless given).
  GruOutput forward(const Tensor<3>& x, const std::optional<Tensor<3>>& h0 = std::nullopt) const;
};

struct GruConfig {
  std::int64_t input_size;
  std::int64_t hidden_size;
  std::int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;

  Gru init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn

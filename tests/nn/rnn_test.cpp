// LSTM and GRU against float64 loops of PyTorch's equations (gate order i, f, g, o and r, z, n),
// single- and multi-layer, time-major and batch-first, given and zero initial states, dropout
// between layers; PyTorch's parameter names, shapes and initial bounds.
#include <kiln/nn/rnn.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;
using Names = std::vector<std::string>;
using Shapes = std::vector<std::vector<std::int64_t>>;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Sizes {
  std::int64_t steps, batch, input, hidden, layers;
  bool batch_first;
  bool bidirectional = false;
  std::int64_t directions() const { return bidirectional ? 2 : 1; }
};

// Index of x[t][b][i] in the caller's layout.
std::size_t at(const Sizes& s, std::int64_t t, std::int64_t b, std::int64_t i, std::int64_t width) {
  return static_cast<std::size_t>(s.batch_first ? (b * s.steps + t) * width + i
                                                : (t * s.batch + b) * width + i);
}

struct Reference {
  std::vector<double> output;  // in the caller's layout
  std::vector<double> h, c;    // [layers * directions, batch, hidden]
};

// One recurrent model over all layers and directions; step(gates_x, gates_h, h, c) updates h and
// c of one sample from its gate pre-activations W_i x + b_i and W_h h + b_h. The reverse
// direction (weights *_reverse) reads the steps from last to first and writes its h beside the
// forward one's, at features [hidden, 2 * hidden).
template <class M, class Step>
Reference run_reference(const M& module, const Sizes& s, std::int64_t gates,
                        const std::vector<double>& x, std::vector<double> h0,
                        std::vector<double> c0, bool drop_all_between, Step step) {
  const std::int64_t hs = s.hidden, dirs = s.directions();
  const std::size_t state_size = static_cast<std::size_t>(s.layers * dirs * s.batch * hs);
  if (h0.empty()) h0.assign(state_size, 0.0);
  if (c0.empty()) c0.assign(state_size, 0.0);
  std::vector<double> input = x;
  std::int64_t width = s.input;
  Reference ref{{}, h0, c0};
  for (std::int64_t l = 0; l < s.layers; ++l) {
    const std::int64_t out_width = dirs * hs;
    std::vector<double> output(static_cast<std::size_t>(s.steps * s.batch * out_width));
    for (std::int64_t d = 0; d < dirs; ++d) {
      const std::string k = std::to_string(l) + (d == 1 ? "_reverse" : "");
      const std::vector<double> wi = testing::param(module, "weight_ih_l" + k);
      const std::vector<double> wh = testing::param(module, "weight_hh_l" + k);
      const std::vector<double> bi = testing::param(module, "bias_ih_l" + k);
      const std::vector<double> bh = testing::param(module, "bias_hh_l" + k);
      const std::int64_t slot = l * dirs + d;
      for (std::int64_t b = 0; b < s.batch; ++b) {
        const auto first = ref.h.begin() + (slot * s.batch + b) * hs;
        std::vector<double> h(first, first + hs);
        const auto first_c = ref.c.begin() + (slot * s.batch + b) * hs;
        std::vector<double> c(first_c, first_c + hs);
        for (std::int64_t i = 0; i < s.steps; ++i) {
          const std::int64_t t = d == 1 ? s.steps - 1 - i : i;
          std::vector<double> gx(gates * hs), gh(gates * hs);
          for (std::int64_t r = 0; r < gates * hs; ++r) {
            gx[r] = bi[r];
            for (std::int64_t j = 0; j < width; ++j)
              gx[r] += wi[r * width + j] * input[at(s, t, b, j, width)];
            gh[r] = bh[r];
            for (std::int64_t j = 0; j < hs; ++j) gh[r] += wh[r * hs + j] * h[j];
          }
          step(gx, gh, h, c);
          for (std::int64_t j = 0; j < hs; ++j) output[at(s, t, b, d * hs + j, out_width)] = h[j];
        }
        std::copy(h.begin(), h.end(), first);
        std::copy(c.begin(), c.end(), first_c);
      }
    }
    input = output;
    if (drop_all_between && l + 1 < s.layers) std::fill(input.begin(), input.end(), 0.0);
    width = out_width;
    ref.output = output;
  }
  return ref;
}

template <class M>
Reference lstm_reference(const M& m, const Sizes& s, const std::vector<double>& x,
                         std::vector<double> h0 = {}, std::vector<double> c0 = {},
                         bool drop_all_between = false) {
  const std::int64_t hs = s.hidden;
  return run_reference(m, s, 4, x, std::move(h0), std::move(c0), drop_all_between,
                       [hs](const std::vector<double>& gx, const std::vector<double>& gh,
                            std::vector<double>& h, std::vector<double>& c) {
                         for (std::int64_t j = 0; j < hs; ++j) {
                           const double i = sigmoid(gx[j] + gh[j]);
                           const double f = sigmoid(gx[hs + j] + gh[hs + j]);
                           const double g = std::tanh(gx[2 * hs + j] + gh[2 * hs + j]);
                           const double o = sigmoid(gx[3 * hs + j] + gh[3 * hs + j]);
                           c[j] = f * c[j] + i * g;
                           h[j] = o * std::tanh(c[j]);
                         }
                       });
}

template <class M>
Reference gru_reference(const M& m, const Sizes& s, const std::vector<double>& x,
                        std::vector<double> h0 = {}) {
  const std::int64_t hs = s.hidden;
  return run_reference(m, s, 3, x, std::move(h0), {}, false,
                       [hs](const std::vector<double>& gx, const std::vector<double>& gh,
                            std::vector<double>& h, std::vector<double>&) {
                         for (std::int64_t j = 0; j < hs; ++j) {
                           const double r = sigmoid(gx[j] + gh[j]);
                           const double z = sigmoid(gx[hs + j] + gh[hs + j]);
                           const double n = std::tanh(gx[2 * hs + j] + r * gh[2 * hs + j]);
                           h[j] = (1 - z) * n + z * h[j];
                         }
                       });
}

Shape input_shape(const Sizes& s) {
  return s.batch_first ? Shape{s.batch, s.steps, s.input} : Shape{s.steps, s.batch, s.input};
}

TEST(NnRnn, LstmNamesShapesAndInitialisationFollowPyTorch) {
  kCpu.seed(8);
  const Lstm lstm = LstmConfig{.input_size = 3, .hidden_size = 5, .num_layers = 2}.init(kCpu);
  EXPECT_EQ(testing::names(lstm),
            (Names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l1",
                   "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}));
  EXPECT_EQ(testing::shapes(lstm),
            (Shapes{{20, 3}, {20, 5}, {20}, {20}, {20, 5}, {20, 5}, {20}, {20}}));
  const double bound = 1.0 / std::sqrt(5.0);
  double max_abs = 0;
  for (const NamedParam& p : named_parameters(lstm)) {
    for (double v : TensorData(kiln::detail::into_data(p.value)).to_f64_vec())
      max_abs = std::max(max_abs, std::abs(v));
  }
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95 * bound);
  const Gru gru = GruConfig{.input_size = 3, .hidden_size = 5, .bias = false}.init(kCpu);
  EXPECT_EQ(testing::names(gru), (Names{"weight_ih_l0", "weight_hh_l0"}));
  EXPECT_EQ(testing::shapes(gru), (Shapes{{15, 3}, {15, 5}}));
}

TEST(NnRnn, LstmSingleLayerTimeMajor) {
  const Sizes s{5, 2, 3, 4, 1, false};
  const Lstm lstm = testing::to_f64(LstmConfig{.input_size = 3, .hidden_size = 4}.init(kCpu));
  const std::vector<double> x = testing::values(5 * 2 * 3, 1, -2, 2);
  const LstmOutput out = lstm.forward(testing::tensor<3>(x, input_shape(s)));
  const Reference ref = lstm_reference(lstm, s, x);
  EXPECT_EQ(out.output.shape(), (Shape{5, 2, 4}));
  EXPECT_EQ(out.state.h.shape(), (Shape{1, 2, 4}));
  testing::expect_near(testing::read(out.output), ref.output, 1e-12, "output");
  testing::expect_near(testing::read(out.state.h), ref.h, 1e-12, "h");
  testing::expect_near(testing::read(out.state.c), ref.c, 1e-12, "c");
}

TEST(NnRnn, LstmMultiLayerBatchFirstFromAGivenState) {
  const Sizes s{4, 3, 2, 5, 3, true};
  const Lstm lstm = testing::to_f64(
      LstmConfig{.input_size = 2, .hidden_size = 5, .num_layers = 3, .batch_first = true}.init(
          kCpu));
  const std::vector<double> x = testing::values(3 * 4 * 2, 2, -2, 2);
  const std::vector<double> h0 = testing::values(3 * 3 * 5, 3), c0 = testing::values(3 * 3 * 5, 4);
  const LstmOutput out =
      lstm.forward(testing::tensor<3>(x, input_shape(s)),
                   LstmState{testing::tensor<3>(h0, {3, 3, 5}), testing::tensor<3>(c0, {3, 3, 5})});
  const Reference ref = lstm_reference(lstm, s, x, h0, c0);
  EXPECT_EQ(out.output.shape(), (Shape{3, 4, 5}));
  testing::expect_near(testing::read(out.output), ref.output, 1e-12, "output");
  testing::expect_near(testing::read(out.state.h), ref.h, 1e-12, "h");
  testing::expect_near(testing::read(out.state.c), ref.c, 1e-12, "c");
}

TEST(NnRnn, LstmDropoutBetweenLayersInTrainingOnly) {
  const Sizes s{3, 2, 2, 3, 2, false};
  const Lstm lstm = testing::to_f64(
      LstmConfig{.input_size = 2, .hidden_size = 3, .num_layers = 2, .dropout = 1.0}.init(kCpu));
  const std::vector<double> x = testing::values(3 * 2 * 2, 5);
  // Evaluation: no dropout.
  testing::expect_near(testing::read(lstm.forward(testing::tensor<3>(x, input_shape(s))).output),
                       lstm_reference(lstm, s, x).output, 1e-12, "evaluation");
  // Training with p = 1: the second layer sees zeros.
  const LstmOutput trained = lstm.forward(testing::tensor<3>(x, input_shape(s), kCpu.autodiff()));
  const Reference ref = lstm_reference(lstm, s, x, {}, {}, true);
  testing::expect_near(testing::read(trained.output), ref.output, 1e-12, "training");
  testing::expect_near(testing::read(trained.state.h), ref.h, 1e-12, "training h");
}

TEST(NnRnn, GruSingleAndMultiLayer) {
  {
    const Sizes s{6, 2, 3, 4, 1, false};
    const Gru gru = testing::to_f64(GruConfig{.input_size = 3, .hidden_size = 4}.init(kCpu));
    EXPECT_EQ(testing::names(gru),
              (Names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}));
    EXPECT_EQ(testing::shapes(gru), (Shapes{{12, 3}, {12, 4}, {12}, {12}}));
    const std::vector<double> x = testing::values(6 * 2 * 3, 6, -2, 2), h0 = testing::values(8, 7);
    const GruOutput out =
        gru.forward(testing::tensor<3>(x, input_shape(s)), testing::tensor<3>(h0, {1, 2, 4}));
    const Reference ref = gru_reference(gru, s, x, h0);
    testing::expect_near(testing::read(out.output), ref.output, 1e-12, "single output");
    testing::expect_near(testing::read(out.h), ref.h, 1e-12, "single h");
  }
  {
    const Sizes s{4, 3, 2, 3, 2, true};
    const Gru gru = testing::to_f64(
        GruConfig{.input_size = 2, .hidden_size = 3, .num_layers = 2, .batch_first = true}.init(
            kCpu));
    const std::vector<double> x = testing::values(3 * 4 * 2, 8, -2, 2);
    const GruOutput out = gru.forward(testing::tensor<3>(x, input_shape(s)));
    const Reference ref = gru_reference(gru, s, x);
    EXPECT_EQ(out.output.shape(), (Shape{3, 4, 3}));
    EXPECT_EQ(out.h.shape(), (Shape{2, 3, 3}));
    testing::expect_near(testing::read(out.output), ref.output, 1e-12, "multi output");
    testing::expect_near(testing::read(out.h), ref.h, 1e-12, "multi h");
  }
}

TEST(NnRnn, BidirectionalNamesAndShapesFollowPyTorch) {
  const Lstm lstm =
      LstmConfig{.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = true}.init(
          kCpu);
  EXPECT_TRUE(lstm.bidirectional());
  EXPECT_EQ(
      testing::names(lstm),
      (Names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
             "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
             "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_ih_l1_reverse",
             "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"}));
  // Layer 1 reads both directions of layer 0: 2 * 5 features.
  EXPECT_EQ(testing::shapes(lstm), (Shapes{{20, 3},
                                           {20, 5},
                                           {20},
                                           {20},
                                           {20, 3},
                                           {20, 5},
                                           {20},
                                           {20},
                                           {20, 10},
                                           {20, 5},
                                           {20},
                                           {20},
                                           {20, 10},
                                           {20, 5},
                                           {20},
                                           {20}}));
  const Gru gru =
      GruConfig{.input_size = 4, .hidden_size = 2, .bias = false, .bidirectional = true}.init(kCpu);
  EXPECT_EQ(testing::names(gru), (Names{"weight_ih_l0", "weight_hh_l0", "weight_ih_l0_reverse",
                                        "weight_hh_l0_reverse"}));
  EXPECT_EQ(testing::shapes(gru), (Shapes{{6, 4}, {6, 2}, {6, 4}, {6, 2}}));
}

TEST(NnRnn, BidirectionalLstmSingleLayerTimeMajor) {
  const Sizes s{5, 2, 3, 4, 1, false, true};
  const Lstm lstm = testing::to_f64(
      LstmConfig{.input_size = 3, .hidden_size = 4, .bidirectional = true}.init(kCpu));
  const std::vector<double> x = testing::values(5 * 2 * 3, 11, -2, 2);
  const LstmOutput out = lstm.forward(testing::tensor<3>(x, input_shape(s)));
  const Reference ref = lstm_reference(lstm, s, x);
  EXPECT_EQ(out.output.shape(), (Shape{5, 2, 8}));
  EXPECT_EQ(out.state.h.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(out.state.c.shape(), (Shape{2, 2, 4}));
  testing::expect_near(testing::read(out.output), ref.output, 1e-12, "output");
  testing::expect_near(testing::read(out.state.h), ref.h, 1e-12, "h");
  testing::expect_near(testing::read(out.state.c), ref.c, 1e-12, "c");
  // The reverse direction's final h is its output at step 0, the forward one's at the last step.
  const std::vector<double> y = testing::read(out.output), h = testing::read(out.state.h);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(h[(0 * 2 + b) * 4 + j], y[at(s, 4, b, j, 8)]);
      EXPECT_EQ(h[(1 * 2 + b) * 4 + j], y[at(s, 0, b, 4 + j, 8)]);
    }
}

TEST(NnRnn, BidirectionalLstmMultiLayerBatchFirstFromAGivenState) {
  const Sizes s{4, 3, 2, 3, 3, true, true};
  const Lstm lstm = testing::to_f64(LstmConfig{.input_size = 2,
                                               .hidden_size = 3,
                                               .num_layers = 3,
                                               .batch_first = true,
                                               .bidirectional = true}
                                        .init(kCpu));
  const std::vector<double> x = testing::values(3 * 4 * 2, 12, -2, 2);
  const std::vector<double> h0 = testing::values(6 * 3 * 3, 13),
                            c0 = testing::values(6 * 3 * 3, 14);
  const LstmOutput out =
      lstm.forward(testing::tensor<3>(x, input_shape(s)),
                   LstmState{testing::tensor<3>(h0, {6, 3, 3}), testing::tensor<3>(c0, {6, 3, 3})});
  const Reference ref = lstm_reference(lstm, s, x, h0, c0);
  EXPECT_EQ(out.output.shape(), (Shape{3, 4, 6}));
  EXPECT_EQ(out.state.h.shape(), (Shape{6, 3, 3}));
  testing::expect_near(testing::read(out.output), ref.output, 1e-12, "output");
  testing::expect_near(testing::read(out.state.h), ref.h, 1e-12, "h");
  testing::expect_near(testing::read(out.state.c), ref.c, 1e-12, "c");
}

TEST(NnRnn, BidirectionalGruSingleAndMultiLayer) {
  {
    const Sizes s{6, 2, 3, 4, 1, false, true};
    const Gru gru = testing::to_f64(
        GruConfig{.input_size = 3, .hidden_size = 4, .bidirectional = true}.init(kCpu));
    const std::vector<double> x = testing::values(6 * 2 * 3, 15, -2, 2),
                              h0 = testing::values(2 * 2 * 4, 16);
    const GruOutput out =
        gru.forward(testing::tensor<3>(x, input_shape(s)), testing::tensor<3>(h0, {2, 2, 4}));
    const Reference ref = gru_reference(gru, s, x, h0);
    EXPECT_EQ(out.output.shape(), (Shape{6, 2, 8}));
    testing::expect_near(testing::read(out.output), ref.output, 1e-12, "single output");
    testing::expect_near(testing::read(out.h), ref.h, 1e-12, "single h");
  }
  {
    const Sizes s{4, 3, 2, 3, 2, true, true};
    const Gru gru = testing::to_f64(GruConfig{.input_size = 2,
                                              .hidden_size = 3,
                                              .num_layers = 2,
                                              .batch_first = true,
                                              .bidirectional = true}
                                        .init(kCpu));
    const std::vector<double> x = testing::values(3 * 4 * 2, 17, -2, 2);
    const GruOutput out = gru.forward(testing::tensor<3>(x, input_shape(s)));
    const Reference ref = gru_reference(gru, s, x);
    EXPECT_EQ(out.output.shape(), (Shape{3, 4, 6}));
    EXPECT_EQ(out.h.shape(), (Shape{4, 3, 3}));
    testing::expect_near(testing::read(out.output), ref.output, 1e-12, "multi output");
    testing::expect_near(testing::read(out.h), ref.h, 1e-12, "multi h");
  }
}

TEST(NnRnn, BidirectionalBadStatesAndMismatchedDirectionsThrow) {
  const Lstm lstm =
      LstmConfig{.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true}.init(
          kCpu);
  const Tensor<3> x = Tensor<3>::zeros({5, 2, 3}, kCpu);
  // [num_layers, B, H] is a unidirectional state; this module needs [4, 2, 4].
  try {
    lstm.forward(x,
                 LstmState{Tensor<3>::zeros({2, 2, 4}, kCpu), Tensor<3>::zeros({2, 2, 4}, kCpu)});
    ADD_FAILURE() << "a unidirectional state was accepted";
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 2, 4]"), std::string::npos) << e.what();
  }
  const Gru gru = GruConfig{.input_size = 3, .hidden_size = 4, .bidirectional = true}.init(kCpu);
  EXPECT_THROW(gru.forward(x, Tensor<3>::zeros({1, 2, 4}, kCpu)), ShapeMismatch);
  Lstm lopsided = lstm;
  lopsided.reverse.pop_back();
  EXPECT_THROW(lopsided.forward(x), InvalidArgument);
  EXPECT_THROW(Lstm{}.forward(x), InvalidArgument);
}

TEST(NnRnn, BadInputsThrow) {
  const Lstm lstm = LstmConfig{.input_size = 3, .hidden_size = 4, .num_layers = 2}.init(kCpu);
  EXPECT_THROW(lstm.forward(Tensor<3>::zeros({5, 2, 4}, kCpu)), ShapeMismatch);
  const Tensor<3> x = Tensor<3>::zeros({5, 2, 3}, kCpu);
  EXPECT_THROW(lstm.forward(x, LstmState{Tensor<3>::zeros({1, 2, 4}, kCpu),
                                         Tensor<3>::zeros({2, 2, 4}, kCpu)}),
               ShapeMismatch);
  const Gru gru = GruConfig{.input_size = 3, .hidden_size = 4}.init(kCpu);
  EXPECT_THROW(gru.forward(x, Tensor<3>::zeros({1, 3, 4}, kCpu)), ShapeMismatch);
  EXPECT_THROW(LstmConfig({.input_size = 3, .hidden_size = 0}).init(kCpu), InvalidArgument);
  EXPECT_THROW(GruConfig({.input_size = 3, .hidden_size = 2, .dropout = 2.0}).init(kCpu),
               InvalidArgument);
}

}  // namespace
}  // namespace kiln::nn

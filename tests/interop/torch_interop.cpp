// kiln <-> PyTorch interchange, checked with PyTorch itself (ctest interop.torch):
//   1. kiln builds a model of every layer whose state_dict names should match torch's, trains its
//      batch norms for a few batches, and writes the model (nn::save), the inputs and its outputs
//      in evaluation mode;
//   2. torch_interop.py builds the same torch modules, load_state_dict(strict=True) from kiln's
//      file, compares its outputs with kiln's (float64), then writes a torch-initialised, trained
//      state dict (float32) with torch's outputs for the same inputs;
//   3. kiln loads that file strictly (no allow_unexpected) and reproduces torch's outputs, and one
//      more training batch moves its cumulative-average batch norm exactly as torch's moved.
// Without a Python that imports torch the test is skipped (exit code 77): CI has no torch.
//
//   torch_interop PYTHON SCRIPT WORK_DIR
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/nn/record.h>
#include <kiln/record/safetensors.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace {

using namespace kiln;  // NOLINT: a test program of many kiln names

constexpr int kSkip = 77;
const Device kCpu = Device::cpu();

// The module tree mirrors the torch model of torch_interop.py attribute for attribute, so the
// two state dicts have the same keys.
struct Model {
  nn::Linear linear;                          // nn.Linear(6, 5)
  nn::Conv2d conv;                            // nn.Conv2d(2, 3, 3, padding=1)
  nn::BatchNorm bn;                           // nn.BatchNorm2d(3)
  nn::BatchNorm bn_cma;                       // nn.BatchNorm1d(3, momentum=None)
  nn::LayerNorm norm;                         // nn.LayerNorm(5)
  nn::Embedding embedding;                    // nn.Embedding(10, 4)
  nn::Lstm lstm;                              // 2 layers, bidirectional, batch_first
  nn::Gru gru;                                // 2 layers, bidirectional, time-major
  nn::MultiHeadAttention attention;           // embed 8, 2 heads, batch_first
  nn::TransformerEncoderLayer encoder_layer;  // post-norm, relu
  nn::TransformerEncoder encoder;             // 2 pre-norm gelu layers and a final norm
  // nn.Sequential(nn.Conv1d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU())
  nn::Sequential<nn::Conv1d, nn::GroupNorm, nn::Relu> head;
  nn::ConvTranspose2d deconv;  // nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
  KILN_MODULE(linear, conv, bn, bn_cma, norm, embedding, lstm, gru, attention, encoder_layer,
              encoder, head, deconv)
};

Model make_model() {
  Model m{
      nn::LinearConfig{6, 5}.init(kCpu),
      nn::Conv2dConfig{
          .in_channels = 2, .out_channels = 3, .kernel_size = {3, 3}, .padding = {1, 1}}
          .init(kCpu),
      nn::BatchNormConfig{.num_features = 3}.init(kCpu),
      nn::BatchNormConfig{.num_features = 3, .momentum = std::nullopt}.init(kCpu),
      nn::LayerNormConfig{5}.init(kCpu),
      nn::EmbeddingConfig{.num_embeddings = 10, .embedding_dim = 4}.init(kCpu),
      nn::LstmConfig{.input_size = 3,
                     .hidden_size = 4,
                     .num_layers = 2,
                     .batch_first = true,
                     .bidirectional = true}
          .init(kCpu),
      nn::GruConfig{.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true}.init(
          kCpu),
      nn::MultiHeadAttentionConfig{.embed_dim = 8, .num_heads = 2}.init(kCpu),
      nn::TransformerEncoderLayerConfig{
          .d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0}
          .init(kCpu),
      nn::TransformerEncoderConfig{.layer = {.d_model = 8,
                                             .nhead = 2,
                                             .dim_feedforward = 16,
                                             .dropout = 0.0,
                                             .activation = nn::FeedForwardActivation::Gelu,
                                             .norm_first = true},
                                   .num_layers = 2,
                                   .final_norm = true}
          .init(kCpu),
      nn::Sequential(
          nn::Conv1dConfig{.in_channels = 3, .out_channels = 4, .kernel_size = 3, .padding = 1}
              .init(kCpu),
          nn::GroupNormConfig{.num_groups = 2, .num_channels = 4}.init(kCpu), nn::Relu{}),
      nn::ConvTranspose2dConfig{.in_channels = 3,
                                .out_channels = 2,
                                .kernel_size = {3, 3},
                                .stride = {2, 2},
                                .padding = {1, 1},
                                .output_padding = {1, 1}}
          .init(kCpu)};
  return m;
}

// Every parameter and buffer converted to dtype (the counters are integers and stay).
Model with_dtype(Model m, DType dtype) {
  struct Cast final : nn::Visitor {
    DType dtype;
    void visit(const std::string&, nn::ParamSlot& slot) override {
      slot.set_primitive(kiln::detail::cast(slot.primitive(), dtype));
    }
  } cast;
  cast.dtype = dtype;
  m.visit(cast);
  return m;
}

// Values in [low, high) from a 64-bit LCG of the test's own.
std::vector<double> values(std::size_t n, std::uint64_t seed, double low = -1, double high = 1) {
  std::vector<double> out(n);
  std::uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& v : out) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = low + (high - low) * static_cast<double>(state >> 11) * 0x1.0p-53;
  }
  return out;
}

TensorData f64(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return TensorData::from_vec(
      values(static_cast<std::size_t>(shape.num_elements()), seed, low, high), shape);
}

record::TensorMap make_inputs() {
  record::TensorMap in;
  in["linear"] = f64({3, 6}, 1);
  in["conv_bn"] = f64({2, 2, 5, 5}, 2, -2, 2);
  in["bn_cma"] = f64({4, 3}, 3, -1, 3);
  in["norm"] = f64({2, 3, 5}, 4, -2, 2);
  in["embedding"] = TensorData::from_vec(std::vector<std::int64_t>{0, 3, 9, 3, 7, 1, 2, 5}, {2, 4});
  in["lstm"] = f64({2, 4, 3}, 5, -2, 2);  // [B, T, in]
  in["lstm.h0"] = f64({4, 2, 4}, 6);
  in["lstm.c0"] = f64({4, 2, 4}, 7);
  in["gru"] = f64({4, 2, 3}, 8, -2, 2);  // [T, B, in]
  in["attention"] = f64({2, 5, 8}, 9, -2, 2);
  in["attention.key_padding_mask"] = TensorData::from_vec(
      std::vector<bool>{false, false, false, true, true, false, false, false, false, true}, {2, 5});
  in["encoder_layer"] = f64({2, 5, 8}, 10, -2, 2);
  in["encoder"] = f64({2, 5, 8}, 11, -2, 2);  // with a causal mask
  in["head"] = f64({2, 3, 7}, 13, -2, 2);
  in["deconv"] = f64({2, 3, 4, 4}, 14, -2, 2);
  // One more training batch for bn_cma after the state dicts are exchanged.
  in["bn_cma_step"] = f64({5, 3}, 12, -3, 1);
  return in;
}

template <std::size_t D>
Tensor<D> input(const record::TensorMap& in, const std::string& name, DType dtype,
                Device device = kCpu) {
  return Tensor<D>::from_data(in.at(name).convert(dtype), device);
}

// The model's outputs in evaluation mode (inputs on the plain device), by name.
record::TensorMap run(const Model& m, const record::TensorMap& in, DType dtype) {
  record::TensorMap out;
  out["linear"] = m.linear.forward(input<2>(in, "linear", dtype)).into_data();
  out["conv_bn"] = m.bn.forward(m.conv.forward(input<4>(in, "conv_bn", dtype))).into_data();
  out["bn_cma"] = m.bn_cma.forward(input<2>(in, "bn_cma", dtype)).into_data();
  out["norm"] = m.norm.forward(input<3>(in, "norm", dtype)).into_data();
  out["embedding"] =
      m.embedding.forward(Tensor<2, Int>::from_data(in.at("embedding"), kCpu)).into_data();
  const nn::LstmOutput lstm =
      m.lstm.forward(input<3>(in, "lstm", dtype),
                     nn::LstmState{input<3>(in, "lstm.h0", dtype), input<3>(in, "lstm.c0", dtype)});
  out["lstm.output"] = lstm.output.into_data();
  out["lstm.h"] = lstm.state.h.into_data();
  out["lstm.c"] = lstm.state.c.into_data();
  const nn::GruOutput gru = m.gru.forward(input<3>(in, "gru", dtype));
  out["gru.output"] = gru.output.into_data();
  out["gru.h"] = gru.h.into_data();
  const auto padding = Tensor<2, Bool>::from_data(in.at("attention.key_padding_mask"), kCpu);
  out["attention"] =
      m.attention.forward(input<3>(in, "attention", dtype), {.key_padding_mask = padding})
          .into_data();
  out["encoder_layer"] = m.encoder_layer.forward(input<3>(in, "encoder_layer", dtype)).into_data();
  out["encoder"] =
      m.encoder.forward(input<3>(in, "encoder", dtype), {.is_causal = true}).into_data();
  out["head"] = m.head.forward(input<3>(in, "head", dtype)).into_data();
  out["deconv"] = m.deconv.forward(input<4>(in, "deconv", dtype)).into_data();
  return out;
}

// Training-mode batches (inputs on the autodiff device) for the two batch norms, so their
// running statistics and num_batches_tracked are not the initial ones.
void train_batch_norms(const Model& m, DType dtype) {
  const Device ad = kCpu.autodiff();
  for (std::uint64_t k = 0; k < 3; ++k) {
    const auto image = Tensor<4>::from_data(f64({4, 2, 5, 5}, 100 + k, -1, 3).convert(dtype), ad);
    m.bn.forward(m.conv.forward(image));
    m.bn_cma.forward(
        Tensor<2>::from_data(f64({6, 3}, 200 + k, -2.0 * k, 1.0 + k).convert(dtype), ad));
  }
}

// |got - want| <= tolerance * (1 + |want|) element by element; prints the worst error.
bool compare(const std::string& what, const TensorData& got, const TensorData& want,
             double tolerance) {
  if (!(got.shape() == want.shape())) {
    std::cerr << "FAIL " << what << ": shape " << got.shape().to_string() << " but torch has "
              << want.shape().to_string() << "\n";
    return false;
  }
  const std::vector<double> g = got.to_f64_vec(), w = want.to_f64_vec();
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - w[i]) / (1 + std::abs(w[i])));
  }
  const bool ok = worst <= tolerance &&
                  std::all_of(g.begin(), g.end(), [](double v) { return std::isfinite(v); });
  std::cout << (ok ? "ok   " : "FAIL ") << what << ": max relative error " << worst
            << " (tolerance " << tolerance << ")\n";
  return ok;
}

int run_python(const std::string& python, const std::string& script, const std::string& dir) {
  const std::string command = "'" + python + "' '" + script + "' '" + dir + "'";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: torch_interop PYTHON SCRIPT WORK_DIR\n";
    return 2;
  }
  const std::string python = argv[1], script = argv[2];
  const std::filesystem::path dir = argv[3];
  const std::string probe = "'" + python + "' -c 'import torch' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    std::cout << "SKIP: " << python << " cannot import torch\n";
    return kSkip;
  }
  std::filesystem::create_directories(dir);

  // 1. kiln's model, in float64 so that any difference of meaning stands out from rounding.
  kCpu.seed(2024);
  const Model model = with_dtype(make_model(), DType::F64);
  train_batch_norms(model, DType::F64);
  if (model.bn.num_batches_tracked->value() != 3) {
    std::cerr << "FAIL: bn counted " << model.bn.num_batches_tracked->value() << " batches\n";
    return 1;
  }
  const record::TensorMap inputs = make_inputs();
  nn::save(model, dir / "kiln_model.safetensors");
  record::save_safetensors(dir / "inputs.safetensors", inputs);
  record::save_safetensors(dir / "kiln_outputs.safetensors", run(model, inputs, DType::F64));

  // 2. torch loads kiln's file, checks kiln's outputs, writes its own model and outputs.
  if (const int rc = run_python(python, script, dir.string()); rc != 0) {
    std::cerr << "FAIL: " << script << " exited with " << rc << "\n";
    return 1;
  }

  // 3. kiln loads torch's float32 state dict strictly and reproduces torch's outputs.
  kCpu.seed(7);
  Model from_torch = make_model();
  nn::load(from_torch, dir / "torch_model.safetensors");
  const record::TensorMap want = record::load_safetensors(dir / "torch_outputs.safetensors");
  bool ok = true;
  for (const auto& [name, got] : run(from_torch, inputs, DType::F32)) {
    ok &= compare("torch -> kiln " + name, got, want.at(name), 2e-6);
  }
  // One more training batch: the cumulative average continues from torch's count.
  const std::int64_t count = from_torch.bn_cma.num_batches_tracked->value();
  if (count != want.at("bn_cma_step.num_batches_tracked_before").to_vec<std::int64_t>()[0]) {
    std::cerr << "FAIL: bn_cma.num_batches_tracked is " << count << " after loading\n";
    ok = false;
  }
  from_torch.bn_cma.forward(input<2>(inputs, "bn_cma_step", DType::F32, kCpu.autodiff()));
  ok &= compare("torch -> kiln bn_cma step running_mean",
                from_torch.bn_cma.running_mean->val().into_data(),
                want.at("bn_cma_step.running_mean"), 1e-6);
  ok &= compare("torch -> kiln bn_cma step running_var",
                from_torch.bn_cma.running_var->val().into_data(),
                want.at("bn_cma_step.running_var"), 1e-6);
  if (from_torch.bn_cma.num_batches_tracked->value() !=
      want.at("bn_cma_step.num_batches_tracked").to_vec<std::int64_t>()[0]) {
    std::cerr << "FAIL: bn_cma.num_batches_tracked differs after the extra step\n";
    ok = false;
  }
  std::cout << (ok ? "PASS" : "FAIL") << ": kiln <-> torch interchange\n";
  return ok ? 0 : 1;
}

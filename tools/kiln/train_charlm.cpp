// `kiln train charlm [FILE]`: a small character-level transformer (pre-norm, causal) trained on
// any text file, printing the loss and a sample of generated text as it learns; with
// --quantize, the validation loss of the trained model and of its quantized copy side by side.
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

#include <algorithm>
#include <array>
#include <iomanip>
#include <map>
#include <random>
#include <span>

#include "kiln/detail/format.h"
#include "tools/kiln/causal_lm.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/input.h"

namespace kiln::tools {
namespace {

constexpr std::string_view kOp = "train charlm";

using CharModel = CausalLm;

std::string read_text(const std::filesystem::path& path, std::int64_t context) {
  std::string s = read_file_limited(path, kGiB, kOp);
  if (static_cast<std::int64_t>(s.size()) < context + 2) {
    kiln::detail::fail<InvalidArgument>(kOp, path.string(), " has ", s.size(),
                                        " characters; it needs more than the context of ", context);
  }
  return s;
}

// The mean cross-entropy of model over every window of context characters in ids (each
// predicting the character after it), 32 windows a forward pass.
double validation_loss(const CharModel& model, std::span<const std::uint8_t> ids,
                       std::int64_t context, std::int64_t vocabulary, const Device& device) {
  const auto windows = static_cast<std::int64_t>(ids.size() - 1) / context;
  double total = 0;
  for (std::int64_t first = 0; first < windows; first += 32) {
    const std::int64_t batch = std::min<std::int64_t>(32, windows - first);
    std::vector<std::int64_t> inputs, targets;
    for (std::int64_t w = first; w < first + batch; ++w) {
      for (std::int64_t t = 0; t < context; ++t) {
        inputs.push_back(ids[static_cast<std::size_t>(w * context + t)]);
        targets.push_back(ids[static_cast<std::size_t>(w * context + t + 1)]);
      }
    }
    const auto x =
        Tensor<2, Int>::from_data(TensorData::from_vec(inputs, {batch, context}), device);
    const auto y =
        Tensor<1, Int>::from_data(TensorData::from_vec(targets, {batch * context}), device);
    const Tensor<2> logits = model.forward(x).reshape<2>(Shape{batch * context, vocabulary});
    total += nn::cross_entropy(logits, y).into_scalar<double>() * static_cast<double>(batch);
  }
  return total / static_cast<double>(windows);
}

// Characters written so they stay on one line of the terminal.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? ' ' : (static_cast<unsigned char>(c) < 32 ? '?' : c);
  return out;
}

}  // namespace

int run_train_charlm(const TrainCharlmOptions& options, std::ostream& out) {
  const std::int64_t context = options.context;
  require_range(kOp, "--steps", options.steps, 1);
  // Attention costs context^2 per head and sequence: 1024 keeps a batch within a few GiB.
  require_range(kOp, "--context", context, 2, 1024);
  require_range(kOp, "--sample-every", options.sample_every, 1);
  require_range(kOp, "--width", options.width, 4, 1024);
  if (options.width % 4 != 0) {
    kiln::detail::fail<InvalidArgument>(kOp, "--width must be a multiple of the 4 heads, got ",
                                        options.width);
  }
  const std::string text = read_text(options.text, context);
  std::array<std::int64_t, 256> id{};
  std::string alphabet;
  for (unsigned char c : text) id[c] = 1;
  for (int c = 0; c < 256; ++c) {
    if (id[c] != 0) {
      id[c] = static_cast<std::int64_t>(alphabet.size());
      alphabet += static_cast<char>(c);
    }
  }
  // One byte per character (the alphabet has at most 256): a 1 GiB text costs 1 GiB more here,
  // not 8; batches widen their slices to int64.
  std::vector<std::uint8_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    ids[i] = static_cast<std::uint8_t>(id[static_cast<unsigned char>(text[i])]);
  }
  const auto vocabulary = static_cast<std::int64_t>(alphabet.size());
  // With --quantize the last tenth (at least one window and the character after it) is held out
  // for validation: training draws its windows from the rest.
  std::size_t held_out = 0;
  if (!options.quantize.empty()) {
    held_out = std::max(ids.size() / 10, static_cast<std::size_t>(context) + 1);
    if (ids.size() - held_out < static_cast<std::size_t>(context) + 2) {
      kiln::detail::fail<InvalidArgument>(kOp, options.text.string(), " has ", ids.size(),
                                          " characters: too few to hold out ", held_out,
                                          " for validation and train on windows of ", context);
    }
  }
  const std::size_t trained = ids.size() - held_out;
  if (options.qat && options.quantize.empty()) {
    kiln::detail::fail<InvalidArgument>(kOp,
                                        "--qat trains for the scheme --quantize names; "
                                        "give --quantize q8_0, q4_0 or q4_k");
  }
  // llama.cpp's rule for weights whose rows are not whole 256-value blocks: Q4_K falls back to
  // Q5_0 (charlm's default rows of 96 and 384 values all do; --width 256 avoids it).
  const bool q4_k = options.quantize == "q4_k";
  const QuantScheme scheme = quant_scheme(q4_k                         ? QuantScheme::Kind::Q4_K
                                          : options.quantize == "q4_0" ? QuantScheme::Kind::Q4_0
                                                                       : QuantScheme::Kind::Q8_0);
  std::vector<nn::QuantizedWeight> report;
  nn::QuantizeOptions quantize_options{.report = &report};
  if (q4_k) quantize_options.fallback = quant_scheme(QuantScheme::Kind::Q5_0);

  const Device device = Device::default_device();
  device.seed(options.seed);
  const std::int64_t width = options.width;
  CharModel model{
      nn::EmbeddingConfig{vocabulary, width, std::nullopt, nn::Initializer::normal(0, 0.02)}.init(
          device),
      nn::EmbeddingConfig{context, width, std::nullopt, nn::Initializer::normal(0, 0.02)}.init(
          device),
      nn::TransformerEncoderConfig{.layer = {.d_model = width,
                                             .nhead = 4,
                                             .dim_feedforward = 4 * width,
                                             .dropout = 0.0,
                                             .activation = nn::FeedForwardActivation::Gelu,
                                             .norm_first = true},
                                   .num_layers = 2,
                                   .final_norm = true}
          .init(device),
      nn::LinearConfig{width, vocabulary}.init(device)};
  out << "charlm: " << text.size() << " characters of " << options.text.string() << ", "
      << vocabulary << " distinct; " << nn::num_params(model) << " parameters on "
      << device.to_string()
      << (options.precision == DType::F32
              ? ""
              : ", " + std::string(dtype_name(options.precision)) + " mixed precision")
      << (options.qat ? ", weights fake-quantized as " + options.quantize + " (QAT)" : "") << "\n";
  if (options.qat) model = nn::prepare_qat(std::move(model), scheme, quantize_options);

  model = nn::train(std::move(model));
  optim::AdamW optimizer({.weight_decay = 0.01});
  const optim::WarmupLr schedule{
      .warmup_steps = 50,
      .start_factor = 0.1,
      .then = optim::CosineAnnealingLr{.base_lr = 2e-3, .t_max = options.steps, .eta_min = 1e-4}};
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<std::size_t> start(0,
                                                   trained - static_cast<std::size_t>(context) - 1);
  const std::int64_t batch = 32;
  std::vector<std::int64_t> inputs(static_cast<std::size_t>(batch * context));
  std::vector<std::int64_t> targets(inputs.size());

  auto sample = [&](std::size_t length) {
    const CharModel evaluated = nn::valid(model);
    std::string generated = text.substr(0, 8);
    std::vector<std::int64_t> window;
    for (char c : generated) window.push_back(id[static_cast<unsigned char>(c)]);
    for (std::size_t n = 0; n < length; ++n) {
      const auto first = window.size() > static_cast<std::size_t>(context)
                             ? window.size() - static_cast<std::size_t>(context)
                             : 0;
      std::vector<std::int64_t> tail(window.begin() + static_cast<std::ptrdiff_t>(first),
                                     window.end());
      const auto length_now = static_cast<std::int64_t>(tail.size());
      const auto x = Tensor<2, Int>::from_data(TensorData::from_vec(tail, {1, length_now}), device);
      const Tensor<3> logits = evaluated.forward(x);
      const auto last =
          logits.slice({{0, 1}, {length_now - 1, length_now}}).reshape<1>(Shape{vocabulary});
      // Temperature 0.8, drawn on the host.
      const std::vector<double> p = activation::softmax(last / 0.8, 0).into_data().to_f64_vec();
      std::discrete_distribution<std::int64_t> pick(p.begin(), p.end());
      window.push_back(pick(rng));
      generated += alphabet[static_cast<std::size_t>(window.back())];
    }
    return generated;
  };

  optim::GradScaler scaler = optim::GradScaler::for_dtype(options.precision);
  const auto started = std::chrono::steady_clock::now();
  double smoothed = 0;
  for (std::int64_t step = 1; step <= options.steps; ++step) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::size_t s = start(rng);
      for (std::int64_t t = 0; t < context; ++t) {
        inputs[static_cast<std::size_t>(b * context + t)] = ids[s + static_cast<std::size_t>(t)];
        targets[static_cast<std::size_t>(b * context + t)] =
            ids[s + static_cast<std::size_t>(t) + 1];
      }
    }
    const auto x =
        Tensor<2, Int>::from_data(TensorData::from_vec(inputs, {batch, context}), device);
    const auto y =
        Tensor<1, Int>::from_data(TensorData::from_vec(targets, {batch * context}), device);
    const Tensor<1> loss = [&] {
      // Mixed precision: the forward pass under autocast, the loss (a log_softmax) in f32.
      std::optional<AutocastScope> amp;
      if (options.precision != DType::F32) amp.emplace(device, options.precision);
      const Tensor<2> logits = model.forward(x).reshape<2>(Shape{batch * context, vocabulary});
      return nn::cross_entropy(logits, y);
    }();
    const double value = loss.into_scalar<double>();
    smoothed = step == 1 ? value : 0.9 * smoothed + 0.1 * value;
    Gradients grads = scaler.scale(loss).backward();
    scaler.unscale(model, grads);
    optim::clip_grad_norm(model, grads, 1.0);
    scaler.step(optimizer, model, grads, schedule);
    if (step % options.sample_every == 0 || step == options.steps) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      out << "step " << step << "/" << options.steps << std::fixed << std::setprecision(3)
          << "  loss " << smoothed << "  (" << std::setprecision(1) << seconds << " s)\n  > "
          << printable(sample(120)) << "\n"
          << std::flush;
    }
  }
  if (!options.quantize.empty()) {
    const CharModel evaluated = nn::valid(model);
    const CharModel quantized = nn::quantize(evaluated, scheme, quantize_options);
    const std::span<const std::uint8_t> validation(ids.data() + trained, held_out);
    const double float_loss = validation_loss(evaluated, validation, context, vocabulary, device);
    const double quantized_loss =
        validation_loss(quantized, validation, context, vocabulary, device);
    std::map<std::string, int> schemes;
    for (const nn::QuantizedWeight& w : report) {
      ++schemes[w.scheme ? std::string(quant_kind_name(w.scheme->kind)) : "f32 (kept)"];
    }
    out << "validation: the last " << held_out << " characters, "
        << (held_out - 1) / static_cast<std::size_t>(context) << " windows of " << context << "; "
        << report.size() << " weights quantized as";
    for (const auto& [name, count] : schemes) out << " " << name << " x" << count;
    // Under QAT the float model's forward already sees its weights fake-quantized.
    out << "\n  loss  " << (options.qat ? "f32 fake-quantized " : "f32 ") << std::setprecision(4)
        << std::fixed << float_loss << "  " << options.quantize << " " << quantized_loss << "  ("
        << std::showpos << std::setprecision(2)
        << 100.0 * (quantized_loss - float_loss) / float_loss << std::noshowpos << " %)\n";
  }
  return 0;
}

}  // namespace kiln::tools

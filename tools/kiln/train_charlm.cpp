// `kiln train charlm [FILE]`: a small character-level transformer (pre-norm, causal) trained on
// any text file, printing the loss and a sample of generated text as it learns; with
// --quantize, the validation loss of the trained model and of its quantized copy side by side.
// Data-parallel with --devices (a rank per device, threads of this process) or under `kiln
// launch`: every rank draws the same global batch of 32 windows and trains on its share of them
// (kiln/train/data_parallel.h), so N ranks train as one process does, up to float rounding.
#include <kiln/distributed.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>
#include <kiln/train/data_parallel.h>

#include <algorithm>
#include <array>
#include <exception>
#include <iomanip>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>

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

// The text as the ranks share it (read-only): its alphabet, the characters' ids, and how much of
// it is trained on (the rest is held out for --quantize's validation).
struct Corpus {
  std::string text;
  std::string alphabet;
  std::array<std::int64_t, 256> id{};
  std::vector<std::uint8_t> ids;
  std::int64_t vocabulary = 0;
  std::size_t trained = 0;
  std::size_t held_out = 0;
};

// The devices of --devices: "cuda:0,cuda:1"; InvalidArgument for an empty entry or more
// devices than the batch has windows.
std::vector<Device> parse_devices(const std::string& list, std::int64_t batch) {
  std::vector<Device> devices;
  std::size_t from = 0;
  for (;;) {
    const std::size_t comma = list.find(',', from);
    const std::string name = list.substr(from, comma - from);
    if (name.empty()) {
      kiln::detail::fail<InvalidArgument>(kOp, "--devices '", list,
                                          "' has an empty entry (expected e.g. cuda:0,cuda:1)");
    }
    devices.push_back(Device::parse(name));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (static_cast<std::int64_t>(devices.size()) > batch) {
    kiln::detail::fail<InvalidArgument>(kOp, "--devices names ", devices.size(),
                                        " devices; at most ", batch,
                                        " (each takes windows of the batch of ", batch, ")");
  }
  return devices;
}

// One rank's training (the only one without data parallelism): rank 0 prints to out.
void train_rank(const TrainCharlmOptions& options, const Corpus& corpus, const ProcessGroup& group,
                std::ostream& out);

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
  const std::vector<Device> devices =
      options.devices.empty() ? std::vector<Device>{} : parse_devices(options.devices, 32);
  Corpus corpus;
  corpus.text = read_text(options.text, context);
  const std::string& text = corpus.text;
  std::array<std::int64_t, 256>& id = corpus.id;
  for (unsigned char c : text) id[c] = 1;
  for (int c = 0; c < 256; ++c) {
    if (id[c] != 0) {
      id[c] = static_cast<std::int64_t>(corpus.alphabet.size());
      corpus.alphabet += static_cast<char>(c);
    }
  }
  // One byte per character (the alphabet has at most 256): a 1 GiB text costs 1 GiB more here,
  // not 8; batches widen their slices to int64.
  std::vector<std::uint8_t>& ids = corpus.ids;
  ids.resize(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    ids[i] = static_cast<std::uint8_t>(id[static_cast<unsigned char>(text[i])]);
  }
  corpus.vocabulary = static_cast<std::int64_t>(corpus.alphabet.size());
  // With --quantize the last tenth (at least one window and the character after it) is held out
  // for validation: training draws its windows from the rest.
  if (!options.quantize.empty()) {
    corpus.held_out = std::max(ids.size() / 10, static_cast<std::size_t>(context) + 1);
    if (ids.size() - corpus.held_out < static_cast<std::size_t>(context) + 2) {
      kiln::detail::fail<InvalidArgument>(kOp, options.text.string(), " has ", ids.size(),
                                          " characters: too few to hold out ", corpus.held_out,
                                          " for validation and train on windows of ", context);
    }
  }
  corpus.trained = ids.size() - corpus.held_out;
  if (options.qat && options.quantize.empty()) {
    kiln::detail::fail<InvalidArgument>(kOp,
                                        "--qat trains for the scheme --quantize names; "
                                        "give --quantize q8_0, q4_0 or q4_k");
  }

  if (devices.empty()) {
    // One process, or a rank of `kiln launch`.
    const ProcessGroup group = ProcessGroup::from_env(Device::default_device());
    std::ostream quiet(nullptr);
    train_rank(options, corpus, group, group.rank() == 0 ? out : quiet);
    return 0;
  }
  // A rank per device, each on a thread of its own. A rank's failure ends the others' collectives
  // with a DistributedError: the first other error is the cause.
  const std::vector<ProcessGroup> groups = ProcessGroup::threads(devices);
  std::vector<std::exception_ptr> errors(groups.size());
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < groups.size(); ++r) {
    ranks.emplace_back([&, r] {
      try {
        std::ostream quiet(nullptr);  // a stream of each rank's own: writing sets its flags
        train_rank(options, corpus, groups[r], r == 0 ? out : quiet);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  std::exception_ptr first;
  for (const std::exception_ptr& error : errors) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const DistributedError&) {
      if (!first) first = error;
    } catch (...) {
      std::rethrow_exception(error);
    }
  }
  if (first) std::rethrow_exception(first);
  return 0;
}

namespace {

void train_rank(const TrainCharlmOptions& options, const Corpus& corpus, const ProcessGroup& group,
                std::ostream& out) {
  const std::int64_t context = options.context;
  const std::string& text = corpus.text;
  const std::string& alphabet = corpus.alphabet;
  const std::array<std::int64_t, 256>& id = corpus.id;
  const std::vector<std::uint8_t>& ids = corpus.ids;
  const std::int64_t vocabulary = corpus.vocabulary;
  const std::size_t trained = corpus.trained;
  const std::size_t held_out = corpus.held_out;
  const Device device = group.device();
  const std::int64_t width = options.width;
  // llama.cpp's rule for weights whose rows are not whole 256-value blocks: Q4_K falls back to
  // Q5_0 (charlm's default rows of 96 and 384 values all do; --width 256 avoids it).
  const bool q4_k = options.quantize == "q4_k";
  const QuantScheme scheme = quant_scheme(q4_k                         ? QuantScheme::Kind::Q4_K
                                          : options.quantize == "q4_0" ? QuantScheme::Kind::Q4_0
                                                                       : QuantScheme::Kind::Q8_0);
  std::vector<nn::QuantizedWeight> report;
  nn::QuantizeOptions quantize_options{.report = &report};
  if (q4_k) quantize_options.fallback = quant_scheme(QuantScheme::Kind::Q5_0);
  // A device's random stream is the device's, not the thread's: ranks of this process on one
  // device (--devices cpu,cpu) draw their initial weights one after the other, so rank 0's (which
  // every rank takes) are one process's.
  static std::mutex drawing;
  std::unique_lock drawn(drawing);
  device.seed(options.seed);
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
  drawn.unlock();
  out << "charlm: " << text.size() << " characters of " << options.text.string() << ", "
      << vocabulary << " distinct; " << nn::num_params(model) << " parameters on "
      << device.to_string()
      << (options.precision == DType::F32
              ? ""
              : ", " + std::string(dtype_name(options.precision)) + " mixed precision")
      << (options.qat ? ", weights fake-quantized as " + options.quantize + " (QAT)" : "") << "\n";
  if (options.qat) model = nn::prepare_qat(std::move(model), scheme, quantize_options);

  // Every rank draws the same global batch; this rank trains on windows [first, last) of it.
  const std::int64_t batch = 32;
  const std::int64_t world = group.size();
  const std::int64_t first = batch * group.rank() / world;
  const std::int64_t last = batch * (group.rank() + 1) / world;
  const std::int64_t rows = last - first;
  std::optional<train::DataParallel> data_parallel;
  if (world > 1) {
    data_parallel.emplace(group);
    model = data_parallel->broadcast_parameters(std::move(model));
    out << "data-parallel over " << world << " ranks (" << group.backend_name() << "): " << rows
        << " windows of every batch of " << batch << " on rank 0\n";
  }

  model = nn::train(std::move(model));
  optim::AdamW optimizer({.weight_decay = 0.01});
  const optim::WarmupLr schedule{
      .warmup_steps = 50,
      .start_factor = 0.1,
      .then = optim::CosineAnnealingLr{.base_lr = 2e-3, .t_max = options.steps, .eta_min = 1e-4}};
  // The batches' windows, the same on every rank; the samples' draws (rank 0 alone) apart.
  std::mt19937_64 rng(options.seed);
  std::mt19937_64 sampling(options.seed + 1);
  std::uniform_int_distribution<std::size_t> start(0,
                                                   trained - static_cast<std::size_t>(context) - 1);
  std::vector<std::int64_t> inputs(static_cast<std::size_t>(rows * context));
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
      window.push_back(pick(sampling));
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
      if (b < first || b >= last) continue;  // another rank's window
      const std::int64_t row = b - first;
      for (std::int64_t t = 0; t < context; ++t) {
        inputs[static_cast<std::size_t>(row * context + t)] = ids[s + static_cast<std::size_t>(t)];
        targets[static_cast<std::size_t>(row * context + t)] =
            ids[s + static_cast<std::size_t>(t) + 1];
      }
    }
    const auto x = Tensor<2, Int>::from_data(TensorData::from_vec(inputs, {rows, context}), device);
    const auto y =
        Tensor<1, Int>::from_data(TensorData::from_vec(targets, {rows * context}), device);
    Tensor<1> loss = [&] {
      // Mixed precision: the forward pass under autocast, the loss (a log_softmax) in f32.
      std::optional<AutocastScope> amp;
      if (options.precision != DType::F32) amp.emplace(device, options.precision);
      const Tensor<2> logits = model.forward(x).reshape<2>(Shape{rows * context, vocabulary});
      return nn::cross_entropy(logits, y);
    }();
    // The mean over this rank's windows, weighted so that the ranks' mean (what the gradients'
    // average follows) is the mean over the global batch, whatever the shares.
    if (world > 1) loss = loss * (static_cast<double>(rows * world) / static_cast<double>(batch));
    const double value = world > 1
                             ? distributed::all_reduce(loss.detach(), group, ReduceOperation::Mean)
                                   .into_scalar<double>()
                             : loss.into_scalar<double>();
    smoothed = step == 1 ? value : 0.9 * smoothed + 0.1 * value;
    Gradients grads = data_parallel ? data_parallel->backward(model, scaler.scale(loss))
                                    : scaler.scale(loss).backward();
    scaler.unscale(model, grads);
    optim::clip_grad_norm(model, grads, 1.0);
    scaler.step(optimizer, model, grads, schedule);
    if (group.rank() == 0 && (step % options.sample_every == 0 || step == options.steps)) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      out << "step " << step << "/" << options.steps << std::fixed << std::setprecision(3)
          << "  loss " << smoothed << "  (" << std::setprecision(1) << seconds << " s)\n  > "
          << printable(sample(120)) << "\n"
          << std::flush;
    }
  }
  if (!options.quantize.empty() && group.rank() == 0) {
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
}

}  // namespace
}  // namespace kiln::tools

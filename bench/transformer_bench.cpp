// Transformer inference on the CPU (issue 18): the ops a BERT forward spends its time in, and
// whole BERT-shaped encoders, against bench/peer_torch_transformer.py run in the same invocation
// by bench/run_transformer.sh.
//
//   gelu_large                    gelu of 4096² f32
//   softmax_scores                softmax over attention scores [8, 12, 128, 128]
//   softmax_scores_masked         the same plus the additive -3.4e38 mask Hugging Face ports
//                                 write on padding keys (a quarter of the keys)
//   log_softmax_scores            log_softmax over the unmasked scores
//   attention_op / _composed      attention over [8, 12, 128, 64] with padding keys: the op, and
//                                 the same maths composed of matmul, mask_fill and softmax
//   attention_op_dropout          the op with dropout 0.1 on the weights (training's attention)
//   layer_norm_hidden             layer norm over [1024, 768]
//   bert_forward/minilm|base      nn::BertModel, batch 8 x 128 tokens with padding (the batch:
//                                 KILN_BENCH_BERT_BATCH), on the default device (KILN_DEVICE):
//                                 MiniLM-L6-H384 and BERT-base (L12-H768) shapes, random weights
//   bert_forward_unpadded/...     the same with BertInputs::skip_padding (the padding's rows zeros;
//                                 torch's row: the padded forward, the same real tokens' states)
//   bert_contention/minilm        the MiniLM forward repeated beside a process that spins on one
//                                 core: counters quiet_median_ms, loaded_p95_ms and their ratio,
//                                 and the cores this process kept busy in each phase
//                                 (quiet_cores, loaded_cores: its CPU time over the wall time)
//   embed_startup                 text::SentenceEncoder::from_directory (what `kiln embed` does
//                                 before it encodes: weights, configs and tokenizer) on the
//                                 sentence-transformers directory KILN_BENCH_EMBED_MODEL names, in
//                                 a forked child each time, so that every load starts as a fresh
//                                 process does, with no memory of its own yet (the row is
//                                 absent without the variable)
//
// Each row reads its result back (one element) inside the timed loop and checks a value first.
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

constexpr std::int64_t kLarge = 4096;
constexpr std::int64_t kBatch = 8, kHeads = 12, kTokens = 128;

// The BERT rows' batch: 8, or KILN_BENCH_BERT_BATCH (64 on the GPU machine).
std::int64_t bert_batch() {
  static const std::int64_t batch = [] {
    const char* text = std::getenv("KILN_BENCH_BERT_BATCH");
    return text ? std::max<std::int64_t>(1, std::atoll(text)) : kBatch;
  }();
  return batch;
}

Device device() { return Device::default_device(); }

// Sequence i of the batch has 128 - 12 (i % 8) real tokens, the rest padding.
std::int64_t real_tokens(std::int64_t i) { return kTokens - 12 * (i % 8); }

void gelu_large(benchmark::State& state) {
  state.counters["bytes"] = 2.0 * kLarge * kLarge * sizeof(float);
  guarded(state, [&] {
    auto x = Tensor<2>::random({kLarge, kLarge}, Distribution::uniform(-4, 4), device());
    read_one(x);  // computed once here: on a fused device the draws would join every gelu
    const double x0 = x.slice({{0, 1}, {0, 1}}).into_data().to_f64_vec()[0];
    expect_near(read_one(activation::gelu(x)), 0.5 * x0 * std::erfc(-x0 / std::sqrt(2.0)), 1e-5,
                "gelu");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(activation::gelu(x)));
  });
}
BENCHMARK(gelu_large)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

void run_softmax_scores(benchmark::State& state, bool masked) {
  const Shape shape{kBatch, kHeads, kTokens, kTokens};
  state.counters["bytes"] = 2.0 * static_cast<double>(shape.num_elements()) * sizeof(float);
  guarded(state, [&] {
    auto scores = Tensor<4>::random(shape, Distribution::normal(0, 3), device());
    if (masked) {
      // Keys 96..127 of every row are padding: -3.4e38 added, as transformers' extended mask.
      std::vector<float> mask(static_cast<std::size_t>(kTokens), 0.0f);
      for (std::int64_t k = 96; k < kTokens; ++k) mask[k] = std::numeric_limits<float>::lowest();
      auto additive =
          Tensor<4>::from_data(TensorData::from_vec(mask, Shape{1, 1, 1, kTokens}), device());
      scores = scores + additive.expand<4>(shape);
    }
    read_one(scores);  // the scores are the input, computed once
    auto run = [&] { return activation::softmax(scores, 3); };
    const std::vector<double> row =
        run().slice({{0, 1}, {0, 1}, {0, 1}, Slice::all()}).into_data().to_f64_vec();
    double total = 0;
    for (double v : row) total += v;
    expect_near(total, 1.0, 1e-5, "softmax row sum");
    if (masked) expect_near(row.back(), 0.0, 0.0, "masked key");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(run()));
  });
}
void softmax_scores(benchmark::State& state) { run_softmax_scores(state, false); }

// log_softmax over the same scores: each row's exponentials sum to 1.
void log_softmax_scores(benchmark::State& state) {
  const Shape shape{kBatch, kHeads, kTokens, kTokens};
  state.counters["bytes"] = 2.0 * static_cast<double>(shape.num_elements()) * sizeof(float);
  guarded(state, [&] {
    auto scores = Tensor<4>::random(shape, Distribution::normal(0, 3), device());
    read_one(scores);
    auto run = [&] { return activation::log_softmax(scores, 3); };
    double total = 0;
    for (double v : run().slice({{0, 1}, {0, 1}, {0, 1}, Slice::all()}).into_data().to_f64_vec()) {
      total += std::exp(v);
    }
    expect_near(total, 1.0, 1e-5, "log_softmax row: sum of exp");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(run()));
  });
}
BENCHMARK(log_softmax_scores)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
void softmax_scores_masked(benchmark::State& state) { run_softmax_scores(state, true); }
BENCHMARK(softmax_scores)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
BENCHMARK(softmax_scores_masked)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// Attention over BERT-base's heads [8, 12, 128, 64] with a quarter of the keys padding: the
// attention op (one kernel) against the same maths composed of ops.
Tensor<4> composed_attention(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v,
                             const Tensor<4, Bool>& excluded) {
  const Tensor<4> scores = q.matmul(k.swap_dims(2, 3)) * (1.0 / 8.0);
  return activation::softmax(scores.mask_fill(excluded.expand<4>(scores.shape()), -1e30), 3)
      .matmul(v);
}

// BERT-base's heads [8, 12, 128, 64] of random normal values, made before the row times; and the
// row's bytes counter (q, k, v and the output once each).
Tensor<4> random_heads() {
  auto t =
      Tensor<4>::random(Shape{kBatch, kHeads, kTokens, 64}, Distribution::normal(0, 1), device());
  read_one(t);
  return t;
}
void count_head_bytes(benchmark::State& state) {
  state.counters["bytes"] =
      4.0 * static_cast<double>(kBatch * kHeads * kTokens * 64) * sizeof(float);
}

void run_attention(benchmark::State& state, bool fused) {
  count_head_bytes(state);
  guarded(state, [&] {
    const Tensor<4> q = random_heads(), k = random_heads(), v = random_heads();
    std::vector<bool> keys(static_cast<std::size_t>(kTokens), false);
    for (std::int64_t j = 96; j < kTokens; ++j) keys[static_cast<std::size_t>(j)] = true;
    const auto excluded =
        Tensor<4, Bool>::from_data(TensorData::from_vec(keys, Shape{1, 1, 1, kTokens}), device());
    auto run = [&] {
      return fused ? module::attention(q, k, v, module::AttentionMask<4>::exclude(excluded))
                   : composed_attention(q, k, v, excluded);
    };
    const double a = run().slice({{0, 1}, {0, 1}, {0, 1}, {0, 1}}).into_data().to_f64_vec()[0];
    const double b =
        (fused ? composed_attention(q, k, v, excluded)
               : module::attention(q, k, v, module::AttentionMask<4>::exclude(excluded)))
            .slice({{0, 1}, {0, 1}, {0, 1}, {0, 1}})
            .into_data()
            .to_f64_vec()[0];
    expect_near(a, b, 1e-4, "attention: op against composition");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(run()));
  });
}
void attention_op(benchmark::State& state) { run_attention(state, true); }
void attention_composed(benchmark::State& state) { run_attention(state, false); }
BENCHMARK(attention_op)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
BENCHMARK(attention_composed)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// attention_op with dropout 0.1 on the weights. Checked: a device seed gives the same output
// again, and the dropped output differs from the undropped one (a first row's element of each
// is compared; the seeded repeat must agree exactly).
void attention_op_dropout(benchmark::State& state) {
  count_head_bytes(state);
  guarded(state, [&] {
    const Tensor<4> q = random_heads(), k = random_heads(), v = random_heads();
    const AttentionOptions options{.scale = std::nullopt, .is_causal = false, .dropout = 0.1};
    auto run = [&] { return module::attention(q, k, v, std::nullopt, std::nullopt, options); };
    auto first_row = [](const Tensor<4>& t) {
      return t.slice({{0, 1}, {0, 1}, {0, 1}, {0, 64}}).into_data().to_f64_vec();
    };
    device().seed(5);
    const std::vector<double> once = first_row(run());
    device().seed(5);
    if (first_row(run()) != once) throw std::runtime_error("attention dropout: a seed repeats");
    if (once == first_row(module::attention(q, k, v))) {
      throw std::runtime_error("attention dropout: nothing dropped");
    }
    for (auto _ : state) benchmark::DoNotOptimize(read_one(run()));
  });
}
BENCHMARK(attention_op_dropout)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

// Layer norm over BERT-base's hidden states [8 * 128, 768].
void layer_norm_hidden(benchmark::State& state) {
  const std::int64_t rows = kBatch * kTokens, size = 768;
  state.counters["bytes"] = 2.0 * static_cast<double>(rows * size) * sizeof(float);
  guarded(state, [&] {
    auto x = Tensor<2>::random({rows, size}, Distribution::normal(0, 2), device());
    auto gamma = Tensor<1>::random({size}, Distribution::uniform(0.5, 1.5), device());
    auto beta = Tensor<1>::random({size}, Distribution::uniform(-0.5, 0.5), device());
    read_one(x);
    const std::vector<double> row = x.slice({{0, 1}}).into_data().to_f64_vec();
    double mean = 0, var = 0;
    for (double v : row) mean += v / static_cast<double>(size);
    for (double v : row) var += (v - mean) * (v - mean) / static_cast<double>(size);
    const double g0 = gamma.slice({{0, 1}}).into_data().to_f64_vec()[0];
    const double b0 = beta.slice({{0, 1}}).into_data().to_f64_vec()[0];
    auto run = [&] { return module::layer_norm(x, gamma, beta, 1e-12); };
    expect_near(read_one(run()), (row[0] - mean) / std::sqrt(var + 1e-12) * g0 + b0, 1e-4,
                "layer_norm");
    for (auto _ : state) benchmark::DoNotOptimize(read_one(run()));
  });
}
BENCHMARK(layer_norm_hidden)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);

nn::BertConfig shape_of(std::int64_t which) {
  if (which == 0) {  // MiniLM-L6-H384 (all-MiniLM-L6-v2)
    return {.hidden_size = 384, .num_hidden_layers = 6, .intermediate_size = 1536};
  }
  return {};  // bert-base
}

struct Inputs {
  Tensor<2, Int> ids;
  nn::BertInputs extra;
};

Inputs batch_inputs() {
  const std::int64_t batch = bert_batch();
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * kTokens), 0);
  std::vector<std::int64_t> mask(ids.size(), 0);
  std::uint64_t state = 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < real_tokens(b); ++t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      ids[b * kTokens + t] = 1000 + static_cast<std::int64_t>((state >> 33) % 20000);
      mask[b * kTokens + t] = 1;
    }
  }
  const Shape shape{batch, kTokens};
  return {
      Tensor<2, Int>::from_data(TensorData::from_vec(ids, shape), device()),
      {.attention_mask = Tensor<2, Int>::from_data(TensorData::from_vec(mask, shape), device())}};
}

float forward_once(const nn::BertModel& bert, const Inputs& in) {
  return read_one(bert.forward(in.ids, in.extra));
}

// bert_forward/<which>, and with skip_padding bert_forward_unpadded/<which>: its flops count the
// tokens the forward runs (every position, or the attended ones).
void bert_rows(benchmark::State& state, bool skip_padding) {
  const nn::BertConfig config = shape_of(state.range(0));
  state.SetLabel(state.range(0) == 0 ? "minilm" : "base");
  double tokens = 0;
  for (std::int64_t b = 0; b < bert_batch(); ++b) {
    tokens += static_cast<double>(skip_padding ? real_tokens(b) : kTokens);
  }
  const double h = static_cast<double>(config.hidden_size);
  // Per layer: the four projections and the feed-forward pair, then q kT and the weights times v
  // (over the padded batch either way).
  state.counters["flops"] =
      static_cast<double>(config.num_hidden_layers) *
      (2 * tokens * h * (4 * h + 2 * static_cast<double>(config.intermediate_size)) +
       4 * static_cast<double>(bert_batch() * kTokens) * kTokens * h);
  guarded(state, [&] {
    device().seed(1);
    const nn::BertModel bert = config.init(device());
    Inputs in = batch_inputs();
    in.extra.skip_padding = skip_padding;
    if (!std::isfinite(forward_once(bert, in))) throw std::runtime_error("bert: not finite");
    for (auto _ : state) benchmark::DoNotOptimize(forward_once(bert, in));
  });
}

void bert_forward(benchmark::State& state) { bert_rows(state, false); }
void bert_forward_unpadded(benchmark::State& state) { bert_rows(state, true); }
BENCHMARK(bert_forward_unpadded)
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1);
BENCHMARK(bert_forward)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1);

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

// A child process spinning on a core for as long as it lives.
// The cores this process kept busy since construction: its CPU time (every thread, no children)
// over the wall time. Beside the hog, the scheduler's share for this process bounds how fast a
// forward can be: quiet_median * quiet_cores / loaded_cores.
class CoresUsed {
 public:
  CoresUsed() : cpu_(cpu_seconds()), wall_(std::chrono::steady_clock::now()) {}
  double cores() const {
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_;
    return (cpu_seconds() - cpu_) / wall.count();
  }

 private:
  static double cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }
  double cpu_;
  std::chrono::steady_clock::time_point wall_;
};

class CpuHog {
 public:
  CpuHog() : pid_(fork()) {
    if (pid_ == 0) {
      volatile std::uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
  }
  ~CpuHog() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;

 private:
  pid_t pid_;
};

void bert_contention(benchmark::State& state) {
  state.SetLabel("minilm");
  guarded(state, [&] {
    device().seed(1);
    const nn::BertModel bert = shape_of(0).init(device());
    const Inputs in = batch_inputs();
    auto timed = [&](int count) {
      std::vector<double> ms;
      for (int i = 0; i < count; ++i) {
        const auto start = std::chrono::steady_clock::now();
        benchmark::DoNotOptimize(forward_once(bert, in));
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
      }
      return ms;
    };
    timed(2);
    CoresUsed quiet_cores;
    const double quiet = percentile(timed(20), 0.5);
    state.counters["quiet_cores"] = quiet_cores.cores();
    std::vector<double> loaded;
    {
      CpuHog hog;
      CoresUsed loaded_cores;
      for (auto _ : state) {
        const std::vector<double> one = timed(1);
        loaded.push_back(one[0]);
      }
      state.counters["loaded_cores"] = loaded_cores.cores();
    }
    state.counters["quiet_median_ms"] = quiet;
    state.counters["loaded_p95_ms"] = percentile(loaded, 0.95);
    state.counters["p95_over_quiet"] = percentile(loaded, 0.95) / quiet;
  });
}
BENCHMARK(bert_contention)->Iterations(40)->UseRealTime()->Unit(benchmark::kMillisecond);

void embed_startup(benchmark::State& state, const std::string& dir) {
  for (auto _ : state) {
    const pid_t child = fork();
    if (child == 0) {
      try {
        const auto encoder = text::SentenceEncoder::from_directory(dir, Device::cpu());
        _exit(encoder.dimension() > 0 ? 0 : 2);
      } catch (...) {
        _exit(1);
      }
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      state.SkipWithError("embed_startup: the model did not load");
      break;
    }
  }
}

const bool embed_startup_registered = [] {
  if (const char* dir = std::getenv("KILN_BENCH_EMBED_MODEL"); dir != nullptr && *dir != 0) {
    benchmark::RegisterBenchmark("embed_startup", embed_startup, std::string(dir))
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

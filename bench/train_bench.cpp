// Training benchmarks (Google Benchmark; bench/run_all.sh runs them with the PyTorch peer):
// - digits_epoch: one epoch of `kiln train digits`' network (tools/kiln/digits_net.h; AdamW,
//   batch 32, shuffled) over all 1,797 UCI digits, each
//   step's loss read back as the learner does.
// - gpt2_step/f32, gpt2_step/bf16: one training step of a GPT-2-small-shaped model (12 pre-norm
//   causal layers, width 768, 12 heads, sequence 1024, batch 8, vocabulary 50,304, untied head,
//   AdamW) on KILN_BENCH_DEVICE (default cpu), in f32 or under a bf16 AutocastScope; the loss read
//   back each step; fused unless KILN_FUSION=0. KILN_BENCH_GPT2_LAYERS, _SEQ and _BATCH shrink it
//   (the CPU's default is 2 layers, sequence 128, batch 2). bench/peer_torch_gpt2.py is the same
//   step in PyTorch.
#include <benchmark/benchmark.h>
#include <kiln/data/classification.h>
#include <kiln/data/digits.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "bench_common.h"
#include "tools/kiln/causal_lm.h"
#include "tools/kiln/digits_net.h"

namespace {

using namespace kiln;

void digits_epoch(benchmark::State& state) {
  kiln::bench::guarded(state, [&] {
    const Device device = Device::cpu();
    device.seed(1);
    const auto digits = data::load_digits(std::string(KILN_SOURCE_DIR) + "/data/digits/digits.csv");
    const data::ClassificationLoader loader(digits, data::ClassificationBatcher(device),
                                            {.batch_size = 32, .shuffle = true, .seed = 1});
    auto model = nn::train(tools::make_digits_net(device));
    optim::AdamW optimizer({.weight_decay = 1e-4});
    std::uint64_t epoch = 0;
    double first = std::nan(""), last = 0;
    for (auto _ : state) {
      double sum = 0;
      std::int64_t steps = 0;
      for (auto& batch : loader.epoch(epoch++)) {
        const auto loss = nn::cross_entropy(model.forward(batch.features), batch.labels);
        sum += loss.into_scalar<double>();
        optimizer.step(model, loss.backward(), 3e-3);
        ++steps;
      }
      last = sum / static_cast<double>(steps);
      if (std::isnan(first)) first = last;
      benchmark::DoNotOptimize(last);
    }
    // Training must make progress over the epochs, or the steps did nothing.
    if (state.iterations() > 1 && !(last < first)) {
      throw std::runtime_error("digits_epoch: the mean loss did not decrease (" +
                               std::to_string(first) + " -> " + std::to_string(last) + ")");
    }
  });
}
BENCHMARK(digits_epoch)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::stoll(value) : fallback;
}

void gpt2_step(benchmark::State& state, DType precision) {
  kiln::bench::guarded(state, [&] {
    const char* name = std::getenv("KILN_BENCH_DEVICE");
    // Fused, as Device::default_device() is, unless KILN_FUSION=0.
    const char* fusion = std::getenv("KILN_FUSION");
    Device device = Device::parse(name != nullptr && *name != '\0' ? name : "cpu");
    if (fusion == nullptr || std::string(fusion) != "0") device = device.fused();
    const bool cpu = device.kind() == DeviceKind::Cpu;
    const std::int64_t layers = env_int("KILN_BENCH_GPT2_LAYERS", cpu ? 2 : 12);
    const std::int64_t seq = env_int("KILN_BENCH_GPT2_SEQ", cpu ? 128 : 1024);
    const std::int64_t batch = env_int("KILN_BENCH_GPT2_BATCH", cpu ? 2 : 8);
    const std::int64_t vocabulary = tools::kGpt2Vocabulary;
    device.seed(1);
    tools::CausalLm model = nn::train(tools::gpt2_small(device, layers, seq));
    optim::AdamW optimizer({.weight_decay = 0.1});
    const auto ids =
        Tensor<2, Int>::random({batch, seq}, Distribution::uniform(0, vocabulary), device);
    const auto targets =
        Tensor<2, Int>::random({batch, seq}, Distribution::uniform(0, vocabulary), device)
            .reshape<1>(Shape{batch * seq});
    double first = std::nan(""), last = 0;
    auto step = [&] {
      const Tensor<1> loss = [&] {
        std::optional<AutocastScope> amp;
        if (precision != DType::F32) amp.emplace(device, precision);
        const Tensor<2> logits = model.forward(ids).reshape<2>(Shape{batch * seq, vocabulary});
        return nn::cross_entropy(logits, targets);
      }();
      last = loss.into_scalar<double>();
      if (std::isnan(first)) first = last;
      optimizer.step(model, loss.backward(), 3e-4);
    };
    step();  // the first step draws, compiles and allocates
    for (auto _ : state) step();
    // The same batch again and again: the loss must fall.
    if (!(last < first)) {
      throw std::runtime_error("gpt2_step: the loss did not decrease (" + std::to_string(first) +
                               " -> " + std::to_string(last) + ")");
    }
    state.counters["tokens"] = static_cast<double>(batch * seq);
  });
}
BENCHMARK_CAPTURE(gpt2_step, f32, DType::F32)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(gpt2_step, bf16, DType::BF16)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace

BENCHMARK_MAIN();

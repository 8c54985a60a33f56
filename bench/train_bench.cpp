// Training benchmarks (Google Benchmark; bench/run_all.sh runs them with the PyTorch peer):
// - digits_epoch: one epoch of `kiln train digits`' network (tools/kiln/digits_net.h; AdamW,
//   batch 32, shuffled) over all 1,797 UCI digits, each
//   step's loss read back as the learner does.
#include <benchmark/benchmark.h>
#include <kiln/data/classification.h>
#include <kiln/data/digits.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "bench_common.h"
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

}  // namespace

BENCHMARK_MAIN();

// Training benchmarks (Google Benchmark; bench/run_all.sh runs them with the PyTorch peer):
// - digits_epoch: one epoch of `kiln train digits`' network (two 3x3 convolutions, a 2x2 max pool,
//   a 512-128-10 head with dropout; AdamW, batch 32, shuffled) over all 1,797 UCI digits, each
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

namespace {

using namespace kiln;

struct DigitsNet {
  nn::Conv2d conv1, conv2;
  nn::Linear hidden, out;
  nn::MaxPool2d pool{.kernel_size = {2, 2}};
  nn::Dropout dropout{.p = 0.25};
  KILN_MODULE(conv1, conv2, hidden, out)

  Tensor<2> forward(const Tensor<2>& pixels) const {
    const std::int64_t n = pixels.dims()[0];
    auto x = activation::relu(conv1.forward(pixels.reshape<4>(Shape{n, 1, 8, 8})));
    x = pool.forward(activation::relu(conv2.forward(x)));
    return out.forward(dropout.forward(activation::relu(hidden.forward(x.reshape<2>(Shape{n, 512})))));
  }
};

void digits_epoch(benchmark::State& state) {
  kiln::bench::guarded(state, [&] {
    const Device device = Device::cpu();
    device.seed(1);
    const auto digits = data::load_digits(std::string(KILN_SOURCE_DIR) + "/data/digits/digits.csv");
    const data::ClassificationLoader loader(digits, data::ClassificationBatcher(device),
                                            {.batch_size = 32, .shuffle = true, .seed = 1});
    auto model = nn::train(DigitsNet{nn::Conv2dConfig{1, 16, {3, 3}, {1, 1}, {1, 1}}.init(device),
                                     nn::Conv2dConfig{16, 32, {3, 3}, {1, 1}, {1, 1}}.init(device),
                                     nn::LinearConfig{512, 128}.init(device),
                                     nn::LinearConfig{128, 10}.init(device)});
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

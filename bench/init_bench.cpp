// Building a model whose weights come from a checkpoint (Google Benchmark): the Linear layers of
// a BERT-base encoder (12 layers of query, key, value, output 768x768, intermediate 768x3072 and
// output 3072x768, with biases: 85.0 M values) on the CPU.
// - build_random: config.init as for training, every weight drawn (kaiming uniform).
// - build_skip_init: the same under nn::SkipInit: allocations only.
// - load_after_random / from_record: a whole load from an in-memory record, after a random
//   init, and through nn::from_record (SkipInit, then the load).
#include <benchmark/benchmark.h>
#include <kiln/kiln.h>

#include <vector>

#include "bench_common.h"

namespace {

using namespace kiln;

struct EncoderLayer {
  nn::Linear query, key, value, output, intermediate, intermediate_output;
  KILN_MODULE(query, key, value, output, intermediate, intermediate_output)
};

struct Encoder {
  std::vector<EncoderLayer> layers;
  KILN_MODULE(layers)
};

struct EncoderConfig {
  std::int64_t hidden = 768;
  std::int64_t intermediate = 3072;
  std::int64_t num_layers = 12;

  Encoder init(const Device& device) const {
    Encoder encoder;
    const nn::LinearConfig square{hidden, hidden};
    for (std::int64_t i = 0; i < num_layers; ++i) {
      encoder.layers.push_back({square.init(device), square.init(device), square.init(device),
                                square.init(device),
                                nn::LinearConfig{hidden, intermediate}.init(device),
                                nn::LinearConfig{intermediate, hidden}.init(device)});
    }
    return encoder;
  }
};

const Device kDevice = Device::cpu();  // eager: every op has run when it returns

void build_random(benchmark::State& state) {
  for (auto _ : state) {
    Encoder encoder = EncoderConfig{}.init(kDevice);
    kDevice.sync();
    benchmark::DoNotOptimize(encoder);
  }
  state.counters["values"] = static_cast<double>(nn::num_params(EncoderConfig{}.init(kDevice)));
}
BENCHMARK(build_random)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void build_skip_init(benchmark::State& state) {
  for (auto _ : state) {
    const nn::SkipInit skip;
    Encoder encoder = EncoderConfig{}.init(kDevice);
    kDevice.sync();
    benchmark::DoNotOptimize(encoder);
  }
}
BENCHMARK(build_skip_init)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void load_after_random(benchmark::State& state) {
  const record::TensorMap checkpoint = nn::to_record(EncoderConfig{}.init(kDevice));
  for (auto _ : state) {
    Encoder encoder = EncoderConfig{}.init(kDevice);
    nn::load_record(encoder, checkpoint);
    kDevice.sync();
    benchmark::DoNotOptimize(encoder);
  }
}
BENCHMARK(load_after_random)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void from_record(benchmark::State& state) {
  kiln::bench::guarded(state, [&] {
    const Encoder source = EncoderConfig{}.init(kDevice);
    const record::TensorMap checkpoint = nn::to_record(source);
    for (auto _ : state) {
      Encoder encoder = nn::from_record(EncoderConfig{}, checkpoint, kDevice);
      kDevice.sync();
      benchmark::DoNotOptimize(encoder);
    }
    // The loaded weights are the checkpoint's, not the uninitialised storage.
    const Encoder loaded = nn::from_record(EncoderConfig{}, checkpoint, kDevice);
    kiln::bench::expect_near(kiln::bench::read_one(loaded.layers[11].intermediate.weight.val()),
                             kiln::bench::read_one(source.layers[11].intermediate.weight.val()),
                             0.0, "from_record");
  });
}
BENCHMARK(from_record)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();

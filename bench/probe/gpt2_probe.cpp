// train_bench's gpt2_step (GPT-2-small's shape, AdamW, the loss read back) STEPS times on cuda:0,
// fused, for a profiler (bench/probe/gpt2_kernels.sh):
//   gpt2_probe f32|bf16 LAYERS STEPS [dropped] [nosync]   (sequence 1024, batch 8)
// ("dropped": the logits are a temporary of the loss's expression, as in train_bench, instead of
// a tensor held through the backward pass; "nosync": no device.sync() after the optimizer's step,
// as in train_bench, so the last column is 0.)
// Each step prints where its wall time went: the forward until its loss is read (host and
// device), the host's calls of the backward pass and the optimizer, and the wait for the device
// to finish them.
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "tools/kiln/causal_lm.h"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const bool bf16 = std::string(argv[1]) == "bf16";
  // KILN_PROBE_DEVICE, KILN_PROBE_SEQ and KILN_PROBE_BATCH change the defaults (a small run on
  // the CPU, say).
  auto env_or = [](const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr && *value != '\0' ? value : fallback);
  };
  const std::int64_t layers = std::atoll(argv[2]);
  const std::int64_t seq = std::stoll(env_or("KILN_PROBE_SEQ", "1024"));
  const std::int64_t batch = std::stoll(env_or("KILN_PROBE_BATCH", "8"));
  const int steps = std::atoi(argv[3]);
  bool dropped = false, sync = true;
  for (int i = 4; i < argc; ++i) {
    dropped = dropped || std::string(argv[i]) == "dropped";
    sync = sync && std::string(argv[i]) != "nosync";
  }
  const Device device = Device::parse(env_or("KILN_PROBE_DEVICE", "cuda:0")).fused();
  device.seed(1);
  tools::CausalLm model = nn::train(tools::gpt2_small(device, layers, seq));
  optim::AdamW optimizer({.weight_decay = 0.1});
  const auto uniform = Distribution::uniform(0, tools::kGpt2Vocabulary);
  const auto ids = Tensor<2, Int>::random({batch, seq}, uniform, device);
  const auto targets =
      Tensor<2, Int>::random({batch, seq}, uniform, device).reshape<1>(Shape{batch * seq});
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    std::optional<AutocastScope> amp;
    if (bf16) amp.emplace(device, DType::BF16);
    std::optional<Tensor<2>> held;
    const Tensor<1> loss = [&] {
      Tensor<2> logits = model.forward(ids).reshape<2>(Shape{batch * seq, tools::kGpt2Vocabulary});
      if (!dropped) held = logits;
      return nn::cross_entropy(logits, targets);
    }();
    amp.reset();
    const double value = loss.into_scalar<double>();
    const auto forward = Clock::now();
    optimizer.step(model, loss.backward(), 3e-4);
    const auto issued = Clock::now();
    if (sync) device.sync();
    const auto done = Clock::now();
    const MemoryStats memory = device.memory_stats();
    std::printf(
        "step %d: loss %g; forward %.2f ms, backward+optimizer calls %.2f ms, then %.2f ms "
        "on the device; MB in use %lld, reserved %lld, peak %lld; %lld compiles\n",
        i, value, ms(start, forward), ms(forward, issued), ms(issued, done),
        static_cast<long long>(memory.bytes_in_use >> 20),
        static_cast<long long>(memory.bytes_reserved >> 20),
        static_cast<long long>(memory.peak_bytes_in_use >> 20),
        static_cast<long long>(device.kernel_stats().compiles));
  }
}

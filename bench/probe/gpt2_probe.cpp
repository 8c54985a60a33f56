// train_bench's gpt2_step (GPT-2-small's shape, AdamW, the loss read back) STEPS times on cuda:0,
// fused, for a profiler (bench/probe/gpt2_kernels.sh):
//   gpt2_probe f32|bf16 LAYERS STEPS   (sequence 1024, batch 8)
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/optim/optim.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "tools/kiln/causal_lm.h"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const bool bf16 = std::string(argv[1]) == "bf16";
  const std::int64_t layers = std::atoll(argv[2]), seq = 1024, batch = 8;
  const int steps = std::atoi(argv[3]);
  const Device device = Device::parse("cuda:0").fused();
  device.seed(1);
  tools::CausalLm model = nn::train(tools::gpt2_small(device, layers, seq));
  optim::AdamW optimizer({.weight_decay = 0.1});
  const auto uniform = Distribution::uniform(0, tools::kGpt2Vocabulary);
  const auto ids = Tensor<2, Int>::random({batch, seq}, uniform, device);
  const auto targets =
      Tensor<2, Int>::random({batch, seq}, uniform, device).reshape<1>(Shape{batch * seq});
  for (int i = 0; i < steps; ++i) {
    std::optional<AutocastScope> amp;
    if (bf16) amp.emplace(device, DType::BF16);
    const Tensor<2> logits =
        model.forward(ids).reshape<2>(Shape{batch * seq, tools::kGpt2Vocabulary});
    const Tensor<1> loss = nn::cross_entropy(logits, targets);
    amp.reset();
    std::printf("step %d: loss %g\n", i, loss.into_scalar<double>());
    optimizer.step(model, loss.backward(), 3e-4);
  }
}

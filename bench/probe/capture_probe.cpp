// Probe: kiln train digits' network trained a few steps on one device, eagerly or captured once
// and replayed (argv[1] "cap"), printing each step's loss: two runs side by side must agree.
// OPT=sgd|adamw, DROP=0|1 (dropout), DEVICE (default cuda:0).
//   g++ -std=c++20 -O1 bench/probe/capture_probe.cpp -Iinclude -Itools/kiln -LBUILD -lkiln
//   -lkiln_nn
#include <kiln/kiln.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "digits_net.h"

using namespace kiln;

int main(int argc, char** argv) {
  const bool captured = argc > 1 && std::string(argv[1]) == "cap";
  const char* name = std::getenv("DEVICE");
  const Device device = Device::parse(name != nullptr ? name : "cuda:0").fused();
  const bool adamw = std::getenv("OPT") != nullptr && std::string(std::getenv("OPT")) == "adamw";
  const bool dropout = std::getenv("DROP") != nullptr && std::string(std::getenv("DROP")) == "1";
  device.seed(5);
  auto model = nn::train(tools::make_digits_net(device));
  if (!dropout) model.dropout.p = 0;
  std::unique_ptr<optim::Optimizer> opt;
  if (adamw) {
    opt = std::make_unique<optim::AdamW>(optim::AdamWConfig{.weight_decay = 1e-4});
  } else {
    opt = std::make_unique<optim::Sgd>(optim::SgdConfig{.momentum = 0.9});
  }
  std::vector<Tensor<2>> features;
  std::vector<Tensor<1, Int>> labels;
  for (int s = 0; s < 12; ++s) {
    device.seed(100 + static_cast<std::uint64_t>(s));
    features.push_back(Tensor<2>::random({32, 64}, Distribution::uniform(0, 1), device));
    labels.push_back(Tensor<1, Int>::arange(0, 32, device).remainder_scalar(10 - s % 3));
  }
  auto step = [&](const Tensor<2>& f, const Tensor<1, Int>& l) {
    Tensor<1> loss = nn::cross_entropy(model.forward(f), l);
    opt->step(model, loss.backward(), 0.003);
    return loss;
  };
  device.seed(7);
  std::cout << step(features[0], labels[0]).into_scalar<float>() << "\n";
  Tensor<2> x = Tensor<2>::zeros({32, 64}, device);
  Tensor<1, Int> y = Tensor<1, Int>::zeros({32}, device);
  x.assign(features[1]);
  y.assign(labels[1]);
  Tensor<1> loss;
  Graph graph;
  if (captured) {
    graph = capture(device, [&] { loss = step(x, y); });
  } else {
    loss = step(x, y);
  }
  std::cout << loss.into_scalar<float>() << "\n";
  for (std::size_t i = 2; i < features.size(); ++i) {
    x.assign(features[i]);
    y.assign(labels[i]);
    if (captured) {
      graph.replay();
    } else {
      loss = step(x, y);
    }
    std::cout << loss.into_scalar<float>() << "\n";
  }
}

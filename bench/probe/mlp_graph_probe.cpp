// Probe: autodiff_bench's mlp_step (784-512-512-10 ReLU MLP, SGD) captured on cuda:0 and
// replayed REPLAYS times (argv[2], default 3) at batch argv[1]: run under Nsight Compute
// (bench/probe/mlp_graph_kernels.sh) to time each kernel of the last replay.
//   g++ -std=c++20 -O1 bench/probe/mlp_graph_probe.cpp -Iinclude -LBUILD -lkiln
#include <kiln/kiln.h>

#include <cstdlib>
#include <iostream>
#include <vector>

using namespace kiln;

int main(int argc, char** argv) {
  const std::int64_t batch = argc > 1 ? std::atoll(argv[1]) : 128;
  const int replays = argc > 2 ? std::atoi(argv[2]) : 3;
  const Device device = Device::parse("cuda:0").fused().autodiff();
  device.seed(1);
  const std::int64_t sizes[] = {784, 512, 512, 10};
  std::vector<Tensor<2>> params;
  for (int l = 0; l < 3; ++l) {
    params.push_back(
        Tensor<2>::random({sizes[l], sizes[l + 1]}, Distribution::uniform(-0.05, 0.05), device)
            .require_grad());
    params.push_back(Tensor<2>::zeros({1, sizes[l + 1]}, device).require_grad());
  }
  const Tensor<2> x = Tensor<2>::random({batch, 784}, Distribution::uniform(0, 1), device);
  const Tensor<2> y = Tensor<2>::zeros({batch, 10}, device) + 0.1;
  auto step = [&] {
    auto h = activation::relu(x.matmul(params[0]) + params[1]);
    h = activation::relu(h.matmul(params[2]) + params[3]);
    const auto logits = h.matmul(params[4]) + params[5];
    Tensor<1> loss = -(activation::log_softmax(logits, 1) * y).sum_dim(1).mean();
    const Gradients grads = loss.backward();
    for (auto& p : params) p.inner().assign(p.inner() - p.grad(grads)->inner() * 0.01);
    return loss;
  };
  std::cout << "eager loss " << step().into_scalar<float>() << "\n";
  Tensor<1> loss;
  const Graph graph = capture(device, [&] { loss = step(); });
  for (int r = 0; r < replays; ++r) graph.replay();
  std::cout << "replayed loss " << loss.into_scalar<float>() << "\n";
}

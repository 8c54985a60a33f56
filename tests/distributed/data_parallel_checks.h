// Data-parallel training against one process: N ranks, each with its shard of a global batch,
// must end with the parameters one process reaches on the whole batch (within float rounding).
// Run on the ranks of a thread group (data_parallel_test.cpp) and of launched processes
// (processes_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/train/data_parallel.h>

#include <string>
#include <vector>

namespace kiln::test {

struct DataParallelNet {
  nn::Linear hidden, out;
  KILN_MODULE(hidden, out)
  Tensor<2> forward(const Tensor<2>& x) const {
    return out.forward(activation::tanh(hidden.forward(x)));
  }
};

inline DataParallelNet data_parallel_net(std::uint64_t seed, const Device& device) {
  device.seed(seed);
  return nn::train(
      DataParallelNet{nn::LinearConfig{5, 8}.init(device), nn::LinearConfig{8, 3}.init(device)});
}

// The global batch: 24 rows of 5 features and their class. (Seeding is per device, so the ranks
// of a thread group make their nets and batches one after the other.)
inline Tensor<2> batch_features(const Device& device) {
  device.seed(77);
  return Tensor<2>::random({24, 5}, Distribution::normal(0, 1), device.without_autodiff());
}
inline Tensor<1, Int> batch_labels(const Device& device) {
  return Tensor<1, Int>::arange(0, 24, device.without_autodiff()).remainder_scalar(3);
}

inline std::vector<std::vector<float>> parameters_of(const DataParallelNet& net) {
  std::vector<std::vector<float>> values;
  for (const nn::NamedParam& p : nn::named_parameters(net)) {
    values.push_back(TensorData(kiln::detail::into_data(p.value)).to_vec<float>());
  }
  return values;
}

inline constexpr int kDataParallelSteps = 4;

// kDataParallelSteps of SGD with momentum on the whole batch (x, y), in one process.
inline std::vector<std::vector<float>> one_process_parameters(DataParallelNet net,
                                                              const Tensor<2>& x,
                                                              const Tensor<1, Int>& y) {
  optim::Sgd sgd({.momentum = 0.9});
  for (int step = 0; step < kDataParallelSteps; ++step) {
    Gradients grads = nn::cross_entropy(net.forward(x), y).backward();
    sgd.step(net, grads, 0.1);
  }
  return parameters_of(net);
}

// The same steps on this rank of ddp's group from net (rank 0's parameters replace those of
// the others), on its rows of the batch.
inline std::vector<std::vector<float>> data_parallel_parameters(const train::DataParallel& ddp,
                                                                DataParallelNet net,
                                                                const Tensor<2>& x,
                                                                const Tensor<1, Int>& y) {
  const std::int64_t rows = x.shape()[0];
  const std::int64_t from = rows * ddp.rank() / ddp.world_size();
  const std::int64_t to = rows * (ddp.rank() + 1) / ddp.world_size();
  const Tensor<2> mine = x.slice({{from, to}});
  const Tensor<1, Int> labels = y.slice({{from, to}});
  net = ddp.broadcast_parameters(std::move(net));
  optim::Sgd sgd({.momentum = 0.9});
  for (int step = 0; step < kDataParallelSteps; ++step) {
    Gradients grads = ddp.backward(net, nn::cross_entropy(net.forward(mine), labels));
    sgd.step(net, grads, 0.1);
  }
  return parameters_of(net);
}

inline void expect_same_parameters(const std::vector<std::vector<float>>& actual,
                                   const std::vector<std::vector<float>>& expected,
                                   const std::string& context) {
  ASSERT_EQ(actual.size(), expected.size()) << context;
  for (std::size_t p = 0; p < actual.size(); ++p) {
    ASSERT_EQ(actual[p].size(), expected[p].size()) << context;
    for (std::size_t i = 0; i < actual[p].size(); ++i) {
      EXPECT_NEAR(actual[p][i], expected[p][i], 2e-5)
          << context << ", parameter " << p << "[" << i << "]";
    }
  }
}

}  // namespace kiln::test

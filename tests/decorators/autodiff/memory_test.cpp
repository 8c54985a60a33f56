// Memory of the graph: a forward pass nobody differentiates frees itself, backward frees what it
// walked (unless told to keep it), and very deep graphs are torn down and walked without
// recursion. Measured with the CPU allocator's bytes_in_use, which counts every live block.
#include <cmath>
#include <cstdint>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

std::int64_t in_use() { return kAd.memory_stats().bytes_in_use; }

// What the allocator charges for one f32 tensor of this shape (its size class, not the raw
// bytes), measured rather than assumed.
std::int64_t footprint(const Shape& shape) {
  const std::int64_t before = in_use();
  const auto t = Tensor<2>::zeros(shape, kAd);
  return in_use() - before;
}

// 64-128-128-10 with ReLU and a cross-entropy loss, batch 32.
struct Mlp {
  std::vector<Tensor<2>> params;  // w1 b1 w2 b2 w3 b3

  Mlp() {
    const std::int64_t sizes[] = {64, 128, 128, 10};
    for (std::size_t l = 0; l < 3; ++l) {
      const std::int64_t in = sizes[l], out = sizes[l + 1];
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      const auto n = static_cast<std::size_t>(in * out);
      params.push_back(tensor<2>(spread(n, -bound, bound, 10 + l), {in, out}).require_grad());
      params.push_back(tensor<2>(spread(static_cast<std::size_t>(out), -0.1, 0.1, 20 + l), {1, out})
                           .require_grad());
    }
  }

  Tensor<1> loss(const Tensor<2>& x, const Tensor<2>& one_hot) const {
    auto h = activation::relu(x.matmul(params[0]) + params[1]);
    h = activation::relu(h.matmul(params[2]) + params[3]);
    const auto logits = h.matmul(params[4]) + params[5];
    return -(activation::log_softmax(logits, 1) * one_hot).sum_dim(1).mean();
  }
};

Tensor<2> batch() { return tensor<2>(spread(32 * 64, -1, 1, 3), {32, 64}); }

Tensor<2> labels() {
  std::vector<double> v(32 * 10, 0.0);
  for (std::size_t i = 0; i < 32; ++i) v[i * 10 + (i * 7) % 10] = 1.0;
  return tensor<2>(v, {32, 10});
}

TEST(AutodiffMemory, ForwardPassesWithoutBackwardDoNotGrow) {
  const Mlp mlp;
  const auto x = batch(), y = labels();
  std::int64_t after_10 = 0, holding = 0;
  const std::int64_t idle = in_use();
  for (int pass = 1; pass <= 1000; ++pass) {
    {
      const auto loss = mlp.loss(x, y);
      ASSERT_TRUE(loss.is_require_grad());
      if (pass == 10) holding = in_use() - idle;
    }
    if (pass == 10) after_10 = in_use();
  }
  // The measurement sees the graph: while a loss was alive its saved activations were in use.
  EXPECT_GE(holding, 2 * footprint({32, 128}));
  EXPECT_EQ(in_use(), after_10) << "1,000 dropped forward passes left memory behind";
  EXPECT_EQ(in_use(), idle);
}

TEST(AutodiffMemory, BackwardFreesTheSavedValuesWhileTheLossLives) {
  const Mlp mlp;
  const auto x = batch(), y = labels();
  std::int64_t grads = 0;
  for (const auto& p : mlp.params) grads += footprint(p.shape());
  const std::int64_t loss_value = footprint({1, 1});
  const std::int64_t base = in_use();  // parameters and data

  const auto loss = mlp.loss(x, y);
  const std::int64_t graph = in_use() - base - loss_value;
  EXPECT_GE(graph, 2 * footprint({32, 128})) << "the forward pass saves the hidden activations";
  const Gradients g = loss.backward();
  EXPECT_EQ(g.size(), mlp.params.size());
  EXPECT_EQ(in_use(), base + grads + loss_value)
      << "after backward only the gradients and the loss value should remain";
}

TEST(AutodiffMemory, RetainGraphKeepsTheSavedValues) {
  const Mlp mlp;
  const auto x = batch(), y = labels();
  std::int64_t grads = 0;
  for (const auto& p : mlp.params) grads += footprint(p.shape());
  const std::int64_t loss_value = footprint({1, 1});
  const std::int64_t base = in_use();

  const auto loss = mlp.loss(x, y);
  const std::int64_t with_graph = in_use();
  {
    const Gradients g = loss.backward({.retain_graph = true});
    EXPECT_GE(in_use() - (base + grads + loss_value), 2 * footprint({32, 128}))
        << "retain_graph keeps what a second backward needs";
  }
  EXPECT_EQ(in_use(), with_graph) << "dropping the gradients leaves exactly the retained graph";
  // The retained graph gives the same gradients again, then frees itself.
  const Gradients again = loss.backward();
  EXPECT_EQ(in_use(), base + grads + loss_value);
}

TEST(AutodiffMemory, ADeepChainIsDestroyedWithoutRecursion) {
  const std::int64_t idle = in_use();
  {
    const auto x = tensor<1>({1.0}, {1}, kAd, DType::F64).require_grad();
    auto y = x;
    for (int i = 0; i < 200000; ++i) y = y * 1.0001;
    EXPECT_TRUE(y.is_require_grad());
    EXPECT_NEAR(values(y)[0], std::pow(1.0001, 200000), 1e-9 * std::pow(1.0001, 200000));
  }  // the whole chain dies here, one node at a time
  EXPECT_EQ(in_use(), idle);
}

TEST(AutodiffMemory, BackwardOverADeepChain) {
  const auto x = tensor<1>({0.5, 2.0}, {2}, kAd, DType::F64).require_grad();
  auto y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0001;
  const Gradients g = y.sum().backward();
  const double want = std::pow(1.0001, 20000);
  expect_close(values(grad_of(x, g)), {want, want}, 1e-10, "d/dx of x * 1.0001^20000");
}

// y ← y + 0.001 sin(y), blocks times, from x = 0.3: every sin rule reads a saved value (which
// Balanced recomputes). dy'/dy = 1 + 0.001 cos(y), so the gradient is the product of those
// factors along the forward trajectory.
void expect_deep_chain_gradient(CheckpointStrategy strategy, int blocks) {
  const CheckpointScope scope(strategy);
  const auto x = tensor<1>({0.3}, {1}, kAd, DType::F64).require_grad();
  auto y = x;
  double v = 0.3, want = 1.0;
  for (int i = 0; i < blocks; ++i) {
    want *= 1 + 0.001 * std::cos(v);
    v += 0.001 * std::sin(v);
    y = y + y.sin() * 0.001;
  }
  const Gradients g = y.sum().backward();
  expect_close(values(grad_of(x, g)), {want}, 1e-10, "chain of y + 0.001 sin y");
}

TEST(AutodiffMemory, BackwardOverADeepChainOfOpsThatReadTheirInputs) {
  // 7,000 blocks of three ops: 21,000 nodes.
  expect_deep_chain_gradient(CheckpointStrategy::StoreAll, 7000);
  expect_deep_chain_gradient(CheckpointStrategy::Balanced, 7000);
}

// Balanced recomputes runs of at most kMaxRecomputeChain ops, so recursion stays shallow
// however deep the chain.
TEST(AutodiffMemory, BalancedBackwardOverAVeryDeepChain) {
  expect_deep_chain_gradient(CheckpointStrategy::Balanced, 70000);  // 210,000 nodes
}

}  // namespace
}  // namespace kiln::autodiff_test

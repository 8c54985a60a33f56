// BackwardOptions::on_leaf_gradient: each leaf's gradient handed over once, as soon as it is
// final (before the walk reaches the older leaves), equal to what the returned Gradients hold.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <map>
#include <vector>

namespace kiln {
namespace {

TEST(LeafGradientHook, HandsOverEachFinalGradientOnceAndEarly) {
  const Device device = Device::cpu().autodiff();
  // A chain of two layers whose last layer's weight w2 is made first: a walk that waits for each
  // leaf's turn (newest first) would reach w1 before w2, but w2's gradient is final as soon as
  // the last layer's ops have passed theirs back, before the first layer's rules run.
  const auto x = Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>{1, -2, 3, 0.5f, 2, -1}, {2, 3}), device);
  const auto w2 =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{2, -3}, {2, 1}), device)
          .require_grad();
  const auto w1 =
      Tensor<2>::from_data(
          TensorData::from_vec(std::vector<float>{0.5f, -1, 2, 1, 0, -0.5f}, {3, 2}), device)
          .require_grad();
  const Tensor<2> hidden = activation::tanh(x.matmul(w1));
  // w2 is read twice: its gradient is final only after both reads passed theirs back.
  const Tensor<1> loss = (hidden.matmul(w2) + hidden.matmul(w2 * 2.0)).sum();

  std::vector<std::uint64_t> order;
  std::map<std::uint64_t, std::vector<float>> handed;
  BackwardOptions options;
  options.on_leaf_gradient = [&](std::uint64_t leaf, const Primitive& grad) {
    order.push_back(leaf);
    handed[leaf] = Tensor<2>::from_primitive(grad).into_data().to_vec<float>();
  };
  const Gradients grads = loss.backward(options);

  const std::uint64_t id1 = *kiln::detail::leaf_id(w1.primitive());
  const std::uint64_t id2 = *kiln::detail::leaf_id(w2.primitive());
  // The last layer's gradient comes first, although w2 is the older leaf.
  EXPECT_EQ(order, (std::vector<std::uint64_t>{id2, id1}));
  EXPECT_EQ(handed[id1], w1.grad(grads)->into_data().to_vec<float>());
  EXPECT_EQ(handed[id2], w2.grad(grads)->into_data().to_vec<float>());
  // And the gradients are the plain pass's.
  const Gradients plain =
      ((activation::tanh(x.matmul(w1)).matmul(w2) + activation::tanh(x.matmul(w1)).matmul(w2 * 2.0))
           .sum())
          .backward();
  EXPECT_EQ(handed[id1], w1.grad(plain)->into_data().to_vec<float>());
  EXPECT_EQ(handed[id2], w2.grad(plain)->into_data().to_vec<float>());
  EXPECT_FALSE(kiln::detail::leaf_id(x.primitive()).has_value());
}

TEST(LeafGradientHook, ALeafThatIsTheRootIsHandedOverToo) {
  const auto w = Tensor<1>::ones({1}, Device::cpu().autodiff()).require_grad();
  int calls = 0;
  BackwardOptions options;
  options.on_leaf_gradient = [&](std::uint64_t leaf, const Primitive&) {
    EXPECT_EQ(leaf, *kiln::detail::leaf_id(w.primitive()));
    ++calls;
  };
  (void)w.backward(options);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kiln

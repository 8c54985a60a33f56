// The public API of the linalg family as users write it (DESIGN.md section 6 pins a.matmul(b)).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>

#include <cmath>

#include "support/layer_norm_reference.h"
#include "support/spread.h"

using namespace kiln;

TEST(LinalgApi, PinnedMatmulExample) {
  Device dev = Device::cpu();
  auto a = Tensor<2>::ones({64, 64}, dev);
  auto b = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), dev);
  auto c = a.matmul(a) + 1.0;
  std::vector<float> v = c.into_data().to_vec<float>();
  EXPECT_EQ(v, std::vector<float>(64 * 64, 65.0f));
  // [[1, 2], [3, 4]]^2 = [[7, 10], [15, 22]]
  EXPECT_EQ(b.matmul(b).into_data().to_vec<float>(), (std::vector<float>{7, 10, 15, 22}));
}

TEST(LinalgApi, BatchedAndTransposedMatmul) {
  Device dev = Device::cpu();
  auto x = Tensor<3>::from_data(
      TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), dev);
  auto eye =
      Tensor<3>::from_data(TensorData::from_vec(std::vector<float>{1, 0, 0, 1}, {1, 2, 2}), dev);
  EXPECT_EQ(x.matmul(eye).into_data().to_vec<float>(), x.into_data().to_vec<float>());
  // x^T x per batch, with the transpose as a view.
  auto xt = x.swap_dims(1, 2);
  EXPECT_EQ(xt.matmul(x).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(xt.matmul(x).into_data().to_vec<float>(),
            (std::vector<float>{10, 14, 14, 20, 74, 86, 86, 100}));
}

TEST(LinalgApi, IntegerMatmul) {
  Device dev = Device::cpu();
  auto a = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2}), dev);
  EXPECT_EQ(a.matmul(a).into_data().to_vec<std::int64_t>(),
            (std::vector<std::int64_t>{7, 10, 15, 22}));
}

TEST(LinalgApi, ModuleOps) {
  Device dev = Device::cpu();
  auto x = Tensor<3>::ones({2, 3, 4}, dev);
  auto w = Tensor<2>::ones({5, 4}, dev);  // [out, in], PyTorch's layout
  auto bias = Tensor<1>::ones({5}, dev);
  auto y = module::linear(x, w, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(y.into_data().to_vec<float>(), std::vector<float>(30, 5.0f));
  // A square weight that is not symmetric: y = x Wᵀ, as torch.nn.functional.linear.
  const auto xs = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2}, {1, 2}), dev);
  const auto ws =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 10, 100, 1000}, {2, 2}), dev);
  EXPECT_EQ(module::linear(xs, ws).into_data().to_vec<float>(), (std::vector<float>{21, 2100}));
  // A weight stored [in, out] is refused, naming the layout.
  try {
    (void)module::linear(x, Tensor<2>::ones({4, 5}, dev));
    FAIL() << "no error";
  } catch (const ShapeMismatch& error) {
    EXPECT_NE(std::string(error.what()).find("weight [out, in] has shape [4, 5]"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("module::linear"), std::string::npos) << error.what();
  }

  auto table =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{0, 0, 1, 1, 2, 2}, {3, 2}), dev);
  auto ids = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{2, 0, 1, 2}, {2, 2}), dev);
  Tensor<3> e = module::embedding(table, ids);
  EXPECT_EQ(e.into_data().to_vec<float>(), (std::vector<float>{2, 2, 0, 0, 1, 1, 2, 2}));

  auto rows =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 4, 4}, {2, 3}), dev);
  auto gamma = Tensor<1>::ones({3}, dev);
  auto n = module::layer_norm(rows, gamma).into_data().to_vec<float>();
  EXPECT_NEAR(n[0], -std::sqrt(1.5f), 1e-4);
  EXPECT_EQ(n[4], 0.0f);  // a constant row normalises to 0 (eps inside the sqrt)

  // Causal attention over a single key-value pair per position: row 0 sees only key 0.
  auto q = Tensor<4>::ones({1, 1, 3, 2}, dev);
  auto v = Tensor<4>::from_data(
      TensorData::from_vec(std::vector<float>{1, 1, 2, 2, 3, 3}, {1, 1, 3, 2}), dev);
  auto out = module::attention(q, q, v, std::nullopt, std::nullopt,
                               {.scale = std::nullopt, .is_causal = true});
  auto o = out.into_data().to_vec<float>();
  EXPECT_NEAR(o[0], 1.0f, 1e-6);
  EXPECT_NEAR(o[2], 1.5f, 1e-6);
  EXPECT_NEAR(o[4], 2.0f, 1e-6);
}

// Rows whose mean is large beside their spread (1e4 and 1): the output keeps float precision
// (x - mean is formed without subtracting a rounded mean), against a float64 loop; row lengths
// with and without a tail past the vector width.
TEST(LinalgApi, LayerNormKeepsPrecisionAtLargeMeans) {
  const Device dev = Device::cpu();
  for (const std::int64_t width : {40, 777}) {
    const std::int64_t rows = 9;
    // The inputs as the float tensor holds them, so the reference sees the same values.
    std::vector<double> x = test::spread(rows * width, 12345, 1e4, 1e4 + 1);
    for (double& v : x) v = static_cast<float>(v);
    std::vector<double> g(static_cast<std::size_t>(width));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.5f + static_cast<float>(i % 7) / 7.0f;
    const auto xt = Tensor<2>::from_data(
        TensorData::from_vec(std::vector<float>(x.begin(), x.end()), {rows, width}), dev);
    const auto gt = Tensor<1>::from_data(
        TensorData::from_vec(std::vector<float>(g.begin(), g.end()), {width}), dev);
    const std::vector<float> got =
        module::layer_norm(xt, gt, std::nullopt, 1e-5).into_data().to_vec<float>();
    const std::vector<double> want = test::layer_norm_reference(x, width, g, {}, 1e-5);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5) << "width " << width << " element " << i;
    }
  }
}

// Batch and heads broadcast as sizes do elsewhere: an empty query batch beside keys and values
// of batch 1 gives an empty batch (the CPU kernel took the largest size, 1).
TEST(LinalgApi, AttentionBroadcastsAnEmptyBatch) {
  const Device dev = Device::cpu();
  auto q = Tensor<4>::ones({0, 2, 3, 4}, dev);
  auto k = Tensor<4>::ones({1, 2, 5, 4}, dev);
  auto v = Tensor<4>::ones({1, 1, 5, 6}, dev);
  EXPECT_EQ(module::attention(q, k, v).shape(), (Shape{0, 2, 3, 6}));
  auto q1 = Tensor<4>::ones({1, 2, 3, 4}, dev);
  EXPECT_EQ(module::attention(q1, k, v).shape(), (Shape{1, 2, 3, 6}));
}

// A mask's polarity is said where it is made: attend() keeps its true keys, exclude() drops them.
TEST(LinalgApi, AttentionMaskSaysWhetherTrueKeepsOrDrops) {
  const Device dev = Device::cpu();
  auto q = Tensor<4>::ones({1, 1, 1, 2}, dev);
  auto k = Tensor<4>::ones({1, 1, 3, 2}, dev);
  auto v = Tensor<4>::from_data(
      TensorData::from_vec(std::vector<float>{1, 1, 2, 2, 3, 3}, {1, 1, 3, 2}), dev);
  auto keys = Tensor<4, Bool>::from_data(
      TensorData::from_vec(std::vector<bool>{true, true, false}, {1, 1, 1, 3}), dev);
  // Equal scores: the output is the mean of the values left in.
  auto kept = module::attention(q, k, v, module::AttentionMask<4>::attend(keys))
                  .into_data()
                  .to_vec<float>();
  EXPECT_NEAR(kept[0], 1.5f, 1e-6);
  auto dropped = module::attention(q, k, v, module::AttentionMask<4>::exclude(keys))
                     .into_data()
                     .to_vec<float>();
  EXPECT_NEAR(dropped[0], 3.0f, 1e-6);
}

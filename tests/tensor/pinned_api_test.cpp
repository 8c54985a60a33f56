// The pinned public API of DESIGN.md §6, line by line, with the values each call must give.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>

using namespace kiln;

namespace {

std::vector<float> floats(const auto& t) { return t.into_data().template to_vec<float>(); }

}  // namespace

TEST(PinnedApi, CreationArithmeticAndReads) {
  Device dev = Device::cpu();
  auto a = Tensor<2>::ones({64, 64}, dev);
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.shape(), (Shape{64, 64}));
  auto b = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), dev);
  EXPECT_EQ(floats(b), (std::vector<float>{1, 2, 3, 4}));
  auto c = a.matmul(a) + 1.0;
  std::vector<float> v = c.into_data().to_vec<float>();
  ASSERT_EQ(v.size(), 64u * 64u);
  EXPECT_FLOAT_EQ(v[0], 65.0f);
  EXPECT_FLOAT_EQ(v[4095], 65.0f);
  auto i = Tensor<1, Int>::arange(0, 10, dev);
  EXPECT_EQ(i.into_data().to_vec<std::int64_t>(),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  Tensor<2, Bool> m = b.greater_elem(2.5);
  EXPECT_EQ(m.into_data().to_vec<bool>(), (std::vector<bool>{false, false, true, true}));
}

TEST(PinnedApi, ReductionsKeepRank) {
  Device dev = Device::cpu();
  auto b = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 5, 3, 4}, {2, 2}), dev);
  EXPECT_EQ(floats(b.sum()), (std::vector<float>{13}));
  EXPECT_EQ(b.sum().shape(), (Shape{1}));
  EXPECT_EQ(b.sum_dim(1).shape(), (Shape{2, 1}));
  EXPECT_EQ(floats(b.sum_dim(1)), (std::vector<float>{6, 7}));
  EXPECT_EQ(floats(b.mean_dim(0)), (std::vector<float>{2, 4.5}));
  EXPECT_EQ(floats(b.max_dim(1)), (std::vector<float>{5, 4}));
  EXPECT_EQ(b.argmax(1).into_data().to_vec<std::int64_t>(), (std::vector<std::int64_t>{1, 1}));
}

TEST(PinnedApi, LayoutOps) {
  Device dev = Device::cpu();
  auto a = Tensor<2>::ones({64, 64}, dev);
  auto flat = a.reshape(Shape{4096});
  EXPECT_EQ(flat.shape(), (Shape{4096}));
  Tensor<1> as_rank1 = a.reshape(Shape{4096});
  EXPECT_EQ(as_rank1.num_elements(), 4096);
  auto b =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}), dev);
  EXPECT_EQ(floats(b.transpose()), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(floats(b.swap_dims(0, 1)), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(floats(b.slice({{0, 2}, {0, 2}})), (std::vector<float>{1, 2, 4, 5}));
  auto cat = Tensor<2>::cat({b, b}, 0);
  EXPECT_EQ(cat.shape(), (Shape{4, 3}));
  EXPECT_EQ(floats(cat), (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
}

TEST(PinnedApi, UnaryConversionsAndDevices) {
  Device dev = Device::cpu();
  auto b =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{0.5f, 1, 2, 4}, {2, 2}), dev);
  EXPECT_NEAR(floats(b.exp())[1], std::exp(1.0), 1e-6);
  EXPECT_NEAR(floats(b.log())[3], std::log(4.0), 1e-6);
  EXPECT_NEAR(floats(b.tanh())[0], std::tanh(0.5), 1e-6);
  EXPECT_EQ(floats(b.powf_scalar(2.0)), (std::vector<float>{0.25f, 1, 4, 16}));
  EXPECT_EQ(floats(b.clamp(0, 1)), (std::vector<float>{0.5f, 1, 1, 1}));
  auto bf = b.cast(DType::BF16);
  EXPECT_EQ(bf.dtype(), DType::BF16);
  EXPECT_EQ(bf.to_device(Device::cpu()).device(), Device::cpu());
  EXPECT_EQ(b.int_().dtype(), DType::I64);
  EXPECT_EQ(b.int_().float_().dtype(), DType::F32);
  EXPECT_EQ(b.bool_().into_data().to_vec<bool>(), (std::vector<bool>{true, true, true, true}));
}

TEST(PinnedApi, SortingAndMasks) {
  Device dev = Device::cpu();
  auto x =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{3, 1, 2, 9, 7, 8}, {2, 3}), dev);
  EXPECT_EQ(floats(x.sort(1)), (std::vector<float>{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(floats(x.sort_descending(1)), (std::vector<float>{3, 2, 1, 9, 8, 7}));
  EXPECT_EQ(x.argsort(1).into_data().to_vec<std::int64_t>(),
            (std::vector<std::int64_t>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(floats(x.topk(2, 1)), (std::vector<float>{3, 2, 9, 8}));
  auto mask = x.greater_elem(2.5);
  EXPECT_EQ(floats(x.mask_fill(mask, 0.0)), (std::vector<float>{0, 1, 2, 0, 0, 0}));
  auto other = Tensor<2>::full({2, 3}, -1.0, dev);
  EXPECT_EQ(floats(x.mask_where(mask, other)), (std::vector<float>{-1, 1, 2, -1, -1, -1}));
}

TEST(PinnedApi, DeviceMethods) {
  Device dev = Device::cpu();
  EXPECT_EQ(dev.backend_name(), "cpu");
  EXPECT_TRUE(dev.supports_dtype(DType::F32));
  EXPECT_FALSE(dev.dtype_usage(DType::F32).contains(DTypeUsage::Accelerated));
  EXPECT_EQ(dev.settings().float_dtype, DType::F32);
  dev.seed(7);
  auto r1 = Tensor<2>::random({4, 4}, Distribution::normal(0, 1), dev);
  dev.seed(7);
  auto r2 = Tensor<2>::random({4, 4}, Distribution::normal(0, 1), dev);
  EXPECT_EQ(floats(r1), floats(r2));
  dev.sync();
  dev.flush();
  const MemoryStats stats = dev.memory_stats();
  EXPECT_GE(stats.bytes_reserved, stats.bytes_in_use);
  EXPECT_GE(stats.peak_bytes_in_use, stats.bytes_in_use);
}

TEST(PinnedApi, ActivationAndModuleFunctions) {
  Device dev = Device::cpu();
  auto x = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{-1, 0, 1, 2}, {2, 2}), dev);
  EXPECT_EQ(floats(activation::relu(x)), (std::vector<float>{0, 0, 1, 2}));
  EXPECT_NEAR(floats(activation::sigmoid(x))[2], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(floats(activation::tanh(x))[3], std::tanh(2.0), 1e-6);
  auto s = floats(activation::softmax(x, 1));
  EXPECT_NEAR(s[0] + s[1], 1.0, 1e-6);
  auto ls = floats(activation::log_softmax(x, 1));
  EXPECT_NEAR(std::exp(ls[2]) + std::exp(ls[3]), 1.0, 1e-6);
  EXPECT_NEAR(floats(activation::gelu(x))[2], 0.5 * (1 + std::erf(1 / std::sqrt(2.0))), 1e-6);
  EXPECT_NEAR(floats(activation::silu(x))[3], 2 / (1 + std::exp(-2.0)), 1e-6);
  auto img = Tensor<4>::ones({1, 1, 4, 4}, dev);
  auto w = Tensor<4>::ones({1, 1, 3, 3}, dev);
  auto y = module::conv2d(img, w, std::nullopt, {.stride = {1, 1}, .padding = {1, 1}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_FLOAT_EQ(floats(y)[5], 9.0f);
  EXPECT_EQ(module::max_pool2d(img, {.kernel_size = {2, 2}}).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(module::avg_pool2d(img, {.kernel_size = {2, 2}}).shape(), (Shape{1, 1, 2, 2}));
  auto table =
      Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{0, 1, 10, 11}, {2, 2}), dev);
  auto ids =
      Tensor<2, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{1, 0}, {1, 2}), dev);
  EXPECT_EQ(floats(module::embedding(table, ids)), (std::vector<float>{10, 11, 0, 1}));
  EXPECT_EQ(module::interpolate(img, {8, 8}).shape(), (Shape{1, 1, 8, 8}));
}

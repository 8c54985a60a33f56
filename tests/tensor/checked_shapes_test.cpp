// Size arithmetic at its extremes through the public API: every finding of the hardening review
// (issue 13, items 1 and 2) as the test that would have caught it, and the neighbouring cases
// that share the arithmetic. Each call either throws the typed kiln::Error naming the op and
// the values, or returns a tensor whose elements are exactly the ones a float64 model of the
// index arithmetic expects.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "support/devices.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using test::expect_error;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t k2to32 = std::int64_t{1} << 32;
constexpr std::int64_t k2to62 = std::int64_t{1} << 62;

using kiln::test::kCpu;

Tensor<1> values(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor<1>::from_data(TensorData::from_vec(v, {n}), kCpu);
}

std::vector<float> read(const Tensor<1>& t) { return t.into_data().to_vec<float>(); }

// ---- item 1: narrow's range check overflowed ----

// A pooling window far larger than its input is valid when its padding is at most half of it
// (as in PyTorch): its work follows the taps that land inside the input, not the window's size
// (a kernel of 2^41 allocated a table per tap and never finished; found by
// fuzz/remote_frame_fuzz.cpp through a remote server).
TEST(CheckedShapes, PoolingWindowsFarLargerThanTheInputTakeTheInputsTime) {
  constexpr std::int64_t kHuge = std::int64_t{1} << 41;
  std::vector<float> values(2 * 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 5) % 8);
  const auto x = Tensor<4>::from_data(TensorData::from_vec(values, {1, 1, 2, 4}), kCpu);
  PoolOptions options;
  options.kernel_size = {2, kHuge};
  options.padding = {0, kHuge / 2};
  // One window covers the whole plane: the largest value, at its flat index.
  auto [max, index] = module::max_pool2d_with_indices(x, options);
  ASSERT_EQ(max.shape(), (Shape{1, 1, 1, 1}));
  const auto best = std::max_element(values.begin(), values.end());
  EXPECT_EQ(max.into_data().to_vec<float>()[0], *best);
  EXPECT_EQ(index.into_data().to_f64_vec()[0], static_cast<double>(best - values.begin()));
  // The average over the padded window (count_include_pad): the sum over 2 * 2^41 positions.
  const auto mean = module::avg_pool2d(x, options).into_data().to_vec<float>();
  double sum = 0;
  for (float v : values) sum += v;
  EXPECT_NEAR(mean[0], sum / (2.0 * static_cast<double>(kHuge)), 1e-15);
  options.count_include_pad = false;
  EXPECT_NEAR(module::avg_pool2d(x, options).into_data().to_vec<float>()[0], sum / 8.0, 1e-6);
}

// In ceil mode a second window position can start far to the right of the first, so that the
// taps some position reads inside the input lie far apart within the kernel: a table over the
// kernel range between them held 3 * 10^11 taps, 4 of them inside (found by
// fuzz/remote_frame_fuzz.cpp; its input is fuzz/corpus/remote_frame/pool_taps_past_the_input).
// Both positions here cover the whole row; checked against loops over the taps inside the input.
TEST(CheckedShapes, CeilModeWindowsWhoseTapsInsideTheInputLieFarApart) {
  constexpr std::int64_t kWidth = (std::int64_t{1} << 41) + 2, kPad = std::int64_t{1} << 40;
  constexpr std::int64_t kStride = 336287321090;
  std::vector<float> values(4 * 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7) % 16);
  const auto x = Tensor<4>::from_data(TensorData::from_vec(values, {1, 1, 4, 4}), kCpu);
  PoolOptions options;
  options.kernel_size = {2, kWidth};
  options.stride = {2, kStride};
  options.padding = {0, kPad};
  options.ceil_mode = true;
  options.count_include_pad = false;
  auto [max, index] = module::max_pool2d_with_indices(x, options);
  const auto mean = module::avg_pool2d(x, options);
  ASSERT_EQ(max.shape(), (Shape{1, 1, 2, 2}));
  ASSERT_EQ(mean.shape(), (Shape{1, 1, 2, 2}));
  const std::vector<float> got_max = max.into_data().to_vec<float>();
  const std::vector<double> got_index = index.into_data().to_f64_vec();
  const std::vector<float> got_mean = mean.into_data().to_vec<float>();
  for (std::int64_t oh = 0; oh < 2; ++oh) {
    for (std::int64_t ow = 0; ow < 2; ++ow) {
      const std::int64_t start =
          ow * kStride - kPad;  // the window's columns: [start, start + kWidth)
      float best = -std::numeric_limits<float>::infinity();
      std::int64_t at = -1, count = 0;
      double sum = 0;
      for (std::int64_t h = 2 * oh; h < 2 * oh + 2; ++h) {
        for (std::int64_t w = std::max<std::int64_t>(start, 0);
             w < std::min<std::int64_t>(start + kWidth, 4); ++w) {
          const float v = values[static_cast<std::size_t>(h * 4 + w)];
          if (v > best) best = v, at = h * 4 + w;
          sum += v;
          ++count;
        }
      }
      const std::size_t o = static_cast<std::size_t>(oh * 2 + ow);
      EXPECT_EQ(got_max[o], best) << oh << ", " << ow;
      EXPECT_EQ(got_index[o], static_cast<double>(at)) << oh << ", " << ow;
      EXPECT_NEAR(got_mean[o], sum / static_cast<double>(count), 1e-6) << oh << ", " << ow;
    }
  }
}

TEST(CheckedShapes, NarrowPastTheEndIsRefusedAtAnyStart) {
  auto t = values({1, 2, 3, 4});
  expect_error<InvalidArgument>([&] { (void)t.narrow(0, kMax, 1); }, "narrow",
                                {"9223372036854775807", "size 4"});
  for (std::int64_t j : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1} << 24, kMax - 1}) {
    expect_error<InvalidArgument>([&] { (void)t.narrow(0, kMax - j, j + 1); }, "narrow");
    expect_error<InvalidArgument>([&] { (void)t.narrow(0, 2, kMax - 1); }, "narrow");
  }
  // The legal ranges at the edges still work.
  EXPECT_EQ(read(t.narrow(0, 4, 0)), std::vector<float>{});
  EXPECT_EQ(read(t.narrow(0, 3, 1)), std::vector<float>{4});
  EXPECT_EQ(read(t.narrow(0, -1, 1)), std::vector<float>{4});
}

TEST(CheckedShapes, InPlaceWriteThroughARefusedNarrowTouchesNoOtherTensor) {
  // The review's heap write: a view that is its storage's only owner is written in place.
  auto neighbour = values({10, 20, 30, 40});
  for (std::int64_t j : {std::int64_t{3}, std::int64_t{1} << 24}) {
    EXPECT_THROW((void)(std::move(values({1, 2, 3, 4}).narrow(0, kMax - j, j + 1)) + 1.0),
                 InvalidArgument);
  }
  EXPECT_EQ(read(neighbour), (std::vector<float>{10, 20, 30, 40}));
  // A legal unique view is still written in place, and correctly.
  auto owned = values({1, 2, 3, 4}).narrow(0, 1, 2);
  EXPECT_EQ(read(std::move(owned) + 1.0), (std::vector<float>{3, 4}));
}

// ---- item 2: shape arithmetic wrapped ----

TEST(CheckedShapes, ReshapeToAShapeWhoseCountWrapsIsRefused) {
  auto empty = Tensor<1>::zeros({0}, kCpu);
  expect_error<InvalidArgument>(
      [&] {
        (void)empty.reshape<2>(Shape{k2to32, k2to32});
      },
      "reshape", {"[4294967296, 4294967296]", "2^48"});
  expect_error<InvalidArgument>(
      [&] {
        (void)empty.reshape<3>(Shape{0, k2to32, k2to32});
      },
      "reshape");
  // -1 next to dims whose product wraps.
  expect_error<InvalidArgument>(
      [&] {
        (void)empty.reshape<3>(Shape{-1, k2to32, k2to32});
      },
      "reshape");
  // Zero-size reshapes that are legal.
  EXPECT_EQ(empty.reshape<2>(Shape{0, 5}).shape(), (Shape{0, 5}));
  EXPECT_EQ(empty.reshape<3>(Shape{4, 0, 1 << 20}).shape(), (Shape{4, 0, 1 << 20}));
}

TEST(CheckedShapes, ExpandPastTheElementLimitIsRefused) {
  auto one = Tensor<2>::ones({1, 1}, kCpu);
  expect_error<InvalidArgument>(
      [&] {
        (void)one.expand<2>(Shape{k2to32, k2to32});
      },
      "expand", {"[4294967296, 4294967296]"});
  auto scalar = Tensor<1>::ones({1}, kCpu);
  expect_error<InvalidArgument>([&] { (void)scalar.expand<1>(Shape{k2to62}); }, "expand");
  // A large legal view reduces to the closed form without materialising anything: the sum of
  // 2^20 ones broadcast from one element.
  auto wide = scalar.expand<2>(Shape{1 << 10, 1 << 10});
  EXPECT_EQ(wide.sum().into_scalar<double>(), 1 << 20);
  EXPECT_EQ(wide.mean().into_scalar<double>(), 1.0);
}

TEST(CheckedShapes, CatOfViewsPastTheLimitIsRefused) {
  auto scalar = Tensor<1>::ones({1}, kCpu);
  auto big = scalar.expand<1>(Shape{std::int64_t{1} << 46});
  expect_error<InvalidArgument>([&] { (void)Tensor<1>::cat({big, big, big, big, big}, 0); }, "cat");
  expect_error<InvalidArgument>(
      [&] {
        (void)Tensor<1>::stack({big, big, big, big, big}, 0);
      },
      "stack");
}

TEST(CheckedShapes, ArangeOverAllOfInt64IsExact) {
  auto at = [](std::int64_t start, std::int64_t end, std::int64_t step) {
    return Tensor<1, Int>::arange(start, end, kCpu, step).into_data().to_vec<std::int64_t>();
  };
  EXPECT_EQ(at(0, 10, kMax), std::vector<std::int64_t>{0});
  EXPECT_EQ(at(5, 0, kMin), std::vector<std::int64_t>{5});
  EXPECT_EQ(at(kMin, kMax, k2to62), (std::vector<std::int64_t>{kMin, -k2to62, 0, k2to62}));
  EXPECT_EQ(at(kMax, kMin, -k2to62),
            (std::vector<std::int64_t>{kMax, kMax - k2to62, kMax - k2to62 - k2to62,
                                       kMax - k2to62 - k2to62 - k2to62}));
  EXPECT_EQ(at(kMax - 2, kMax, 1), (std::vector<std::int64_t>{kMax - 2, kMax - 1}));
  EXPECT_EQ(at(3, 3, 1), std::vector<std::int64_t>{});
  EXPECT_EQ(at(3, 5, -1), std::vector<std::int64_t>{});
  expect_error<InvalidArgument>([&] { (void)at(0, 1, 0); }, "arange", {"step"});
  // 2^63 values cannot be allocated.
  expect_error<OutOfMemory>([&] { (void)at(kMin, kMax, 1); }, "arange");
}

TEST(CheckedShapes, SliceStepsAtTheExtremesVisitOneElement) {
  auto t = values({1, 2, 3, 4});
  EXPECT_EQ(read(t.slice({Slice(0, std::nullopt, kMax)})), std::vector<float>{1});
  // A negative step walks backwards from the last element of the range.
  EXPECT_EQ(read(t.slice({Slice(0, std::nullopt, kMin)})), std::vector<float>{4});
  EXPECT_EQ(read(t.slice({Slice(1, 3, kMin + 1)})), std::vector<float>{3});
  EXPECT_EQ(read(t.slice({Slice(kMin, kMax, 3)})), (std::vector<float>{1, 4}));
  EXPECT_EQ(read(t.slice({Slice::index(kMax)})), std::vector<float>{});
  EXPECT_EQ(read(t.slice({Slice::index(-1)})), std::vector<float>{4});
  // Steps against a float64 model of the rule, over every start, end and step in a window.
  for (std::int64_t start = -6; start <= 6; ++start) {
    for (std::int64_t end = -6; end <= 6; ++end) {
      for (std::int64_t step : {kMin, std::int64_t{-3}, std::int64_t{-1}, std::int64_t{2}, kMax}) {
        std::vector<float> expected;
        const double n = 4;
        const double s = std::clamp<double>(start < 0 ? start + n : start, 0, n);
        const double e = std::clamp<double>(end < 0 ? end + n : end, 0, n);
        if (step > 0) {
          for (double i = s; i < e; i += static_cast<double>(step))
            expected.push_back(float(i + 1));
        } else {
          for (double i = e - 1; i >= s; i += static_cast<double>(step))
            expected.push_back(float(i + 1));
        }
        EXPECT_EQ(read(t.slice({Slice(start, end, step)})), expected)
            << start << ":" << end << ":" << step;
      }
    }
  }
}

TEST(CheckedShapes, UnfoldAndSplitWithHugeStepsAndSizes) {
  auto t = values({1, 2, 3, 4});
  auto windows = t.unfold(0, 2, kMax);  // one window, the step never taken
  EXPECT_EQ(windows.shape(), (Shape{1, 2}));
  EXPECT_EQ(windows.into_data().to_vec<float>(), (std::vector<float>{1, 2}));
  auto parts = t.split(kMax, 0);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(read(parts[0]), (std::vector<float>{1, 2, 3, 4}));
  auto chunks = t.chunk(kMax, 0);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(read(chunks[3]), std::vector<float>{4});
  expect_error<InvalidArgument>(
      [&] {
        (void)t.split_with_sizes({kMax, 2, -kMax + 2}, 0);
      },
      "split_sizes");
  expect_error<InvalidArgument>(
      [&] {
        (void)t.split_with_sizes({kMax, kMax}, 0);
      },
      "split_sizes", {"overflows"});
}

// The fuzzer's finding: overlapping windows of a 2^48-element view have twice its elements.
TEST(CheckedShapes, UnfoldWindowsStayInsideTheElementLimit) {
  auto wide = Tensor<1>::ones({1}, kCpu).expand<1>(Shape{std::int64_t{1} << 48});
  expect_error<InvalidArgument>([&] { (void)wide.unfold(0, 2, 1); }, "unfold", {"2^48"});
  // Windows that do not overlap keep the count.
  EXPECT_EQ(wide.unfold(0, 2, 2).shape(), (Shape{std::int64_t{1} << 47, 2}));
}

TEST(CheckedShapes, SliceAssignWithExtremeStepsWritesOneElement) {
  // Found by shape_ops_fuzz: the assignment's window multiplied the stride by the step even
  // where the step is never taken (signed overflow for a step of INT64_MIN).
  auto t = values({1, 2, 3, 4});
  EXPECT_EQ(read(t.slice_assign({Slice(0, std::nullopt, kMin)}, values({9}))),
            (std::vector<float>{1, 2, 3, 9}));
  EXPECT_EQ(read(t.slice_assign({Slice(1, std::nullopt, kMax)}, values({9}))),
            (std::vector<float>{1, 9, 3, 4}));
  EXPECT_EQ(read(t.slice_fill({Slice(kMin, kMax, kMax)}, 0)), (std::vector<float>{0, 2, 3, 4}));
  EXPECT_EQ(read(t), (std::vector<float>{1, 2, 3, 4}));  // the input is untouched
}

TEST(CheckedShapes, SplittingIntoMorePartsThanMemoryHoldsIsOutOfMemory) {
  auto wide = Tensor<1>::ones({1}, kCpu).expand<1>(Shape{std::int64_t{1} << 46});
  expect_error<OutOfMemory>([&] { (void)wide.split(1, 0); }, "split", {"parts"});
  EXPECT_EQ(wide.split(std::int64_t{1} << 44, 0).size(), 4u);
}

TEST(CheckedShapes, RepeatPastInt64IsOutOfMemory) {
  auto t = Tensor<2>::ones({2, 3}, kCpu);
  expect_error<OutOfMemory>([&] { (void)t.repeat({kMax, 1}); }, "repeat");
  expect_error<OutOfMemory>([&] { (void)t.repeat({k2to32, k2to32}); }, "repeat");
  expect_error<OutOfMemory>([&] { (void)t.repeat_dim(1, kMax); }, "repeat_dim");
  EXPECT_EQ(t.repeat({2, 0}).shape(), (Shape{4, 0}));
}

TEST(CheckedShapes, SpatialOutputSizesPastTheLimitAreRefused) {
  auto image = Tensor<4>::ones({1, 1, 2, 2}, kCpu);
  expect_error<InvalidArgument>(
      [&] {
        (void)module::interpolate(image, {k2to32, k2to32});
      },
      "interpolate", {"4294967296"});
  expect_error<InvalidArgument>(
      [&] {
        (void)module::adaptive_avg_pool2d(image, {k2to32, k2to32});
      },
      "adaptive_avg_pool");
  // Options as large as int64 allows: refused by value, never wrapped into a "fitting" size.
  auto filters = Tensor<4>::ones({1, 1, 1, 1}, kCpu);
  expect_error<InvalidArgument>(
      [&] {
        (void)module::conv2d(image, filters, std::nullopt, {.padding = {kMax, 0}});
      },
      "conv", {"padding"});
  expect_error<InvalidArgument>(
      [&] {
        (void)module::conv2d(image, filters, std::nullopt, {.stride = {kMax, 1}});
      },
      "conv", {"stride"});
  expect_error<InvalidArgument>(
      [&] {
        (void)module::conv2d(image, filters, std::nullopt, {.dilation = {k2to62, 1}});
      },
      "conv", {"dilation"});
  expect_error<InvalidArgument>(
      [&] {
        (void)module::max_pool2d(image, {.kernel_size = {2, 2}, .stride = {kMax, 1}});
      },
      "max_pool", {"stride"});
  // A stride larger than the input is legal (one window) and exact.
  auto pooled = module::max_pool2d(image, {.kernel_size = {2, 2}, .stride = {1 << 20, 1 << 20}});
  EXPECT_EQ(pooled.shape(), (Shape{1, 1, 1, 1}));
}

TEST(CheckedShapes, AnEmptyBatchTakesAnyOutputSizeWithoutAllocating) {
  // Found by shape_ops_fuzz: window tables sized by the output extent were built before the
  // (empty) output, 64 GiB of them for an output size of 2^32.
  auto empty = Tensor<4>::ones({0, 3, 2, 2}, kCpu);
  const std::int64_t big = k2to32;
  EXPECT_EQ(module::adaptive_avg_pool2d(empty, {big, 1}).shape(), (Shape{0, 3, big, 1}));
  EXPECT_EQ(module::interpolate(empty, {1, big}).shape(), (Shape{0, 3, 1, big}));
  EXPECT_EQ(module::interpolate(empty, {big, 1}, {.mode = InterpolateMode::Bilinear}).shape(),
            (Shape{0, 3, big, 1}));
}

TEST(CheckedShapes, IntoScalarNeedsExactlyOneElement) {
  expect_error<InvalidArgument>([] { (void)Tensor<1>::zeros({0}, kCpu).into_scalar<double>(); },
                                "into_scalar", {"[0]", "0 elements"});
  expect_error<InvalidArgument>(
      [] {
        (void)values({1, 2, 3, 4}).into_scalar<double>();
      },
      "into_scalar", {"[4]", "4 elements"});
  // Exact for 64-bit integers that a double cannot hold.
  auto big = Tensor<1, Int>::full({1}, kMax - 1, kCpu);
  EXPECT_EQ((big.into_scalar<std::int64_t>()), kMax - 1);
  EXPECT_EQ(Tensor<2>::full({1, 1}, 2.5, kCpu).into_scalar<float>(), 2.5f);
  EXPECT_TRUE((Tensor<1, Bool>::full({1}, true, kCpu).into_scalar<bool>()));
  // Float to integer truncates and saturates, as cast does.
  EXPECT_EQ(Tensor<1>::full({1}, -2.75, kCpu).into_scalar<int>(), -2);
  EXPECT_EQ(Tensor<1>::full({1}, 1e30, kCpu).into_scalar<std::int32_t>(),
            std::numeric_limits<std::int32_t>::max());
}

TEST(CheckedShapes, HostDataWithAWrappingShapeIsRefused) {
  expect_error<InvalidArgument>(
      [] {
        (void)TensorData::from_vec(std::vector<float>{}, {k2to32, k2to32});
      },
      "TensorData::from_vec");
  expect_error<OutOfMemory>(
      [] {
        (void)TensorData(std::vector<std::byte>{}, Shape{k2to32, k2to32, 0}, DType::F32);
      },
      "TensorData");
  expect_error<InvalidArgument>(
      [] {
        (void)TensorData::full({k2to32, k2to32}, 1.0, DType::F32);
      },
      "TensorData::full");
}

TEST(CheckedShapes, ScalarConversionsSaturate) {
  EXPECT_EQ(Scalar(1e30).to_int(), kMax);
  EXPECT_EQ(Scalar(-1e30).to_int(), kMin);
  EXPECT_EQ(Scalar(std::numeric_limits<double>::quiet_NaN()).to_int(), 0);
  EXPECT_EQ(Scalar(1e10).as<std::int32_t>(), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(Scalar(-1e10).as<std::int16_t>(), std::numeric_limits<std::int16_t>::min());
  EXPECT_EQ(Scalar(-7.9).as<std::int8_t>(), -7);
  // Between the maximum and twice it (the remote frame fuzzer's 2^63 went through a cast).
  EXPECT_EQ(Scalar(9223372036854775808.0).as<std::int64_t>(), kMax);
  EXPECT_EQ(Scalar(1.5e19).as<std::int64_t>(), kMax);
  EXPECT_EQ(Scalar(3e9).as<std::int32_t>(), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(Scalar(200.0).as<std::int8_t>(), 127);
  EXPECT_EQ(Scalar(-9223372036854775808.0).as<std::int64_t>(), kMin);
}

}  // namespace
}  // namespace kiln

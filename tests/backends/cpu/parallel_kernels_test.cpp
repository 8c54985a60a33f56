// Every parallel region of the CPU backend on inputs large enough to be split over threads
// (src/backends/cpu/parallel.h: a loop stays on one thread below its grain). Each op runs once
// on one OpenMP thread and once on four, and the results must agree: exactly where every output
// element is computed by one thread whatever the split, within rounding where the split changes
// how a product is blocked. What each op computes is checked against float64 references by the
// conformance table (tests/conformance); this test checks what splitting adds, with the normal
// grain, where the rest of the suite's small tensors stay on one thread. The sizes come from each
// kernel's grain, and were checked once with an OpenMP tool that logged the call site of every
// region that forked: with the rest of the suite, every parallel region of the backend forks.
// (The ThreadSanitizer build, ./run tsan, lowers the grain so that the whole suite runs threaded.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "contract/backend.h"
#include "runtime/registry.h"
#include "support/spread.h"

namespace kiln::parallel_kernels_test {
namespace {

constexpr int kThreads = 4;  // four, so that sorts merge more than one pair of runs at once

Backend& cpu() { return backend_for(Device::cpu()); }

// n deterministic values in [lo, hi).
std::vector<double> spread(std::int64_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return test::spread(n, seed, lo, hi);
}

Primitive floats(const Shape& shape, std::uint32_t seed, DType dtype = DType::F32) {
  return detail::from_data(
      TensorData::from_vec(spread(shape.num_elements(), seed), shape).convert(dtype), Device::cpu(),
      Kind::Float, shape.rank());
}

// Integers in [0, bound).
Primitive indices(const Shape& shape, std::int64_t bound, std::uint32_t seed,
                  DType dtype = DType::I64) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(shape.num_elements()));
  const std::vector<double> u = spread(shape.num_elements(), seed, 0.0, 1.0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = std::min(bound - 1, static_cast<std::int64_t>(u[i] * static_cast<double>(bound)));
  }
  return detail::from_data(TensorData::from_vec(values, shape).convert(dtype), Device::cpu(),
                           Kind::Int, shape.rank());
}

class CpuParallelKernels : public ::testing::Test {
 protected:
  void SetUp() override { saved_threads_ = omp_get_max_threads(); }
  void TearDown() override { omp_set_num_threads(saved_threads_); }

  // make() on one thread and on kThreads: the same shapes, and values equal within
  // tolerance * max(1, |one thread's value|) (0: bit for bit).
  void expect_split_matches_one_thread(const std::string& what,
                                       const std::function<std::vector<Primitive>()>& make,
                                       double tolerance = 0.0) {
    omp_set_num_threads(1);
    const std::vector<Primitive> one = make();
    omp_set_num_threads(kThreads);
    const std::vector<Primitive> split = make();
    ASSERT_EQ(one.size(), split.size()) << what;
    for (std::size_t r = 0; r < one.size(); ++r) {
      ASSERT_EQ(one[r]->shape(), split[r]->shape()) << what << " result " << r;
      const std::vector<double> a = detail::into_data(one[r]).to_f64_vec();
      const std::vector<double> b = detail::into_data(split[r]).to_f64_vec();
      ASSERT_FALSE(a.empty()) << what;
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const bool same = tolerance == 0.0
                              ? (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))
                              : std::abs(a[i] - b[i]) <= tolerance * std::max(1.0, std::abs(a[i]));
        if (!same && mismatches++ == 0) {
          ADD_FAILURE() << what << " result " << r << " [" << i << "]: one thread " << a[i] << ", "
                        << kThreads << " threads " << b[i];
        }
      }
      EXPECT_EQ(mismatches, 0u) << what << " result " << r;
    }
  }

 private:
  int saved_threads_ = 1;
};

TEST_F(CpuParallelKernels, SoftmaxAlongAnOuterDim) {
  const Primitive x = floats({64, 4096}, 1);
  expect_split_matches_one_thread("softmax dim 0",
                                  [&] { return std::vector{cpu().softmax(x, 0)}; });
}

TEST_F(CpuParallelKernels, SoftmaxStreamedPastTheCachesEqualsFloat64) {
  // An output past kStreamOutputBytes (32 MiB) is streamed past the caches, each row scaled on
  // its way out while the next row's lines are fetched; rows of 4100 floats start anywhere
  // within a line.
  const Shape shape{2050, 4100};
  const Primitive x = floats(shape, 2);
  expect_split_matches_one_thread("softmax streamed",
                                  [&] { return std::vector{cpu().softmax(x, 1)}; });
  const std::vector<double> in = detail::into_data(x).to_f64_vec();
  const std::vector<double> got = detail::into_data(cpu().softmax(x, 1)).to_f64_vec();
  for (std::int64_t row = 0; row < shape[0]; ++row) {
    const double* a = in.data() + row * shape[1];
    double top = a[0], sum = 0;
    for (std::int64_t k = 0; k < shape[1]; ++k) top = std::max(top, a[k]);
    for (std::int64_t k = 0; k < shape[1]; ++k) sum += std::exp(a[k] - top);
    for (std::int64_t k = 0; k < shape[1]; ++k) {
      const double want = std::exp(a[k] - top) / sum;
      ASSERT_NEAR(got[row * shape[1] + k], want, 2e-6 * want) << row << ", " << k;
    }
  }
}

TEST_F(CpuParallelKernels, AttentionWithLongRows) {
  // Rows of 512 keys by 128: too much work per row to run blocks of rows side by side, so the
  // softmax over each block's rows is the parallel part.
  const Primitive q = floats({1, 1, 256, 128}, 2), k = floats({1, 1, 512, 128}, 3);
  const Primitive v = floats({1, 1, 512, 16}, 4);
  expect_split_matches_one_thread(
      "attention",
      [&] {
        return std::vector{cpu().attention(q, k, v, std::nullopt, std::nullopt, std::nullopt, {})};
      },
      1e-5);
}

TEST_F(CpuParallelKernels, ConvTransposeBiasAndConvBiasGradient) {
  const Primitive x = floats({2, 4, 64, 64}, 5), w = floats({4, 16, 3, 3}, 6);
  const Primitive bias = floats({16}, 7);
  expect_split_matches_one_thread(
      "conv_transpose with bias",
      [&] {
        return std::vector{cpu().conv_transpose(x, w, bias, {.padding = {1, 1}})};
      },
      1e-5);
  const Primitive dy = floats({2, 64, 32, 32}, 8);
  expect_split_matches_one_thread("conv_bias_backward",
                                  [&] { return std::vector{cpu().conv_bias_backward(dy)}; });
}

TEST_F(CpuParallelKernels, EmbeddingAndItsGradient) {
  const Primitive weights = floats({1000, 64}, 9);
  const Primitive ids = indices({4096}, 1000, 10);  // many repeats: rows gather several grads
  expect_split_matches_one_thread("embedding",
                                  [&] { return std::vector{cpu().embedding(weights, ids)}; });
  const Primitive dy = floats({4096, 64}, 11);
  expect_split_matches_one_thread("embedding_backward", [&] {
    return std::vector{cpu().embedding_backward(weights, dy, ids)};
  });
}

TEST_F(CpuParallelKernels, UnfoldAndFoldPatches) {
  const UnfoldOptions options{.kernel_size = {3, 3}, .padding = {1, 1}};
  const Primitive x = floats({1, 8, 64, 64}, 12);
  expect_split_matches_one_thread("unfold_patches",
                                  [&] { return std::vector{cpu().unfold_patches(x, options)}; });
  const Primitive columns = floats({1, 8 * 9, 64 * 64}, 13);
  expect_split_matches_one_thread("fold_patches", [&] {
    return std::vector{cpu().fold_patches(columns, {64, 64}, options)};
  });
}

TEST_F(CpuParallelKernels, GatherAndScatterNd) {
  // 40,000 index rows of 2 into [200, 300, 4]: the row offsets are computed in parallel, and
  // scatter_nd splits the 4 positions of each row (duplicate rows add up in row order).
  const Primitive x = floats({200, 300, 4}, 14);
  std::vector<std::int64_t> rows(40000 * 2);
  const std::vector<double> u = spread(40000 * 2, 15, 0.0, 1.0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i] = static_cast<std::int64_t>(u[i] * (i % 2 == 0 ? 200.0 : 300.0));
  }
  const Primitive at =
      detail::from_data(TensorData::from_vec(rows, {40000, 2}), Device::cpu(), Kind::Int, 2);
  expect_split_matches_one_thread("gather_nd", [&] { return std::vector{cpu().gather_nd(x, at)}; });
  const Primitive values = floats({40000, 4}, 16);
  expect_split_matches_one_thread("scatter_nd add", [&] {
    return std::vector{cpu().scatter_nd(x, at, values, IndexingUpdate::Add)};
  });
}

TEST_F(CpuParallelKernels, InterpolateAndItsGradient) {
  const Primitive x = floats({2, 16, 32, 32}, 17);
  const Primitive dy = floats({2, 16, 64, 64}, 18);
  for (InterpolateMode mode :
       {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
    const InterpolateOptions options{.mode = mode};
    const std::string name = "interpolate mode " + std::to_string(static_cast<int>(mode));
    expect_split_matches_one_thread(name, [&] {
      return std::vector{cpu().interpolate(x, {64, 64}, options)};
    });
    expect_split_matches_one_thread(name + " backward", [&] {
      return std::vector{cpu().interpolate_backward(x, dy, {64, 64}, options)};
    });
  }
}

TEST_F(CpuParallelKernels, LinearAndMatmuls) {
  const Primitive x = floats({4096, 32}, 19), w = floats({32, 64}, 20), b = floats({64}, 21);
  expect_split_matches_one_thread(
      "linear with bias", [&] { return std::vector{cpu().linear(x, w, b)}; }, 1e-5);
  // A batch of small products: one product per thread at a time.
  const Primitive l = floats({64, 16, 16}, 22), r = floats({64, 16, 16}, 23);
  expect_split_matches_one_thread("batched matmul",
                                  [&] { return std::vector{cpu().matmul(l, r)}; });
  // Larger products, at least one per thread (attention's heads): one product per thread, each
  // whole, rather than each split over the threads in turn.
  const Primitive lb = floats({8, 96, 80}, 29), rb = floats({8, 80, 96}, 30);
  expect_split_matches_one_thread("batched larger matmul",
                                  [&] { return std::vector{cpu().matmul(lb, rb)}; });
  // Integer products are kiln's own kernel, split by blocks of rows.
  const Primitive li = indices({4, 64, 64}, 100, 24, DType::I32);
  const Primitive ri = indices({4, 64, 64}, 100, 25, DType::I32);
  expect_split_matches_one_thread("int matmul", [&] { return std::vector{cpu().matmul(li, ri)}; });
}

TEST_F(CpuParallelKernels, LayerAndBatchNorm) {
  const Primitive x = floats({1024, 256}, 26), gamma = floats({256}, 27), beta = floats({256}, 28);
  expect_split_matches_one_thread(
      "layer_norm", [&] { return std::vector{cpu().layer_norm(x, gamma, beta, 1e-5)}; });
  const Primitive images = floats({4, 32, 32, 32}, 29);
  const Primitive g = floats({32}, 30), bt = floats({32}, 31), mean = floats({32}, 32);
  const Primitive variance = detail::from_data(TensorData::from_vec(spread(32, 33, 0.5, 2.0), {32}),
                                               Device::cpu(), Kind::Float, 1);
  expect_split_matches_one_thread("batch_norm", [&] {
    return std::vector{cpu().batch_norm(images, g, bt, mean, variance, 1e-5)};
  });
}

TEST_F(CpuParallelKernels, PoolsAndTheirGradients) {
  const Primitive x = floats({4, 32, 64, 64}, 34);
  const PoolOptions options{.kernel_size = {2, 2}, .stride = {2, 2}};
  const Primitive dy = floats({4, 32, 32, 32}, 35);
  expect_split_matches_one_thread("max_pool_with_indices and backward", [&] {
    auto [values, where] = cpu().max_pool_with_indices(x, options, DType::I64);
    Primitive dx = cpu().max_pool_with_indices_backward(x, dy, where, options);
    return std::vector{values, where, dx};
  });
  expect_split_matches_one_thread("avg_pool and backward", [&] {
    return std::vector{cpu().avg_pool(x, options), cpu().avg_pool_backward(x, dy, options)};
  });
  expect_split_matches_one_thread("adaptive_avg_pool and backward", [&] {
    const Primitive dz = floats({4, 32, 7, 5}, 36);
    return std::vector{cpu().adaptive_avg_pool(x, {7, 5}), cpu().adaptive_avg_pool_backward(x, dz)};
  });
}

TEST_F(CpuParallelKernels, LongStableSortMergesRunsOnSeveralThreads) {
  // One slice of 2^18: sorted in four runs on four threads, then merged two pairs at a time.
  // Few distinct values, so stability (equal values keep their order) is visible in the indices.
  std::vector<double> values = spread(std::int64_t{1} << 18, 37, 0.0, 1.0);
  for (double& v : values) v = std::floor(v * 50.0);
  const Primitive x =
      detail::from_data(TensorData::from_vec(values, {1, 1 << 18}), Device::cpu(), Kind::Float, 2);
  expect_split_matches_one_thread("sort_with_indices", [&] {
    auto [sorted, order] = cpu().sort_with_indices(x, 1, false, DType::I64);
    return std::vector{sorted, order};
  });
}

TEST_F(CpuParallelKernels, CatOfFewLargeInputsCopiesInParallel) {
  // Fewer inputs than threads: each contiguous copy is itself split.
  const Primitive a = floats({256, 1024}, 38), b = floats({300, 1024}, 39);
  expect_split_matches_one_thread("cat dim 0", [&] { return std::vector{cpu().cat({a, b}, 0)}; });
}

}  // namespace
}  // namespace kiln::parallel_kernels_test

// kiln_cuda_lib matmul against float64 loops: every dtype, transposed and padded views, batch
// broadcast, column-major C, every epilogue, k = 0, unaligned pointers, and unsupported layouts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/lib/matmul.h"
#include "gpu_test_util.h"
#include "kiln/half.h"
#include "own_autotune_cache.h"
#include "runtime/autotune.h"

namespace kiln::cuda::lib {
namespace {

using gpu_test::as_double;
using gpu_test::DeviceBuffer;

// Elements a strided operand spans.
std::int64_t span(std::int64_t r, std::int64_t c, const MatrixStrides& s, std::int64_t batch) {
  if (r == 0 || c == 0 || batch == 0) return 1;
  return (batch - 1) * s.batch_stride + (r - 1) * s.row_stride + (c - 1) * s.col_stride + 1;
}

double activate(double x, Epilogue e) {
  switch (e) {
    case Epilogue::Relu:
    case Epilogue::BiasRelu:
      return x < 0 ? 0 : x;
    case Epilogue::Gelu:
    case Epilogue::BiasGelu:
      return x * 0.5 * std::erfc(-x / std::sqrt(2.0));
    case Epilogue::GeluTanh:
    case Epilogue::BiasGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default:
      return x;
  }
}
bool with_bias(Epilogue e) {
  return e == Epilogue::Bias || e == Epilogue::BiasRelu || e == Epilogue::BiasGelu ||
         e == Epilogue::BiasGeluTanh;
}

template <class T>
double tolerance(const MatmulDesc& d) {
  if (std::is_same_v<T, double>) return 1e-12;
  if (std::is_same_v<T, float>) return d.compute == MatmulCompute::Tf32 ? 3e-3 : 1e-5;
  if (std::is_same_v<T, half>) return 3e-3;
  return 1.5e-2;  // bf16
}

// alpha · A·B + beta · addend: the addend random, in C's layout, in C itself or apart.
struct Sum {
  double alpha = 1.0;
  double beta = 0.0;
  bool addend = false;
  bool in_place = false;
};

// Runs d on random operands (offset by `misalign` elements from the allocation) and compares
// ||C - ref|| / ||ref|| over the m×n matrices with the float64 product.
template <class T>
void check_matmul(const MatmulDesc& d, std::uint64_t seed, std::int64_t misalign = 0,
                  const Sum& sum = {}) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(d.dtype) << " m " << d.m << " n " << d.n << " k " << d.k << " batch "
               << d.batch << " A " << d.a.row_stride << "," << d.a.col_stride << ","
               << d.a.batch_stride << " B " << d.b.row_stride << "," << d.b.col_stride << ","
               << d.b.batch_stride << " C " << d.c.row_stride << "," << d.c.col_stride << ","
               << d.c.batch_stride << " epilogue " << static_cast<int>(d.epilogue) << " tf32 "
               << (d.compute == MatmulCompute::Tf32) << " misalign " << misalign);
  std::string why;
  ASSERT_TRUE(matmul_supported(d, &why)) << why;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto fill = [&](std::int64_t count) {
    std::vector<T> v(static_cast<std::size_t>(count + misalign));
    for (auto& x : v) x = static_cast<T>(uniform(rng));
    return v;
  };
  const auto a = fill(span(d.m, d.k, d.a, d.batch));
  const auto b = fill(span(d.k, d.n, d.b, d.batch));
  const auto bias = fill(d.n);
  const std::int64_t c_span = span(d.m, d.n, d.c, d.batch) + misalign;
  const auto c0 = fill(c_span - misalign);
  DeviceBuffer da(a), db(b), dbias(bias), dadd(c0);
  DeviceBuffer dc = sum.in_place ? DeviceBuffer(c0) : DeviceBuffer(c_span * sizeof(T));
  const auto offset = [&](const DeviceBuffer& buf) {
    return static_cast<void*>(static_cast<T*>(buf.get()) + misalign);
  };
  MatmulArgs args{offset(da), offset(db), offset(dc),
                  with_bias(d.epilogue) ? offset(dbias) : nullptr};
  args.alpha = sum.alpha;
  if (sum.addend) {
    args.addend = sum.in_place ? offset(dc) : offset(dadd);
    args.beta = sum.beta;
  }
  matmul(d, args, nullptr);
  KILN_CUDA_CHECK("test", cudaDeviceSynchronize());
  const auto c = dc.read<T>(static_cast<std::size_t>(c_span));

  double diff = 0, norm = 0;
  for (std::int64_t p = 0; p < d.batch; ++p) {
    for (std::int64_t i = 0; i < d.m; ++i) {
      for (std::int64_t j = 0; j < d.n; ++j) {
        double acc = 0;
        for (std::int64_t l = 0; l < d.k; ++l) {
          acc += as_double(
                     a[misalign + p * d.a.batch_stride + i * d.a.row_stride + l * d.a.col_stride]) *
                 as_double(
                     b[misalign + p * d.b.batch_stride + l * d.b.row_stride + j * d.b.col_stride]);
        }
        if (with_bias(d.epilogue)) acc += as_double(bias[misalign + j]);
        double expected = activate(acc, d.epilogue) * sum.alpha;
        if (sum.addend) {
          expected +=
              sum.beta *
              as_double(
                  c0[misalign + p * d.c.batch_stride + i * d.c.row_stride + j * d.c.col_stride]);
        }
        const double got =
            as_double(c[misalign + p * d.c.batch_stride + i * d.c.row_stride + j * d.c.col_stride]);
        ASSERT_FALSE(std::isnan(got)) << "C[" << p << ", " << i << ", " << j << "] is NaN";
        diff += (got - expected) * (got - expected);
        norm += expected * expected;
      }
    }
  }
  const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  EXPECT_LE(relative, tolerance<T>(d));
}

MatrixStrides row_major(std::int64_t rows, std::int64_t cols, std::int64_t batch_stride = -1) {
  return {cols, 1, batch_stride < 0 ? rows * cols : batch_stride};
}
MatrixStrides col_major(std::int64_t rows, std::int64_t cols, std::int64_t batch_stride = -1) {
  return {1, rows, batch_stride < 0 ? rows * cols : batch_stride};
}

TEST(LibMatmul, TransposedViewsEveryDType) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  const std::int64_t m = 67, n = 45, k = 33;
  gpu_test::for_each_float_dtype([&]<class T>(DType dtype, T) {
    for (bool a_t : {false, true}) {
      for (bool b_t : {false, true}) {
        MatmulDesc d{dtype,
                     m,
                     n,
                     k,
                     1,
                     a_t ? col_major(m, k) : row_major(m, k),
                     b_t ? col_major(k, n) : row_major(k, n),
                     row_major(m, n)};
        check_matmul<T>(d, seed++);
      }
    }
  });
}

TEST(LibMatmul, Tf32IsOptIn) {
  KILN_REQUIRE_GPU();
  MatmulDesc d{DType::F32,
               128,
               96,
               200,
               1,
               row_major(128, 200),
               row_major(200, 96),
               row_major(128, 96),
               MatmulCompute::Tf32};
  check_matmul<float>(d, 3);
}

TEST(LibMatmul, BatchesBroadcastPaddingAndColumnMajorC) {
  KILN_REQUIRE_GPU();
  gpu_test::for_each_float_dtype([&]<class T>(DType dtype, T) {
    // A shared by every batch (stride 0), B batched, padded rows in A.
    check_matmul<T>({dtype, 19, 23, 31, 3, {31 + 5, 1, 0}, row_major(31, 23), row_major(19, 23)},
                    5);
    // B broadcast and transposed, C column-major.
    check_matmul<T>({dtype, 19, 23, 31, 4, row_major(19, 31), {1, 31, 0}, col_major(19, 23)}, 6);
    // Vectors: m = 1 and n = 1.
    check_matmul<T>({dtype, 1, 40, 17, 2, row_major(1, 17), row_major(17, 40), row_major(1, 40)},
                    7);
    check_matmul<T>({dtype, 40, 1, 17, 2, row_major(40, 17), row_major(17, 1), row_major(40, 1)},
                    8);
  });
}

TEST(LibMatmul, EveryEpilogue) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 50;
  for (Epilogue e :
       {Epilogue::None, Epilogue::Bias, Epilogue::Relu, Epilogue::BiasRelu, Epilogue::Gelu,
        Epilogue::BiasGelu, Epilogue::GeluTanh, Epilogue::BiasGeluTanh}) {
    gpu_test::for_each_float_dtype([&]<class T>(DType dtype, T) {
      MatmulDesc d{
          dtype, 64, 48, 40, 2, row_major(64, 40), col_major(40, 48, 0), row_major(64, 48)};
      d.epilogue = e;
      check_matmul<T>(d, seed++);
    });
  }
}

// C = alpha · A·B + beta · addend, in place (addend is C) and apart, with row- and column-major
// C (cuBLASLt's swapped and direct problems), batches, every dtype; refused with an epilogue.
TEST(LibMatmul, ScaledProductPlusAnAddend) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 70;
  for (const Sum& sum : {Sum{-0.25, 1, true, true}, Sum{2, -1, true, false},
                         Sum{0.5, 0, false, false}, Sum{1, 0.75, true, true}}) {
    gpu_test::for_each_float_dtype([&]<class T>(DType dtype, T) {
      check_matmul<T>(
          {dtype, 64, 48, 40, 2, row_major(64, 40), col_major(40, 48, 0), row_major(64, 48)},
          seed++, 0, sum);
      check_matmul<T>(
          {dtype, 33, 70, 17, 1, col_major(33, 17), row_major(17, 70), col_major(33, 70)}, seed++,
          1, sum);
    });
  }
  // In place on a plan's first call (the autotuner must not run an in-place product twice).
  check_matmul<float>(
      {DType::F32, 200, 300, 500, 1, row_major(200, 500), row_major(500, 300), row_major(200, 300)},
      seed++, 0, Sum{-0.01, 1, true, true});
  // A long k over few outputs, where cuBLASLt splits k (its partial sums and the addend).
  check_matmul<float>(
      {DType::F32, 64, 64, 8192, 1, col_major(64, 8192), row_major(8192, 64), row_major(64, 64)},
      seed++, 0, Sum{-0.5, 1, true, true});
  DeviceBuffer a(std::vector<float>(16, 1.0f)), c(std::vector<float>(16, 1.0f));
  MatmulArgs args{a.get(), a.get(), c.get(), a.get()};
  args.addend = c.get();
  args.beta = 1;
  EXPECT_THROW(matmul({DType::F32, 4, 4, 4, 1, row_major(4, 4), row_major(4, 4), row_major(4, 4),
                       MatmulCompute::Default, Epilogue::Bias},
                      args, nullptr),
               InvalidArgument);
  EXPECT_THROW(matmul({DType::F32, 4, 4, 0, 1, row_major(4, 0), row_major(0, 4), row_major(4, 4)},
                      args, nullptr),
               InvalidArgument);
}

TEST(LibMatmul, UnalignedPointersAndOddSizes) {
  KILN_REQUIRE_GPU();
  check_matmul<half>(
      {DType::F16, 33, 17, 9, 1, row_major(33, 9), row_major(9, 17), row_major(33, 17)}, 9, 1);
  check_matmul<float>({DType::F32, 5, 3, 7, 1, row_major(5, 7), col_major(7, 3), row_major(5, 3),
                       MatmulCompute::Default, Epilogue::BiasRelu},
                      10, 3);
  check_matmul<bfloat16>(
      {DType::BF16, 257, 129, 65, 1, row_major(257, 65), row_major(65, 129), row_major(257, 129)},
      11, 2);
}

TEST(LibMatmul, EmptyAndZeroK) {
  KILN_REQUIRE_GPU();
  // k = 0: C = act(bias), written by the epilogue pass.
  check_matmul<float>({DType::F32, 6, 5, 0, 2, row_major(6, 0), row_major(0, 5), row_major(6, 5),
                       MatmulCompute::Default, Epilogue::BiasRelu},
                      12);
  check_matmul<float>({DType::F32, 6, 5, 0, 1, row_major(6, 0), row_major(0, 5), row_major(6, 5)},
                      13);
  // m = 0 or batch = 0: nothing to do, nothing touched.
  matmul({DType::F32, 0, 5, 4, 1, row_major(0, 4), row_major(4, 5), row_major(0, 5)},
         {nullptr, nullptr, nullptr, nullptr}, nullptr);
  matmul({DType::F32, 3, 5, 4, 0, row_major(3, 4), row_major(4, 5), row_major(3, 5)},
         {nullptr, nullptr, nullptr, nullptr}, nullptr);
}

TEST(LibMatmul, UnsupportedLayoutsAreReported) {
  // Host-side only: runs without a device.
  std::string why;
  // A with no unit stride: every other row and column.
  MatmulDesc strided{DType::F32, 8, 8, 8, 1, {32, 2, 0}, row_major(8, 8), row_major(8, 8)};
  EXPECT_FALSE(matmul_supported(strided, &why));
  EXPECT_NE(why.find("A"), std::string::npos) << why;
  EXPECT_THROW(matmul(strided, {}, nullptr), InvalidArgument);
  // A bias needs contiguous rows of C.
  MatmulDesc bias_col{DType::F32,
                      8,
                      8,
                      8,
                      1,
                      row_major(8, 8),
                      row_major(8, 8),
                      col_major(8, 8),
                      MatmulCompute::Default,
                      Epilogue::Bias};
  EXPECT_FALSE(matmul_supported(bias_col, &why));
  // C broadcast over the batch would race.
  MatmulDesc c_broadcast{DType::F32,        8, 8, 8, 2, row_major(8, 8), row_major(8, 8),
                         row_major(8, 8, 0)};
  EXPECT_FALSE(matmul_supported(c_broadcast, &why));
  // Wrong rather than unsupported.
  const MatrixStrides square = row_major(8, 8);
  EXPECT_THROW((void)matmul_supported({DType::I32, 8, 8, 8, 1, square, square, square}, &why),
               UnsupportedDType);
  EXPECT_THROW((void)matmul_supported({DType::F16, 8, 8, 8, 1, row_major(8, 8), row_major(8, 8),
                                       row_major(8, 8), MatmulCompute::Tf32}),
               InvalidArgument);
  EXPECT_THROW((void)matmul_supported({DType::F32, -1, 8, 8, 1, square, square, square}),
               InvalidArgument);
}

// Products with few output tiles over a long k, from an empty autotune cache: the autotuner times
// the heuristic's algorithms and their variants split over k (lt_autotune.h) and keeps the
// fastest, whichever it is; its result, and the same plan's again, against float64.
TEST(LibMatmul, LongSumsThroughTheAutotunersSplits) {
  KILN_REQUIRE_GPU();
  const test::OwnAutotuneCache cache("kiln_lib_matmul_autotune.tsv");
  std::uint64_t seed = 90;
  for (int round = 0; round < 2; ++round) {
    // A first layer's product at a small batch, with its bias and ReLU.
    check_matmul<float>({DType::F32, 128, 512, 784, 1, row_major(128, 784), row_major(784, 512),
                         row_major(128, 512), MatmulCompute::Default, Epilogue::BiasRelu},
                        seed++);
    // A weight's gradient: Aᵀ read through a view, the update summed into C in place.
    check_matmul<float>(
        {DType::F32, 96, 80, 6000, 1, col_major(96, 6000), row_major(6000, 80), row_major(96, 80)},
        seed++, 0, Sum{-0.5, 1, true, true});
    gpu_test::for_each_float_dtype([&]<class T>(DType dtype, T) {
      check_matmul<T>(
          {dtype, 32, 48, 3000, 2, row_major(32, 3000), col_major(3000, 48), row_major(32, 48)},
          seed++, 1);
    });
  }
  EXPECT_FALSE(autotune::entries().empty());
}

TEST(LibMatmul, PlansAreCached) {
  KILN_REQUIRE_GPU();
  MatmulDesc d{DType::F32, 32, 32, 32, 1, row_major(32, 32), row_major(32, 32), row_major(32, 32)};
  check_matmul<float>(d, 20);
  const std::size_t plans = matmul_plan_count();
  check_matmul<float>(d, 21);
  EXPECT_EQ(matmul_plan_count(), plans);
}

}  // namespace
}  // namespace kiln::cuda::lib

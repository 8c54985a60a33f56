// kiln_cuda_lib scan_rows against float64 loops with the CPU backend's semantics: float sums and
// products in double, integers wrapping, cummin/cummax keeping NaN.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/cuda/lib/scan.h"
#include "gpu_test_util.h"
#include "kiln/half.h"

namespace kiln::cuda::lib {
namespace {

using gpu_test::as_double;
using gpu_test::DeviceBuffer;

template <class T>
constexpr bool kFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
double epsilon() {
  if constexpr (std::is_same_v<T, half>) return 1.0 / 1024;
  if constexpr (std::is_same_v<T, bfloat16>) return 1.0 / 128;
  if constexpr (std::is_same_v<T, float>) return 1.0 / (1 << 23);
  return 1e-13;
}

template <class T>
std::vector<T> random_values(std::int64_t count, ScanOp op, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::uniform_real_distribution<float> near_one(0.95f, 1.05f);
  std::vector<T> v(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (kFloat<T>) {
      const float x = op == ScanOp::Prod ? near_one(rng) : uniform(rng);
      v[i] = static_cast<T>(x);
      // A sprinkling of specials in the extrema scans (sums stay finite to keep the check tight).
      if ((op == ScanOp::Min || op == ScanOp::Max) && rng() % 500 == 0) {
        v[i] = static_cast<T>(rng() % 2 ? std::numeric_limits<float>::quiet_NaN()
                                        : -std::numeric_limits<float>::infinity());
      }
    } else {
      std::uint64_t bits = rng();
      std::memcpy(&v[i], &bits, sizeof(T));
    }
  }
  return v;
}

// The CPU backend's loop (cpu_scan.cpp), in double / 64-bit integers.
template <class T>
std::vector<T> reference(const std::vector<T>& in, std::int64_t rows, std::int64_t n, ScanOp op) {
  std::vector<T> out(in.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    if constexpr (kFloat<T>) {
      double acc = op == ScanOp::Prod ? 1.0 : 0.0;
      compute_t<T> extremum = op == ScanOp::Max ? -std::numeric_limits<compute_t<T>>::infinity()
                                                : std::numeric_limits<compute_t<T>>::infinity();
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * n + j);
        const compute_t<T> x = static_cast<compute_t<T>>(in[i]);
        if (op == ScanOp::Sum || op == ScanOp::Prod) {
          acc = op == ScanOp::Sum ? acc + static_cast<double>(x) : acc * static_cast<double>(x);
          out[i] = static_cast<T>(static_cast<compute_t<T>>(acc));
        } else {
          if (extremum == extremum) {
            if (x != x || (op == ScanOp::Max ? x > extremum : x < extremum)) extremum = x;
          }
          out[i] = static_cast<T>(extremum);
        }
      }
    } else {
      std::uint64_t acc = op == ScanOp::Prod ? 1 : 0;
      T extremum =
          op == ScanOp::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * n + j);
        const std::uint64_t wide =
            std::is_signed_v<T> ? static_cast<std::uint64_t>(static_cast<std::int64_t>(in[i]))
                                : static_cast<std::uint64_t>(in[i]);
        if (op == ScanOp::Sum) acc += wide;
        if (op == ScanOp::Prod) acc *= wide;
        if (op == ScanOp::Max && in[i] > extremum) extremum = in[i];
        if (op == ScanOp::Min && in[i] < extremum) extremum = in[i];
        out[i] = (op == ScanOp::Sum || op == ScanOp::Prod) ? static_cast<T>(acc) : extremum;
      }
    }
  }
  return out;
}

template <class T>
void check_scan(DType dtype, std::int64_t rows, std::int64_t n, ScanOp op, std::uint64_t seed,
                bool in_place = false) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " rows " << rows << " n " << n << " op "
                                    << static_cast<int>(op) << (in_place ? " in place" : ""));
  const auto input = random_values<T>(rows * n, op, seed);
  const auto expected = reference(input, rows, n, op);
  ScanDesc desc{dtype, rows, n, op};
  DeviceBuffer in(input);
  DeviceBuffer out(input.size() * sizeof(T));
  const std::size_t bytes = scan_workspace_bytes(desc);
  DeviceBuffer workspace(bytes);
  void* target = in_place ? in.get() : out.get();
  scan_rows(desc, in.get(), target, workspace.get(), bytes, nullptr);
  KILN_CUDA_CHECK("test", cudaDeviceSynchronize());
  const auto got = (in_place ? in : out).template read<T>(input.size());
  int errors = 0;
  for (std::size_t i = 0; i < got.size() && errors < 5; ++i) {
    bool ok;
    if constexpr (kFloat<T>) {
      const double g = as_double(got[i]);
      const double e = as_double(expected[i]);
      if (std::isnan(e) || std::isinf(e)) {
        ok = std::isnan(e) ? std::isnan(g) : g == e;
      } else if (op == ScanOp::Min || op == ScanOp::Max) {
        ok = g == e;
      } else {
        // Double accumulation in another order: at most a rounding step of T apart.
        ok = std::abs(g - e) <= 2.01 * epsilon<T>() * std::abs(e) + 1e-9 ||
             (std::is_same_v<T, double> && std::abs(g - e) <= 1e-12 * (1.0 + std::abs(e)));
      }
    } else {
      ok = got[i] == expected[i];
    }
    if (!ok) {
      ADD_FAILURE() << "element " << i << ": got " << +as_double(got[i]) << ", expected "
                    << +as_double(expected[i]);
      ++errors;
    }
  }
}

TEST(LibScan, EveryDTypeEveryOp) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  gpu_test::for_each_numeric_dtype([&]<class T>(DType dtype, T) {
    for (ScanOp op : {ScanOp::Sum, ScanOp::Prod, ScanOp::Min, ScanOp::Max}) {
      check_scan<T>(dtype, 1, 1, op, seed++);
      check_scan<T>(dtype, 5, 1000, op, seed++);
      check_scan<T>(dtype, 3, 20011, op, seed++);  // several tiles per row
      check_scan<T>(dtype, 333, 17, op, seed++);
    }
  });
}

TEST(LibScan, LongRowsAndInPlace) {
  KILN_REQUIRE_GPU();
  check_scan<float>(DType::F32, 1, (1 << 20) + 3, ScanOp::Sum, 7);
  check_scan<float>(DType::F32, 2, 600001, ScanOp::Max, 8);
  check_scan<std::int32_t>(DType::I32, 1, 1 << 20, ScanOp::Sum, 9, true);
  check_scan<half>(DType::F16, 4, 70000, ScanOp::Sum, 10, true);
}

TEST(LibScan, ManyTilesPerRowAndManyRows) {
  KILN_REQUIRE_GPU();
  // Long rows of many tiles (chunks of two or three tiles in cuda-lib-next).
  check_scan<float>(DType::F32, 1, 3000007, ScanOp::Sum, 20);
  check_scan<double>(DType::F64, 1, 3000007, ScanOp::Max, 21);
  // Two rows, in place.
  check_scan<std::int32_t>(DType::I32, 2, 2500001, ScanOp::Sum, 22, true);
  // Many rows of a few tiles each.
  check_scan<float>(DType::F32, 5000, 5000, ScanOp::Max, 23);
  check_scan<bfloat16>(DType::BF16, 3000, 9000, ScanOp::Sum, 24);
  check_scan<std::uint8_t>(DType::U8, 700, 10000, ScanOp::Prod, 25);
}

TEST(LibScan, EmptyShapes) {
  KILN_REQUIRE_GPU();
  for (std::int64_t rows : {0, 3}) {
    ScanDesc desc{DType::F32, rows, rows == 0 ? 7 : 0, ScanOp::Sum};
    EXPECT_EQ(scan_workspace_bytes(desc), 0u);
    scan_rows(desc, nullptr, nullptr, nullptr, 0, nullptr);
  }
}

TEST(LibScan, BadDescriptionsAreRejected) {
  EXPECT_THROW(validate(ScanDesc{DType::F32, -1, 3, ScanOp::Sum}), InvalidArgument);
  EXPECT_THROW(validate(ScanDesc{DType::Bool, 1, 3, ScanOp::Sum}), UnsupportedDType);
}

}  // namespace
}  // namespace kiln::cuda::lib

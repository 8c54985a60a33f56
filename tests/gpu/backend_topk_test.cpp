// topk on the GPU against the CPU backend, exactly (values by value with NaN and the sign of zero,
// indices bit for bit): the selection kernels (k <= 32, 16 for 64-bit dtypes; lib/topk.h) for
// every numeric dtype and list length, one warp per row and long rows cut into segments, and the
// sort path beyond (k = 25 and 32 of 64-bit dtypes, 33); ties (the lower index first), NaN (the
// largest value), +-0, +-inf; any dim of permuted, flipped and sliced views; index dtypes the
// library casts to; empty results; the errors; and the order itself on a hand-made case.
#include <string>
#include <vector>

#include "gpu/gpu_exact.h"
#include "gpu/gpu_test_support.h"
#include "runtime/registry.h"

using namespace kiln;
using test::Fill;

namespace {

std::string fill_name(Fill fill) {
  return fill == Fill::Wide ? "wide" : fill == Fill::Ties ? "ties" : "special";
}

// topk of x (host data, moved to d) along dim through the backend, with index dtype index.
PrimitivePair topk_on(const Device& d, const TensorData& x, std::int64_t k, std::int64_t dim,
                      bool largest, DType index = DType::I64) {
  return backend_for(d).topk_with_indices(detail::to_device(test::on_cpu(x), d), k, dim, largest,
                                          index);
}

}  // namespace

TEST(GpuTopk, EveryDTypeAndListLengthMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 500;
  // [rows, n]: a warp per row; two segments per row; one row of 17 segments.
  const Shape shapes[] = {Shape{7, 300}, Shape{3, 5000}, Shape{1, 70000}};
  for (DType dtype : test::kNumericDTypes) {
    for (const Shape& shape : shapes) {
      for (Fill fill : {Fill::Wide, Fill::Ties, Fill::Special}) {
        const TensorData x = test::random_data(shape, dtype, seed++, fill);
        for (std::int64_t k : {1, 2, 3, 7, 8, 9, 16, 25, 32, 33}) {
          for (bool largest : {true, false}) {
            const std::string what = std::string(dtype_name(dtype)) + " " + shape.to_string() +
                                     " " + fill_name(fill) + " k " + std::to_string(k) +
                                     (largest ? " largest" : " smallest");
            test::expect_exact_pair(
                device, [&](Device d) { return topk_on(d, x, k, 1, largest); }, what);
          }
        }
      }
    }
  }
}

TEST(GpuTopk, AnyDimOfViewsAndIndexDTypes) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 600;
  for (DType dtype : {DType::F32, DType::F16, DType::I32, DType::U8}) {
    const TensorData x = test::random_data(Shape{6, 40, 9}, dtype, seed++, Fill::Special);
    // A permuted, flipped and sliced view [20, 6, 9] (every other row of dim 1, reversed).
    auto view = [&](Device d) {
      Primitive p = detail::permute(detail::to_device(test::on_cpu(x), d), {1, 0, 2});
      p = detail::flip(std::move(p), {0});
      return detail::slice(std::move(p), {Slice{0, 40, 2}});
    };
    for (std::int64_t dim = 0; dim < 3; ++dim) {
      for (bool largest : {true, false}) {
        for (DType index : {DType::I64, DType::I32, DType::I16, DType::U8}) {
          const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(dim) +
                                   (largest ? " largest" : " smallest") + " index " +
                                   std::string(dtype_name(index));
          test::expect_exact_pair(
              device,
              [&](Device d) {
                return backend_for(d).topk_with_indices(view(d), 5, dim, largest, index);
              },
              what);
        }
      }
    }
  }
}

TEST(GpuTopk, RowShapesFromManyShortToOneVeryLong) {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape shape;
    std::int64_t k;
  };
  // Short rows (most lanes idle), rows that fill the GPU without segments, a row of 1024
  // segments, a row that is exactly k long, rows of one element.
  const Case cases[] = {{Shape{20000, 5}, 3}, {Shape{5000, 1000}, 32}, {Shape{1, 1 << 22}, 8},
                        {Shape{3, 17}, 17},   {Shape{9, 1}, 1},        {Shape{2, 4099}, 31}};
  std::uint64_t seed = 700;
  for (const Case& c : cases) {
    for (DType dtype : {DType::F32, DType::I64}) {
      const TensorData x = test::random_data(c.shape, dtype, seed++, Fill::Wide);
      for (bool largest : {true, false}) {
        test::expect_exact_pair(
            device, [&](Device d) { return topk_on(d, x, c.k, 1, largest); },
            std::string(dtype_name(dtype)) + " " + c.shape.to_string() + " k " +
                std::to_string(c.k) + (largest ? " largest" : " smallest"));
      }
    }
  }
}

TEST(GpuTopk, TiesTakeTheLowerIndexAndNanIsLargest) {
  KILN_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Row 0: all equal. Row 1: NaNs among equal values. Row 2: -0 and +0 (equal) and NaN.
  const std::vector<double> values = {1,    1,   1,   1,    1,   1,  //
                                      2,    nan, 2,   nan,  2,   2,  //
                                      -0.0, 0.0, nan, -0.0, 0.0, -1};
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const TensorData x = TensorData::from_vec(values, Shape{3, 6}).convert(dtype);
    for (bool largest : {true, false}) {
      for (std::int64_t k : {1, 4, 6}) {
        test::expect_exact_pair(
            device, [&](Device d) { return topk_on(d, x, k, 1, largest); },
            std::string(dtype_name(dtype)) + " k " + std::to_string(k) +
                (largest ? " largest" : " smallest"));
      }
    }
    // The order itself, on the GPU: largest puts the NaNs first, by position.
    const TensorData indices = detail::into_data(topk_on(device, x, 4, 1, true).second);
    EXPECT_EQ(indices.to_vec<std::int64_t>(),
              (std::vector<std::int64_t>{0, 1, 2, 3, 1, 3, 0, 2, 2, 0, 1, 3}))
        << dtype_name(dtype);
  }
}

TEST(GpuTopk, EmptyResultsAndErrors) {
  KILN_REQUIRE_GPU();
  const TensorData x = test::random_data(Shape{4, 6}, DType::F32, 800, Fill::Wide);
  for (const Shape& shape : {Shape{0, 6}, Shape{4, 0}, Shape{0, 0}}) {
    const TensorData e = test::random_data(shape, DType::F32, 801, Fill::Wide);
    for (std::int64_t dim = 0; dim < 2; ++dim) {
      test::expect_exact_pair(
          device, [&](Device d) { return topk_on(d, e, 0, dim, true); },
          "empty " + shape.to_string() + " dim " + std::to_string(dim));
    }
  }
  test::expect_exact_pair(
      device, [&](Device d) { return topk_on(d, x, 0, 1, false); }, "k = 0");

  const Primitive gx = detail::to_device(test::on_cpu(x), device);
  try {
    (void)detail::topk_with_indices(gx, 7, 1, true);
    ADD_FAILURE() << "k > size: expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("topk"), std::string::npos) << message;
    EXPECT_NE(message.find("k = 7"), std::string::npos) << message;
    EXPECT_NE(message.find("size 6"), std::string::npos) << message;
  }
  EXPECT_THROW((void)detail::topk_with_indices(gx, -1, 1, true), InvalidArgument);
  try {
    (void)backend_for(device).topk_with_indices(gx, 2, 1, true, DType::F32);
    ADD_FAILURE() << "f32 indices: expected UnsupportedDType";
  } catch (const UnsupportedDType& e) {
    EXPECT_NE(std::string(e.what()).find("topk_with_indices"), std::string::npos) << e.what();
  }
  const Primitive flags = detail::to_device(
      test::on_cpu(test::random_data(Shape{3, 3}, DType::Bool, 802, Fill::Wide)), device);
  EXPECT_THROW((void)detail::topk_with_indices(flags, 1, 1, true), Error);
}

// mask_select, argwhere (counted and compacted on the device, lib/select.h) and arange (a
// generated kernel) on the GPU against the CPU backend, exactly: every dtype each op claims,
// broadcast and non-contiguous operands, masks all false, all true and random over several CUB
// tiles, rank 0, empty shapes, index dtypes the coordinates are converted to, and the errors.
#include <limits>
#include <string>
#include <vector>

#include "gpu/gpu_exact.h"
#include "gpu/gpu_test_support.h"
#include "runtime/registry.h"

using namespace kiln;
using test::Fill;

namespace {

Primitive moved(const TensorData& data, const Device& d) {
  return detail::to_device(test::on_cpu(data), d);
}

TensorData constant_mask(const Shape& shape, bool value) {
  return TensorData(
      std::vector<std::byte>(static_cast<std::size_t>(shape.num_elements()), std::byte(value)),
      shape, DType::Bool);
}

}  // namespace

TEST(GpuCompaction, MaskSelectEveryDTypeAndLayout) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (DType dtype : test::kEveryDType) {
    const std::string name(dtype_name(dtype));
    const TensorData x = test::random_data(Shape{4, 5, 6}, dtype, seed++, Fill::Wide);
    const TensorData mask = test::random_data(Shape{4, 5, 6}, DType::Bool, seed++, Fill::Wide);
    test::expect_exact(
        device, [&](Device d) { return detail::mask_select(moved(x, d), moved(mask, d)); },
        name + " same shape");
    // x broadcast along dim 1, the mask along dim 0.
    const TensorData row = test::random_data(Shape{4, 1, 6}, dtype, seed++, Fill::Wide);
    const TensorData spread = test::random_data(Shape{1, 5, 6}, DType::Bool, seed++, Fill::Wide);
    test::expect_exact(
        device, [&](Device d) { return detail::mask_select(moved(row, d), moved(spread, d)); },
        name + " broadcast");
    // Permuted operands (non-contiguous).
    test::expect_exact(
        device,
        [&](Device d) {
          return detail::mask_select(detail::permute(moved(x, d), {2, 0, 1}),
                                     detail::permute(moved(mask, d), {2, 0, 1}));
        },
        name + " permuted");
    for (bool value : {false, true}) {
      test::expect_exact(
          device,
          [&](Device d) {
            return detail::mask_select(moved(x, d), moved(constant_mask(x.shape(), value), d));
          },
          name + (value ? " all true" : " all false"));
    }
  }
  // Several tiles of CUB's selection, and empty operands.
  const TensorData big = test::random_data(Shape{1000, 1537}, DType::F32, seed++, Fill::Wide);
  const TensorData big_mask = test::random_data(Shape{1000, 1537}, DType::Bool, seed++, Fill::Wide);
  test::expect_exact(
      device, [&](Device d) { return detail::mask_select(moved(big, d), moved(big_mask, d)); },
      "f32 1000x1537");
  const TensorData empty = test::random_data(Shape{0, 3}, DType::I32, seed++, Fill::Wide);
  test::expect_exact(
      device,
      [&](Device d) {
        return detail::mask_select(moved(empty, d), moved(constant_mask(Shape{0, 3}, true), d));
      },
      "empty");
}

TEST(GpuCompaction, ArgwhereEveryRankAndIndexDType) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1000;
  const Shape shapes[] = {
      Shape{},         Shape{1},    Shape{17},     Shape{3, 4, 5}, Shape{2, 3, 1, 4, 2},
      Shape{300, 700}, Shape{0, 4}, Shape{5, 0, 2}};
  for (const Shape& shape : shapes) {
    const TensorData mask = test::random_data(shape, DType::Bool, seed++, Fill::Wide);
    for (DType index : {DType::I64, DType::I32, DType::I16, DType::U8}) {
      const std::string what = shape.to_string() + " index " + std::string(dtype_name(index));
      test::expect_exact(
          device, [&](Device d) { return backend_for(d).argwhere(moved(mask, d), index); }, what);
    }
    for (bool value : {false, true}) {
      test::expect_exact(
          device, [&](Device d) { return detail::argwhere(moved(constant_mask(shape, value), d)); },
          shape.to_string() + (value ? " all true" : " all false"));
    }
  }
  // A permuted (non-contiguous) mask: coordinates in the view's row-major order.
  const TensorData mask = test::random_data(Shape{6, 7, 8}, DType::Bool, seed++, Fill::Wide);
  test::expect_exact(
      device,
      [&](Device d) {
        return detail::argwhere(detail::permute(moved(mask, d), {1, 2, 0}));
      },
      "permuted");
  // nonzero goes through argwhere of x != 0.
  const TensorData x = test::random_data(Shape{9, 11}, DType::I8, seed++, Fill::Ties);
  test::expect_exact(
      device, [&](Device d) { return detail::argwhere(detail::not_equal_elem(moved(x, d), 0)); },
      "i8 nonzero");
  try {
    (void)backend_for(device).argwhere(moved(mask, device), DType::F32);
    ADD_FAILURE() << "f32 coordinates: expected UnsupportedDType";
  } catch (const UnsupportedDType& e) {
    EXPECT_NE(std::string(e.what()).find("argwhere"), std::string::npos) << e.what();
  }
}

TEST(GpuCompaction, ArangeEveryDTypeAndRange) {
  KILN_REQUIRE_GPU();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  struct Range {
    std::int64_t start, end, step;
  };
  // Ranges near the ends of int64, but not spanning most of it: the CPU backend counts in int64
  // (end - start would overflow), the cuda backend and the host default in wider arithmetic.
  const Range ranges[] = {{0, 10, 1},
                          {-5, 17, 3},
                          {10, -7, -2},
                          {5, 5, 1},
                          {5, 0, 1},
                          {0, 5, -1},
                          {0, 1 << 20, 1},
                          {-70000, 70000, 7},
                          {kMax - 10, kMax, 3},
                          {kMin, kMin + 9, 4},
                          {kMax, kMax - 20, -6}};
  for (DType dtype : test::kEveryDType) {
    if (dtype == DType::Bool) continue;  // arange claims floats and integers
    for (const Range& r : ranges) {
      const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(r.start) +
                               ", " + std::to_string(r.end) + ") step " + std::to_string(r.step);
      test::expect_exact(
          device, [&](Device d) { return backend_for(d).arange(r.start, r.end, r.step, dtype, d); },
          what);
    }
  }
  // Ranges spanning most of int64, against the host default (Backend::arange) on the GPU.
  Backend& gpu = backend_for(device);
  for (const Range& r :
       {Range{kMin, kMax, kMax}, Range{kMax, kMin, -kMax}, Range{kMin, kMax, 1LL << 60}}) {
    for (DType dtype : {DType::I64, DType::F64, DType::I8, DType::BF16}) {
      test::expect_exact(
          detail::into_data(gpu.arange(r.start, r.end, r.step, dtype, device)),
          detail::into_data(gpu.Backend::arange(r.start, r.end, r.step, dtype, device)),
          std::string(dtype_name(dtype)) + " wide range step " + std::to_string(r.step));
    }
  }
  EXPECT_THROW((void)detail::arange(0, 4, 0, DType::F32, device, Kind::Float), InvalidArgument);
}

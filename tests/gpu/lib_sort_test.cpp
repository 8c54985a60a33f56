// kiln_cuda_lib sort_rows against a float64 reference written here: stable, NaN largest, +-0
// equal, values bit-exact (the input's own bits), topk as the first k of that order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/cuda/lib/sort.h"
#include "backends/cuda/lib/sort_detail.h"
#include "gpu_test_util.h"
#include "kiln/half.h"

namespace kiln::cuda::lib {
namespace {

using gpu_test::as_double;
using gpu_test::DeviceBuffer;

template <class T>
auto bits_of(T v) {
  if constexpr (sizeof(T) == 8) {
    std::uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  } else if constexpr (sizeof(T) == 4) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  } else if constexpr (sizeof(T) == 2) {
    std::uint16_t b;
    std::memcpy(&b, &v, 2);
    return b;
  } else {
    std::uint8_t b;
    std::memcpy(&b, &v, 1);
    return b;
  }
}

template <class T>
T from_bits(std::uint64_t b) {
  T v{};
  std::memcpy(static_cast<void*>(&v), &b, sizeof(T));
  return v;
}

// A negative NaN with a payload: sign and payload must not change where NaNs sort.
template <class T>
T odd_nan() {
  if constexpr (std::is_same_v<T, half>) return from_bits<T>(0xfe01);
  if constexpr (std::is_same_v<T, bfloat16>) return from_bits<T>(0xffc1);
  if constexpr (std::is_same_v<T, float>) return from_bits<T>(0xffc00001u);
  if constexpr (std::is_same_v<T, double>) return from_bits<T>(0xfff8000000000001ull);
  return T{};
}

// Values with many ties (stability), and for floats +-0, +-inf and NaNs of both signs.
template <class T>
std::vector<T> random_values(std::int64_t count, std::uint64_t seed, bool narrow) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(static_cast<std::size_t>(count));
  for (auto& x : v) {
    if constexpr (gpu_test::kHostFloat<T>) {
      const int pick = static_cast<int>(rng() % 40);
      const float base = static_cast<float>(static_cast<int>(rng() % 41) - 20) * 0.5f;
      switch (pick) {
        case 0:
          x = T(std::numeric_limits<float>::quiet_NaN());
          break;
        case 1:
          x = odd_nan<T>();
          break;
        case 2:
          x = T(std::numeric_limits<float>::infinity());
          break;
        case 3:
          x = T(-std::numeric_limits<float>::infinity());
          break;
        case 4:
          x = T(0.0f);
          break;
        case 5:
          x = T(-0.0f);
          break;
        default:
          x = narrow ? T(base) : T(base * static_cast<float>(rng() % 1000) * 0.37f);
          break;
      }
    } else {
      x = narrow ? static_cast<T>(static_cast<std::int64_t>(rng() % 13) - 6) : from_bits<T>(rng());
    }
  }
  return v;
}

// Mostly values whose keys several bit patterns share: +-0 and NaNs of both signs.
template <class T>
std::vector<T> special_values(std::int64_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(static_cast<std::size_t>(count));
  for (auto& x : v) {
    switch (rng() % 7) {
      case 0:
        x = T(0.0f);
        break;
      case 1:
        x = T(-0.0f);
        break;
      case 2:
        x = T(std::numeric_limits<float>::quiet_NaN());
        break;
      case 3:
        x = odd_nan<T>();
        break;
      case 4:
        x = T(1.0f);
        break;
      case 5:
        x = T(-1.0f);
        break;
      default:
        x = T(std::numeric_limits<float>::infinity());
        break;
    }
  }
  return v;
}

template <class T>
bool before(T a, T b, bool descending) {
  if (descending) std::swap(a, b);
  const double x = as_double(a);
  const double y = as_double(b);
  if constexpr (gpu_test::kHostFloat<T>) return x < y || (std::isnan(y) && !std::isnan(x));
  // Integers compare exactly (64-bit ones may not fit a double).
  return a < b;
}

struct Case {
  std::int64_t rows, n;
  bool descending;
  std::int64_t keep;  // -1: full sort
  bool values, indices;
  DType index_dtype;
};

template <class T>
void check_sort(DType dtype, const Case& c, std::uint64_t seed, bool specials = false) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " rows " << c.rows << " n " << c.n
                                    << (c.descending ? " desc" : " asc") << " keep " << c.keep
                                    << " values " << c.values << " indices " << c.indices);
  std::vector<T> input;
  if constexpr (gpu_test::kHostFloat<T>) {
    input = specials ? special_values<T>(c.rows * c.n, seed)
                     : random_values<T>(c.rows * c.n, seed, seed % 2 == 0);
  } else {
    input = random_values<T>(c.rows * c.n, seed, seed % 2 == 0);
  }
  const std::int64_t keep = c.keep < 0 ? c.n : c.keep;
  SortDesc desc{dtype, c.rows, c.n, c.descending, c.keep, c.indices, c.index_dtype};
  const std::size_t index_size = c.index_dtype == DType::I64 ? 8 : 4;
  DeviceBuffer in(input);
  DeviceBuffer values(c.values ? c.rows * keep * sizeof(T) : 0);
  DeviceBuffer indices(c.indices ? c.rows * keep * index_size : 0);
  const std::size_t bytes = sort_workspace_bytes(desc);
  DeviceBuffer workspace(bytes);
  sort_rows(desc, in.get(), c.values ? values.get() : nullptr, c.indices ? indices.get() : nullptr,
            workspace.get(), bytes, nullptr);
  KILN_CUDA_CHECK("test", cudaDeviceSynchronize());
  const auto got_values = values.read<T>(c.values ? c.rows * keep : 0);
  std::vector<std::int64_t> got_indices(c.indices ? c.rows * keep : 0);
  if (c.indices && index_size == 8) {
    got_indices = indices.read<std::int64_t>(c.rows * keep);
  } else if (c.indices) {
    const auto narrow = indices.read<std::int32_t>(c.rows * keep);
    std::copy(narrow.begin(), narrow.end(), got_indices.begin());
  }

  std::vector<std::int64_t> order(static_cast<std::size_t>(c.n));
  std::int64_t errors = 0;
  for (std::int64_t r = 0; r < c.rows && errors < 5; ++r) {
    const T* row = input.data() + r * c.n;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return before(row[a], row[b], c.descending);
    });
    for (std::int64_t j = 0; j < keep && errors < 5; ++j) {
      const std::size_t o = static_cast<std::size_t>(r * keep + j);
      const T expected = row[order[static_cast<std::size_t>(j)]];
      if (c.values && bits_of(got_values[o]) != bits_of(expected)) {
        ADD_FAILURE() << "row " << r << " position " << j << ": value " << as_double(got_values[o])
                      << " (bits " << +bits_of(got_values[o]) << "), expected "
                      << as_double(expected) << " (bits " << +bits_of(expected) << ")";
        ++errors;
      }
      if (c.indices && got_indices[o] != order[static_cast<std::size_t>(j)]) {
        ADD_FAILURE() << "row " << r << " position " << j << ": index " << got_indices[o]
                      << ", expected " << order[static_cast<std::size_t>(j)];
        ++errors;
      }
    }
  }
}

TEST(LibSort, EveryDTypeBothOrdersWithAndWithoutIndices) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  gpu_test::for_each_numeric_dtype([&]<class T>(DType dtype, T) {
    for (bool descending : {false, true}) {
      for (const Case& c : {Case{1, 1000, descending, -1, true, false, DType::I64},
                            Case{1, 777, descending, -1, true, true, DType::I64},
                            Case{9, 301, descending, -1, true, true, DType::I32},
                            Case{64, 3, descending, -1, false, true, DType::I64}}) {
        check_sort<T>(dtype, c, seed++);
      }
    }
  });
}

TEST(LibSort, LongRowsTakeTheDeviceWideAndPerRowPaths) {
  KILN_REQUIRE_GPU();
  for (bool descending : {false, true}) {
    check_sort<float>(DType::F32, {1, 1 << 20, descending, -1, true, true, DType::I64}, 11);
    check_sort<float>(DType::F32, {1, 300001, descending, -1, true, false, DType::I64}, 12);
    check_sort<half>(DType::F16, {3, 200003, descending, -1, true, true, DType::I32}, 13);
    check_sort<std::int32_t>(DType::I32, {2, 150000, descending, -1, true, false, DType::I64}, 14);
    check_sort<double>(DType::F64, {2, 140000, descending, -1, true, true, DType::I64}, 15);
    check_sort<bfloat16>(DType::BF16, {100, 5000, descending, -1, true, true, DType::I64}, 16);
  }
}

// 8- and 16-bit keys are sorted zero-extended to 32 bits: the radix sorts (one row, and a few
// long rows) over their bit range only, the segmented sort (many rows) over whole keys. Ties,
// +-0 and NaNs of both signs, both orders, topk, i32/i64 indices and values alone, on each path.
TEST(LibSort, NarrowKeysOnEveryPath) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 2000;
  auto run = [&]<class T>(DType dtype, T) {
    for (bool descending : {false, true}) {
      for (const Case& c : {Case{1, 1 << 18, descending, -1, true, true, DType::I32},
                            Case{1, 100003, descending, -1, true, false, DType::I64},
                            Case{3, 140001, descending, -1, true, true, DType::I64},
                            Case{2, 140000, descending, -1, true, false, DType::I64},
                            Case{2, 1 << 17, descending, 10, true, true, DType::I32},
                            Case{300, 1000, descending, -1, true, true, DType::I64},
                            Case{200, 777, descending, -1, true, false, DType::I64},
                            Case{1000, 40, descending, 5, false, true, DType::I32}}) {
        check_sort<T>(dtype, c, seed++);
      }
    }
  };
  run(DType::U8, std::uint8_t{});
  run(DType::I8, std::int8_t{});
  run(DType::U16, std::uint16_t{});
  run(DType::I16, std::int16_t{});
  run(DType::F16, half{});
  run(DType::BF16, bfloat16{});
}

TEST(LibSort, TopkIsTheFirstKOfTheStableOrder) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 100;
  gpu_test::for_each_numeric_dtype([&]<class T>(DType dtype, T) {
    for (bool largest : {true, false}) {
      for (std::int64_t k : {0, 1, 5, 64}) {
        check_sort<T>(dtype, {7, 64, largest, k, true, true, DType::I64}, seed++);
      }
    }
  });
  check_sort<float>(DType::F32, {1, 1 << 18, true, 10, true, true, DType::I32}, 7);
  check_sort<float>(DType::F32, {300, 1000, false, 3, true, true, DType::I64}, 8);
}

// The float cases where values come back without indices: the run of a shared key is refilled
// from the input (compacted lists by default, carried positions with the knob set).
void check_shared_keys(std::uint64_t seed) {
  auto run = [&]<class T>(DType dtype, T) {
    for (bool descending : {false, true}) {
      for (const Case& c : {Case{1, 5000, descending, -1, true, false, DType::I64},
                            Case{13, 777, descending, -1, true, false, DType::I64},
                            Case{3, 200003, descending, -1, true, false, DType::I64},
                            Case{5, 1000, descending, 10, true, false, DType::I64}}) {
        check_sort<T>(dtype, c, seed++, true);
        check_sort<T>(dtype, c, seed++, false);
      }
    }
  };
  run(DType::F64, double{});
  run(DType::F32, float{});
  run(DType::F16, half{});
  run(DType::BF16, bfloat16{});
}

// Sets the float restore path for one test and puts the previous one back.
class RestorePath {
 public:
  explicit RestorePath(bool by_positions) : previous_(sort_detail::float_values_by_positions()) {
    sort_detail::set_float_values_by_positions(by_positions);
  }
  ~RestorePath() { sort_detail::set_float_values_by_positions(previous_); }
  RestorePath(const RestorePath&) = delete;
  RestorePath& operator=(const RestorePath&) = delete;

 private:
  bool previous_;
};

TEST(LibSort, SharedKeysKeepTheirBitsFromCompactedLists) {
  KILN_REQUIRE_GPU();
  const RestorePath path(false);
  check_shared_keys(500);
}

TEST(LibSort, SharedKeysKeepTheirBitsFromPositions) {
  KILN_REQUIRE_GPU();
  const RestorePath path(true);
  check_shared_keys(900);
}

TEST(LibSort, EmptyShapesWriteNothing) {
  KILN_REQUIRE_GPU();
  for (const Case& c : {Case{0, 5, false, -1, true, true, DType::I64},
                        Case{4, 0, true, -1, true, true, DType::I64}}) {
    SortDesc desc{DType::F32, c.rows, c.n, c.descending, c.keep, true, DType::I64};
    EXPECT_EQ(sort_workspace_bytes(desc), 0u);
    DeviceBuffer dummy(16);
    sort_rows(desc, dummy.get(), dummy.get(), dummy.get(), nullptr, 0, nullptr);
  }
}

TEST(LibSort, BadDescriptionsAreInvalidArguments) {
  // Host-side validation: runs without a device.
  EXPECT_THROW(validate(SortDesc{DType::F32, 1, 10, false, 11, false, DType::I64}),
               InvalidArgument);
  EXPECT_THROW(validate(SortDesc{DType::F32, -1, 10, false, -1, false, DType::I64}),
               InvalidArgument);
  EXPECT_THROW(validate(SortDesc{DType::F32, 1, 10, false, -1, true, DType::F32}), InvalidArgument);
  EXPECT_THROW(validate(SortDesc{DType::Bool, 1, 10, false, -1, false, DType::I64}),
               UnsupportedDType);
}

}  // namespace
}  // namespace kiln::cuda::lib

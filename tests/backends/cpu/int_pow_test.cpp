// Integer powers against closed forms, for every integer dtype: wrapping b-bit arithmetic for
// non-negative exponents (however large the integer scalar), and for negative ones 1 / base^n
// truncated toward zero (1 for 1, +-1 for -1, 0 otherwise), with 0 raised to a negative power
// refused as an integer division by zero is.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/devices.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using kiln::test::kCpu;

// base^exponent modulo 2^bits, by repeated squaring over the whole 64-bit exponent.
std::uint64_t power_modulo(std::uint64_t base, std::uint64_t exponent, int bits) {
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  std::uint64_t result = 1;
  base &= mask;
  for (; exponent != 0; exponent >>= 1) {
    if (exponent & 1) result = (result * base) & mask;
    base = (base * base) & mask;
  }
  return result & mask;
}

// The closed form for a negative exponent (base != 0).
template <class T>
T negative_power(T base, bool odd) {
  if (base == 1) return 1;
  if constexpr (std::is_signed_v<T>) {
    if (base == -1) return odd ? T(-1) : T(1);
  }
  return 0;
}

template <class T>
std::vector<T> bases() {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_signed_v<T>) {
    return {L::min(), static_cast<T>(L::min() + 1), -7, -3, -2, -1, 1, 2, 3, 7, 10, L::max()};
  } else {
    return {1, 2, 3, 7, 10, static_cast<T>(L::max() - 1), L::max()};
  }
}

template <class T>
Tensor<1, Int> tensor_of(const std::vector<T>& values) {
  return Tensor<1, Int>::from_data(TensorData::from_vec(values), kCpu);
}

template <class T>
std::vector<T> read(const Tensor<1, Int>& t) {
  return t.into_data().template to_vec<T>();
}

std::string message_of(const std::function<void()>& f) {
  return test::message_of<InvalidArgument>(f);
}

constexpr std::uint64_t kBig[] = {0,
                                  1,
                                  2,
                                  3,
                                  7,
                                  8,
                                  31,
                                  63,
                                  64,
                                  127,
                                  128,
                                  255,
                                  256,
                                  257,
                                  1000,
                                  32767,
                                  32768,
                                  65535,
                                  65536,
                                  65537,
                                  2147483647,
                                  2147483648,
                                  2147483649,
                                  4294967299,
                                  4611686018427387909ULL,
                                  9223372036854775807ULL};

template <class T>
void check_dtype() {
  const std::string label(dtype_name(TensorData::from_vec(std::vector<T>{0}).dtype()));
  constexpr int bits = 8 * sizeof(T);
  const std::vector<T> b = bases<T>();
  const Tensor<1, Int> x = tensor_of(b);

  // Non-negative exponents, as signed and as unsigned scalars, past the dtype's range too.
  for (std::uint64_t e : kBig) {
    std::vector<T> want;
    for (T base : b) {
      want.push_back(static_cast<T>(power_modulo(static_cast<std::uint64_t>(base), e, bits)));
    }
    EXPECT_EQ(read<T>(x.pow_scalar(static_cast<std::int64_t>(e))), want) << label << " ^ " << e;
    EXPECT_EQ(read<T>(x.pow_scalar(e)), want) << label << " ^ " << e << "u";
  }
  for (std::uint64_t e : {9223372036854775809ULL, 18446744073709551615ULL}) {  // past int64
    std::vector<T> want;
    for (T base : b) {
      want.push_back(static_cast<T>(power_modulo(static_cast<std::uint64_t>(base), e, bits)));
    }
    EXPECT_EQ(read<T>(x.pow_scalar(e)), want) << label << " ^ " << e;
  }

  // Negative exponents, however large, even and odd.
  for (std::int64_t e : {std::int64_t{-1}, std::int64_t{-2}, std::int64_t{-3}, std::int64_t{-256},
                         std::int64_t{-257}, -(std::int64_t{1} << 40), -(std::int64_t{1} << 40) - 1,
                         std::numeric_limits<std::int64_t>::min()}) {
    std::vector<T> want;
    for (T base : b) want.push_back(negative_power(base, e % 2 != 0));
    EXPECT_EQ(read<T>(x.pow_scalar(e)), want) << label << " ^ " << e;
  }

  // Float scalars holding integers act as those integers; others are refused by the tensor
  // layer before any backend sees them.
  std::vector<T> cube, inverse, square;
  for (T base : b) {
    cube.push_back(static_cast<T>(power_modulo(static_cast<std::uint64_t>(base), 3, bits)));
    inverse.push_back(negative_power(base, true));
    square.push_back(negative_power(base, false));
  }
  EXPECT_EQ(read<T>(x.pow_scalar(3.0)), cube) << label;
  EXPECT_EQ(read<T>(x.pow_scalar(-1.0)), inverse) << label;
  EXPECT_EQ(read<T>(x.pow_scalar(-2.0)), square) << label;
  EXPECT_THROW((void)x.pow_scalar(-1.5), DTypeMismatch) << label;
  EXPECT_THROW((void)x.pow_scalar(std::nan("")), DTypeMismatch) << label;

  // 0 to a negative power is a division by zero, as 1 / 0 is; to 0 or more it is 0 (0^0 = 1).
  const Tensor<1, Int> zero = tensor_of(std::vector<T>{1, 0, 2});
  EXPECT_EQ(message_of([&] { (void)zero.pow_scalar(-1); }),
            "[pow_scalar] 0 raised to the negative power -1: integer division by zero")
      << label;
  EXPECT_EQ(message_of([&] { (void)zero.pow_scalar(-2.0); }),
            "[pow_scalar] 0 raised to the negative power -2: integer division by zero")
      << label;
  EXPECT_EQ(
      message_of([&] { (void)tensor_of(std::vector<T>{1}).div(tensor_of(std::vector<T>{0})); }),
      "[div] integer division by zero")
      << label;
  EXPECT_EQ(read<T>(zero.pow_scalar(0)), (std::vector<T>{1, 1, 1})) << label;
  EXPECT_EQ(read<T>(zero.pow_scalar(5)), (std::vector<T>{1, 0, 32})) << label;
  // An empty tensor has no 0 to raise.
  EXPECT_TRUE(read<T>(tensor_of(std::vector<T>{}).pow_scalar(-1)).empty()) << label;
}

TEST(IntPow, ScalarExponentsMatchTheClosedFormsForEveryIntegerDtype) {
  check_dtype<std::int8_t>();
  check_dtype<std::int16_t>();
  check_dtype<std::int32_t>();
  check_dtype<std::int64_t>();
  check_dtype<std::uint8_t>();
  check_dtype<std::uint16_t>();
  check_dtype<std::uint32_t>();
  check_dtype<std::uint64_t>();
}

template <class T>
void check_tensor_exponents() {
  const std::vector<T> base = {1, -1, -1, 2, -2, 5, 3, -3, 2, 0, 0};
  const std::vector<T> exponent = {-3, -3, -2, -1, -1, -7, 2, 3, 0, 0, 4};
  const std::vector<T> want = {1, -1, 1, 0, 0, 0, 9, -27, 1, 1, 0};
  EXPECT_EQ(read<T>(tensor_of(base).pow(tensor_of(exponent))), want);
  // Broadcast: one exponent row against a column of bases, 0 among them.
  const auto column =
      Tensor<2, Int>::from_data(TensorData::from_vec(std::vector<T>{0, 3}, {2, 1}), kCpu);
  const auto row =
      Tensor<2, Int>::from_data(TensorData::from_vec(std::vector<T>{2, -1}, {1, 2}), kCpu);
  EXPECT_EQ(message_of([&] { (void)column.pow(row); }),
            "[pow] 0 raised to a negative power: integer division by zero");
  EXPECT_EQ(message_of([&] {
              (void)tensor_of(std::vector<T>{0, 0}).pow(tensor_of(std::vector<T>{1, 0}));
            }),
            "no error");
}

TEST(IntPow, TensorExponentsFollowTheSameRules) {
  check_tensor_exponents<std::int8_t>();
  check_tensor_exponents<std::int16_t>();
  check_tensor_exponents<std::int32_t>();
  check_tensor_exponents<std::int64_t>();
}

// Floats keep IEEE semantics: 0^-1 is inf, not an error.
TEST(IntPow, FloatPowersAreUnchanged) {
  const auto x = Tensor<1>::from_data(TensorData::from_vec(std::vector<double>{0, 2, -2}), kCpu);
  const std::vector<double> got = x.pow_scalar(-1).into_data().to_f64_vec();
  EXPECT_EQ(got[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(got[1], 0.5);
  EXPECT_EQ(got[2], -0.5);
}

}  // namespace
}  // namespace kiln

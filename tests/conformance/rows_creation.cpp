// Conformance rows: creation, reads, device moves and casts. Casts are checked exactly for every
// pair of dtypes, including NaN, infinities and values out of the target's range: float -> int
// truncates toward zero and saturates (NaN -> 0), int -> int wraps modulo 2^bits, anything ->
// bool is "!= 0" (NaN -> true), and 16-bit floats are reached through f32 (as PyTorch does).
#include <cmath>
#include <limits>
#include <numeric>

#include "conformance/conformance.h"
#include "core/dtype_dispatch.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

constexpr DType kEveryDType[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                 DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                 DType::U16, DType::U8,  DType::Bool};

// The elements of data as long double: exact for every dtype on x86-64 (64-bit significand).
std::vector<long double> exact_values(const TensorData& data) {
  std::vector<long double> out(static_cast<std::size_t>(data.num_elements()));
  visit_dtype(data.dtype(), "exact_values", [&]<class T>(type_tag<T>) {
    const auto values = data.as_span<T>();
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<long double>(static_cast<compute_t<T>>(values[i]));
    }
  });
  return out;
}

bool same_value(long double a, long double b) { return (a != a && b != b) || a == b; }

Primitive upload(TensorData data, const Device& device) {
  const DType dtype = data.dtype();
  const Kind kind = is_float(dtype) ? Kind::Float : (is_int(dtype) ? Kind::Int : Kind::Bool);
  const std::size_t rank = data.shape().rank();
  return detail::from_data(std::move(data), device, kind, rank);
}

KILN_CONFORMANCE_ROW(creation, ({"from_data", "empty", "full", "zeros", "ones", "arange"})) {
  Backend& backend = backend_for(device);
  std::uint64_t seed = 2000;
  for (DType dtype : kEveryDType) {
    const Kind kind = is_float(dtype) ? Kind::Float : (is_int(dtype) ? Kind::Int : Kind::Bool);
    for (const Shape& shape : {Shape{3, 5}, Shape{0, 4}, Shape{2, 1, 3}}) {
      const std::string ctx = std::string(dtype_name(dtype)) + " " + shape.to_string();
      // from_data keeps every byte.
      const TensorData data =
          TensorData::from_vec(random_values(shape, dtype, seed++), shape).convert(dtype);
      const TensorData back = detail::into_data(upload(data, device));
      ASSERT_EQ(back.shape(), shape) << ctx;
      ASSERT_EQ(back.dtype(), dtype) << ctx;
      EXPECT_TRUE(std::equal(back.bytes().begin(), back.bytes().end(), data.bytes().begin(),
                             data.bytes().end()))
          << "from_data " << ctx;
      // empty: the right shape and dtype (contents unspecified).
      Primitive e = detail::empty(shape, dtype, device, kind);
      EXPECT_EQ(e->shape(), shape) << "empty " << ctx;
      EXPECT_EQ(e->dtype(), dtype) << "empty " << ctx;
      // full / zeros / ones.
      const double value = dtype == DType::Bool ? 1.0 : (is_unsigned_int(dtype) ? 7.0 : -3.0);
      const std::vector<double> filled(static_cast<std::size_t>(shape.num_elements()), value);
      expect_close(detail::into_data(detail::full(shape, value, dtype, device, kind)), shape, dtype,
                   filled, "full " + ctx);
      expect_close(detail::into_data(backend.zeros(shape, dtype, device)), shape, dtype,
                   std::vector<double>(filled.size(), 0.0), "zeros " + ctx);
      expect_close(detail::into_data(backend.ones(shape, dtype, device)), shape, dtype,
                   std::vector<double>(filled.size(), 1.0), "ones " + ctx);
    }
  }
  // 64-bit integers are filled exactly (no detour through double).
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  const auto filled = detail::into_data(detail::full(Shape{2}, big, DType::I64, device, Kind::Int));
  EXPECT_EQ(filled.to_vec<std::int64_t>(), std::vector<std::int64_t>(2, big));
  // A fractional scalar into an integer dtype truncates as a cast does.
  expect_close(detail::into_data(detail::full(Shape{2}, 2.75, DType::I32, device, Kind::Int)),
               Shape{2}, DType::I32, {2, 2}, "full 2.75 as i32");

  // arange over dtypes, positive and negative steps, empty ranges.
  const std::int64_t ranges[][3] = {{0, 10, 1}, {-5, 7, 3}, {10, -4, -3}, {3, 3, 1},
                                    {5, 0, 1},  {0, 1, 5},  {-2, -20, -7}};
  for (DType dtype : kNumericDTypes) {
    const Kind kind = is_float(dtype) ? Kind::Float : Kind::Int;
    for (const auto& r : ranges) {
      if (is_unsigned_int(dtype) && (r[0] < 0 || r[1] < 0)) continue;
      std::vector<double> expected;
      for (std::int64_t v = r[0]; r[2] > 0 ? v < r[1] : v > r[1]; v += r[2])
        expected.push_back(static_cast<double>(v));
      const Shape shape{static_cast<std::int64_t>(expected.size())};
      expect_close(detail::into_data(detail::arange(r[0], r[1], r[2], dtype, device, kind)), shape,
                   dtype, expected,
                   std::string("arange ") + std::string(dtype_name(dtype)) + " " +
                       std::to_string(r[0]) + ".." + std::to_string(r[1]) + " step " +
                       std::to_string(r[2]));
    }
  }
  EXPECT_THROW(detail::arange(0, 5, 0, std::nullopt, device, Kind::Int), InvalidArgument);
  EXPECT_THROW(detail::full(Shape{-1, 2}, 0, std::nullopt, device, Kind::Float), InvalidArgument);
}

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

KILN_CONFORMANCE_ROW(random, ({"random"})) {
  const Shape shape{200, 100};  // 20000 draws: the mean's standard error is ~0.7% of the std
  auto draw = [&](Distribution d, DType dtype) {
    const Kind kind = is_float(dtype) ? Kind::Float : Kind::Int;
    return detail::into_data(detail::random(shape, d, dtype, device, kind));
  };
  device.seed(1234);
  for (DType dtype : kFloatDTypes) {
    const std::string ctx(dtype_name(dtype));
    const auto standard = draw(Distribution::standard(), dtype).to_f64_vec();
    EXPECT_NEAR(mean_of(standard), 0.5, 0.01) << "standard " << ctx;
    EXPECT_NEAR(std_of(standard), 1 / std::sqrt(12.0), 0.01) << "standard " << ctx;
    for (double v : standard) ASSERT_TRUE(v >= 0 && v <= 1) << "standard " << ctx << " " << v;

    const auto uniform = draw(Distribution::uniform(-2, 5), dtype).to_f64_vec();
    EXPECT_NEAR(mean_of(uniform), 1.5, 0.07) << "uniform " << ctx;
    EXPECT_NEAR(std_of(uniform), 7 / std::sqrt(12.0), 0.05) << "uniform " << ctx;
    for (double v : uniform) ASSERT_TRUE(v >= -2 && v <= 5) << "uniform " << ctx << " " << v;

    const auto normal = draw(Distribution::normal(1, 2), dtype).to_f64_vec();
    EXPECT_NEAR(mean_of(normal), 1.0, 0.06) << "normal " << ctx;
    EXPECT_NEAR(std_of(normal), 2.0, 0.06) << "normal " << ctx;
    for (double v : normal) ASSERT_TRUE(std::isfinite(v)) << "normal " << ctx;

    const auto coin = draw(Distribution::bernoulli(0.3), dtype).to_f64_vec();
    EXPECT_NEAR(mean_of(coin), 0.3, 0.015) << "bernoulli " << ctx;
    for (double v : coin) ASSERT_TRUE(v == 0 || v == 1) << "bernoulli " << ctx << " " << v;
  }
  for (DType dtype : {DType::I64, DType::I32, DType::U8}) {
    const auto ints = draw(Distribution::uniform(0, 10), dtype).to_f64_vec();
    std::vector<int> seen(10, 0);
    for (double v : ints) {
      ASSERT_TRUE(v >= 0 && v < 10 && v == std::floor(v)) << dtype_name(dtype) << " " << v;
      ++seen[static_cast<std::size_t>(v)];
    }
    for (int count : seen) EXPECT_NEAR(count, 2000, 200) << dtype_name(dtype);
  }
  // The same seed gives the same numbers; the stream moves on otherwise.
  device.seed(99);
  const auto first = draw(Distribution::normal(0, 1), DType::F32).to_f64_vec();
  const auto next = draw(Distribution::normal(0, 1), DType::F32).to_f64_vec();
  device.seed(99);
  const auto again = draw(Distribution::normal(0, 1), DType::F32).to_f64_vec();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, next);
  EXPECT_TRUE(detail::into_data(detail::random(Shape{0, 3}, Distribution::standard(), DType::F32,
                                               device, Kind::Float))
                  .to_f64_vec()
                  .empty());
  EXPECT_THROW(
      detail::random(shape, Distribution::bernoulli(1.5), std::nullopt, device, Kind::Float),
      InvalidArgument);
}

KILN_CONFORMANCE_ROW(reads_and_moves, ({"into_data", "to_device", "read_many"})) {
  std::uint64_t seed = 2100;
  std::vector<Primitive> prims;
  std::vector<std::vector<double>> values;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (DType dtype : kEveryDType) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{3, 4}, Shape{2, 0}}) {
        const auto v = random_values(shape, dtype, seed++);
        Primitive p = make_primitive(v, shape, dtype, layout, device);
        const std::string ctx = context(device, dtype, layout, shape);
        // into_data of any view is its logical values, row-major; the async form agrees.
        expect_close(detail::into_data(p), shape, dtype, v, "into_data " + ctx);
        expect_close(detail::into_data_async(p).get(), shape, dtype, v, "into_data_async " + ctx);
        // A trip to the host CPU and back keeps the values.
        Primitive on_cpu = detail::to_device(p, Device::cpu());
        EXPECT_EQ(on_cpu->device(), Device::cpu()) << ctx;
        Primitive back = detail::to_device(on_cpu, device);
        EXPECT_EQ(back->device(), device) << ctx;
        expect_close(detail::into_data(back), shape, dtype, v, "to_device " + ctx);
        prims.push_back(p);
        values.push_back(v);
        shapes.push_back(shape);
        dtypes.push_back(dtype);
      }
    }
  }
  const std::vector<TensorData> all = detail::read_many(prims);
  ASSERT_EQ(all.size(), prims.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    expect_close(all[i], shapes[i], dtypes[i], values[i], "read_many #" + std::to_string(i));
  }
  EXPECT_TRUE(detail::read_many({}).empty());
}

// Source values for casts from dtype: zeros, fractions, both ends of every integer range and
// past them, and (for floats) NaN and infinities; each exactly representable in dtype.
TensorData cast_sources(DType dtype) {
  std::vector<long double> candidates = {0,     1,     -1,     2,      100,   -100,
                                         127,   128,   -128,   -129,   255,   256,
                                         32767, 32768, -32768, -32769, 65535, 65536};
  for (int bits : {31, 32, 53, 63, 64}) {
    const long double p = std::ldexp(1.0L, bits);
    candidates.insert(candidates.end(), {p, p - 1, -p, -p - 1, p + 1});
  }
  if (is_float(dtype)) {
    candidates.insert(candidates.end(),
                      {-0.0L, 1.5L, -1.5L, -2.75L, 3.75L, 127.5L, 255.75L, -128.5L, 65504, 70000,
                       1e10L, -1e19L, 1.9e19L, std::ldexp(1.0L, 127), std::ldexp(1.0L, 1000),
                       std::numeric_limits<long double>::quiet_NaN(), INFINITY, -INFINITY});
  }
  std::vector<std::byte> bytes;
  std::int64_t count = 0;
  visit_dtype(dtype, "cast_sources", [&]<class T>(type_tag<T>) {
    using C = compute_t<T>;
    for (long double v : candidates) {
      T stored;
      if constexpr (std::is_same_v<T, bool>) {
        if (v != 0 && v != 1) continue;
        stored = v != 0;
      } else if constexpr (std::is_integral_v<T>) {
        if (v < static_cast<long double>(std::numeric_limits<T>::lowest()) ||
            v > static_cast<long double>(std::numeric_limits<T>::max()) || v != std::trunc(v)) {
          continue;
        }
        stored = static_cast<T>(v);
      } else {
        // Keep only values the float dtype holds exactly (inf/NaN included).
        const C c = static_cast<C>(static_cast<double>(v));
        stored = T(c);
        const long double back = static_cast<long double>(static_cast<C>(stored));
        if (!(back == v || (v != v && back != back))) continue;
      }
      const auto* raw = reinterpret_cast<const std::byte*>(&stored);
      bytes.insert(bytes.end(), raw, raw + sizeof(T));
      ++count;
    }
  });
  return TensorData(std::move(bytes), Shape{count}, dtype);
}

// What casting v (a value of dtype `from`) to `to` must give, as an exact long double.
long double expected_cast(long double v, DType from, DType to) {
  if (to == DType::Bool) return v != 0 ? 1 : 0;  // NaN != 0
  if (is_int(to)) {
    long double lo = 0, hi = 0;
    int bits = 0;
    visit_int_dtype(to, "expected_cast", [&]<class T>(type_tag<T>) {
      lo = static_cast<long double>(std::numeric_limits<T>::lowest());
      hi = static_cast<long double>(std::numeric_limits<T>::max());
      bits = std::numeric_limits<T>::digits + (std::is_signed_v<T> ? 1 : 0);
    });
    if (is_float(from)) {
      if (v != v) return 0;
      const long double t = std::trunc(v);
      return t <= lo ? lo : (t >= hi ? hi : t);
    }
    // Integer to integer keeps the low bits (two's complement).
    const unsigned __int128 modulus = static_cast<unsigned __int128>(1) << bits;
    __int128 w = static_cast<__int128>(v) % static_cast<__int128>(modulus);
    if (w < 0) w += static_cast<__int128>(modulus);
    if (is_signed_int(to) && w > static_cast<__int128>(hi)) w -= static_cast<__int128>(modulus);
    return static_cast<long double>(w);
  }
  switch (to) {
    case DType::F64:
      return static_cast<double>(v);
    case DType::F32:
      return static_cast<float>(v);
    // Through f32, then rounded to 16 bits.
    case DType::F16:
      return static_cast<float>(half(static_cast<float>(v)));
    case DType::BF16:
      return static_cast<float>(bfloat16(static_cast<float>(v)));
    default:
      return 0;
  }
}

KILN_CONFORMANCE_ROW(cast, ({"cast"})) {
  for (DType from : kEveryDType) {
    const TensorData sources = cast_sources(from);
    const std::vector<long double> inputs = exact_values(sources);
    Primitive p = upload(sources, device);
    for (DType to : kEveryDType) {
      const TensorData result = detail::into_data(detail::cast(p, to));
      ASSERT_EQ(result.dtype(), to);
      ASSERT_EQ(result.shape(), sources.shape());
      const std::vector<long double> got = exact_values(result);
      int reported = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const long double want = expected_cast(inputs[i], from, to);
        if (!same_value(got[i], want) && reported++ < 5) {
          ADD_FAILURE() << "cast " << dtype_name(from) << " -> " << dtype_name(to) << ": "
                        << static_cast<double>(inputs[i]) << " gave " << static_cast<double>(got[i])
                        << ", expected " << static_cast<double>(want);
        }
      }
    }
  }
  // Non-contiguous and empty inputs.
  for (Layout layout : kLayouts) {
    const auto v = random_values(Shape{3, 4}, DType::F32, 7, -300, 300);
    Primitive p = make_primitive(v, Shape{3, 4}, DType::F32, layout, device);
    std::vector<double> expected(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      expected[i] = std::clamp(std::trunc(v[i]), -128.0, 127.0);
    expect_close(detail::into_data(detail::cast(p, DType::I8)), Shape{3, 4}, DType::I8, expected,
                 "cast f32 -> i8 " + layout_name(layout));
  }
  Primitive empty = make_primitive({}, Shape{0, 2}, DType::F64, Layout::Contiguous, device);
  EXPECT_EQ(detail::into_data(detail::cast(empty, DType::U16)).shape(), (Shape{0, 2}));
}

}  // namespace
}  // namespace kiln::conformance

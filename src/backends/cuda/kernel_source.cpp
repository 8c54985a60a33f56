#include "backends/cuda/kernel_source.h"

#include <fmt/format.h>

#include <limits>

#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

// The semantics mirror src/backends/cpu/integer_math.h and the CPU's float functors: integer
// arithmetic wraps, division floors (0 raised to a negative power is a division by zero too),
// remainder takes the divisor's sign, shifts past the width saturate, max/min propagate NaN.
// Kept small: NVRTC parses it for every kernel.
constexpr const char* kPrelude = R"CUDA(
typedef long long i64;
typedef unsigned long long u64;
template <class T> struct kt { static constexpr bool is_float = false; static constexpr bool is_signed = ((T)-1 < (T)0); };
template <> struct kt<float> { static constexpr bool is_float = true; static constexpr bool is_signed = true; };
template <> struct kt<double> { static constexpr bool is_float = true; static constexpr bool is_signed = true; };
template <> struct kt<bool> { static constexpr bool is_float = false; static constexpr bool is_signed = false; };
template <class T> struct kwide { typedef unsigned type; };
template <> struct kwide<i64> { typedef u64 type; };
template <> struct kwide<u64> { typedef u64 type; };
template <class T> struct ku { typedef T type; };
template <> struct ku<signed char> { typedef unsigned char type; };
template <> struct ku<short> { typedef unsigned short type; };
template <> struct ku<int> { typedef unsigned type; };
template <> struct ku<i64> { typedef u64 type; };

__device__ __forceinline__ float k_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short k_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float k_b2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short k_f2b(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
template <class T> __device__ __forceinline__ T k_bits(u64 bits) { union { u64 u; T v; } x; x.u = bits; return x.v; }

template <class T> __device__ __forceinline__ T k_add(T a, T b) {
  if constexpr (kt<T>::is_float) return a + b; else return (T)((typename kwide<T>::type)a + (typename kwide<T>::type)b);
}
template <class T> __device__ __forceinline__ T k_sub(T a, T b) {
  if constexpr (kt<T>::is_float) return a - b; else return (T)((typename kwide<T>::type)a - (typename kwide<T>::type)b);
}
template <class T> __device__ __forceinline__ T k_mul(T a, T b) {
  if constexpr (kt<T>::is_float) return a * b;
  else return (T)((typename kwide<T>::type)(typename ku<T>::type)a * (typename kwide<T>::type)(typename ku<T>::type)b);
}
template <class T> __device__ __forceinline__ T k_div(T a, T b, bool& err) {
  if constexpr (kt<T>::is_float) { return a / b; }
  else {
    if (b == 0) { err = true; return 0; }
    if constexpr (kt<T>::is_signed) {
      if (b == (T)-1) return (T)((typename kwide<T>::type)0 - (typename kwide<T>::type)a);
      T q = (T)(a / b);
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return q;
    } else { return (T)(a / b); }
  }
}
template <class T> __device__ __forceinline__ T k_rem(T a, T b, bool& err) {
  if constexpr (kt<T>::is_float) {
    T r;
    if constexpr (sizeof(T) == 4) r = fmodf(a, b); else r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    if (b == 0) { err = true; return 0; }
    if constexpr (kt<T>::is_signed) {
      if (b == (T)-1) return 0;
      T r = (T)(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);
      return r;
    } else { return (T)(a % b); }
  }
}
template <class T> __device__ __forceinline__ T k_pow_neg(T base, bool odd, bool& err) {
  if (base == 0) { err = true; return 0; }
  if (base == 1) return 1;
  if constexpr (kt<T>::is_signed) { if (base == (T)-1) return odd ? (T)-1 : (T)1; }
  return 0;
}
template <class T> __device__ __forceinline__ T k_pow(T base, T exponent, bool& err) {
  if constexpr (kt<T>::is_float) { if constexpr (sizeof(T) == 4) return powf(base, exponent); else return pow(base, exponent); }
  else {
    if constexpr (kt<T>::is_signed) { if (exponent < 0) return k_pow_neg(base, exponent % 2 != 0, err); }
    T result = 1;
    while (exponent != 0) {
      if (exponent & 1) result = k_mul(result, base);
      base = k_mul(base, base);
      exponent = (T)(exponent >> 1);
    }
    return result;
  }
}
template <class T> __device__ __forceinline__ T k_shl(T a, T b) {
  const T bits = (T)(sizeof(T) * 8);
  if (b < 0 || b >= bits) return 0;
  return (T)((typename ku<T>::type)a << b);
}
template <class T> __device__ __forceinline__ T k_shr(T a, T b) {
  const T bits = (T)(sizeof(T) * 8);
  if (b < 0 || b >= bits) { if constexpr (kt<T>::is_signed) return a < 0 ? (T)-1 : (T)0; else return 0; }
  return (T)(a >> b);
}
template <class T> __device__ __forceinline__ T k_max(T a, T b) {
  if constexpr (kt<T>::is_float) { if (a != a || b != b) return a + b; }
  return a < b ? b : a;
}
template <class T> __device__ __forceinline__ T k_min(T a, T b) {
  if constexpr (kt<T>::is_float) { if (a != a || b != b) return a + b; }
  return b < a ? b : a;
}
template <class T> __device__ __forceinline__ T k_abs(T v) {
  if constexpr (kt<T>::is_float) { if constexpr (sizeof(T) == 4) return fabsf(v); else return fabs(v); }
  else if constexpr (kt<T>::is_signed) return v < 0 ? k_sub((T)0, v) : v;
  else return v;
}
template <class T> __device__ __forceinline__ T k_neg(T v) {
  if constexpr (kt<T>::is_float) return -v; else return k_sub((T)0, v);
}
template <class T> __device__ __forceinline__ T k_sign(T v) {
  if constexpr (kt<T>::is_float) { if (v != v) return v; }
  return (T)(((T)0 < v) - (v < (T)0));
}
template <class T> __device__ __forceinline__ T k_clamp(T v, T lo, T hi) {
  const T low = v < lo ? lo : v;
  return hi < low ? hi : low;
}
// Float math: one name for float and double (NVRTC has no <cmath> overload set by default).
#define KF(name, f_expr, d_expr) \
  __device__ __forceinline__ float k_##name(float v) { return f_expr; } \
  __device__ __forceinline__ double k_##name(double v) { return d_expr; }
KF(recip, 1.0f / v, 1.0 / v) KF(exp, expf(v), exp(v)) KF(expm1, expm1f(v), expm1(v))
KF(exp2, exp2f(v), exp2(v)) KF(log, logf(v), log(v)) KF(log1p, log1pf(v), log1p(v))
KF(log2, log2f(v), log2(v)) KF(log10, log10f(v), log10(v)) KF(sqrt, sqrtf(v), sqrt(v))
KF(rsqrt, 1.0f / sqrtf(v), 1.0 / sqrt(v)) KF(sin, sinf(v), sin(v)) KF(cos, cosf(v), cos(v))
KF(tan, tanf(v), tan(v)) KF(asin, asinf(v), asin(v)) KF(acos, acosf(v), acos(v))
KF(atan, atanf(v), atan(v)) KF(sinh, sinhf(v), sinh(v)) KF(cosh, coshf(v), cosh(v))
KF(tanh, tanhf(v), tanh(v)) KF(asinh, asinhf(v), asinh(v)) KF(acosh, acoshf(v), acosh(v))
KF(atanh, atanhf(v), atanh(v)) KF(erf, erff(v), erf(v)) KF(round, rintf(v), rint(v))
KF(erfinv, erfinvf(v), erfinv(v))
KF(floor, floorf(v), floor(v)) KF(ceil, ceilf(v), ceil(v)) KF(trunc, truncf(v), trunc(v))
__device__ __forceinline__ float k_atan2(float a, float b) { return atan2f(a, b); }
__device__ __forceinline__ double k_atan2(double a, double b) { return atan2(a, b); }
__device__ __forceinline__ float k_hypot(float a, float b) { return hypotf(a, b); }
__device__ __forceinline__ double k_hypot(double a, double b) { return hypot(a, b); }
__device__ __forceinline__ bool k_isinf(float v) { return fabsf(v) == __int_as_float(0x7f800000); }
__device__ __forceinline__ bool k_isinf(double v) { return fabs(v) == __longlong_as_double(0x7ff0000000000000ll); }

// Counter-based random numbers, the same hash as the CPU backend (src/backends/cpu/random.h):
// a seed and counter give the same value on either device.
__device__ __forceinline__ u64 k_mix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ double k_uniform01(u64 seed, u64 counter) {
  return (double)(k_mix64(k_mix64(seed) ^ counter) >> 11) * 0x1.0p-53;
}
__device__ __forceinline__ double k_normal(u64 seed, u64 counter) {
  const double u1 = 1.0 - k_uniform01(seed, 2 * counter);
  const double u2 = k_uniform01(seed, 2 * counter + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
// The first statement of a kernel launched LaunchOrder::Overlapping (dispatcher.h) that reads
// nothing before the launch ahead of it has completed: wait for that, then let the launch after
// this one start its blocks. No-ops for a kernel launched the usual way.
__device__ __forceinline__ void k_grid_dependency() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
#endif
}
)CUDA";

template <class T>
std::string limit_literal(bool max) {
  const T v = max ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
  // Hex bit patterns cast to the type: no literal-overflow rules to trip over (INT64_MIN).
  return fmt::format("0x{:x}ull", static_cast<std::make_unsigned_t<T>>(v));
}

std::string int_limits(DType dtype, bool max) {
  switch (dtype) {
    case DType::I64:
      return limit_literal<std::int64_t>(max);
    case DType::I32:
      return limit_literal<std::int32_t>(max);
    case DType::I16:
      return limit_literal<std::int16_t>(max);
    case DType::I8:
      return limit_literal<std::int8_t>(max);
    case DType::U64:
      return limit_literal<std::uint64_t>(max);
    case DType::U32:
      return limit_literal<std::uint32_t>(max);
    case DType::U16:
      return limit_literal<std::uint16_t>(max);
    case DType::U8:
      return limit_literal<std::uint8_t>(max);
    default:
      return "0";
  }
}

// The limit as the double the CPU compares against (static_cast<double>(limit)).
std::string int_limit_as_double(DType dtype, bool max) {
  double v = 0;
  switch (dtype) {
    case DType::I64:
      v = max ? 9223372036854775807.0 : -9223372036854775808.0;
      break;
    case DType::I32:
      v = max ? 2147483647.0 : -2147483648.0;
      break;
    case DType::I16:
      v = max ? 32767.0 : -32768.0;
      break;
    case DType::I8:
      v = max ? 127.0 : -128.0;
      break;
    case DType::U64:
      v = max ? 18446744073709551615.0 : 0.0;
      break;
    case DType::U32:
      v = max ? 4294967295.0 : 0.0;
      break;
    case DType::U16:
      v = max ? 65535.0 : 0.0;
      break;
    case DType::U8:
      v = max ? 255.0 : 0.0;
      break;
    default:
      break;
  }
  return fmt::format("{:.17g}", v);
}

}  // namespace

const std::string& kernel_prelude() {
  // Never destroyed: a kernel may still be generated while the process ends (shutdown.h).
  static const auto& prelude = *new std::string(kPrelude);
  return prelude;
}

const char* storage_type(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return "double";
    case DType::F32:
      return "float";
    case DType::F16:
    case DType::BF16:
      return "unsigned short";
    case DType::I64:
      return "long long";
    case DType::I32:
      return "int";
    case DType::I16:
      return "short";
    case DType::I8:
      return "signed char";
    case DType::U64:
      return "unsigned long long";
    case DType::U32:
      return "unsigned";
    case DType::U16:
      return "unsigned short";
    case DType::U8:
    case DType::Bool:
      return "unsigned char";
    case DType::QFloat:
      break;
  }
  detail::fail<UnsupportedDType>("cuda", "no CUDA storage for ", dtype_name(dtype));
}

const char* compute_type(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
      return "float";
    case DType::Bool:
      return "bool";
    default:
      return storage_type(dtype);
  }
}

// dtype_name's literals are null-terminated.
const char* short_name(DType dtype) { return dtype_name(dtype).data(); }

std::string load_expression(DType dtype, const std::string& at) {
  switch (dtype) {
    case DType::F16:
      return fmt::format("k_h2f({})", at);
    case DType::BF16:
      return fmt::format("k_b2f({})", at);
    case DType::Bool:
      return fmt::format("({} != 0)", at);
    default:
      return at;
  }
}

std::string store_expression(DType dtype, const std::string& value) {
  switch (dtype) {
    case DType::F16:
      return fmt::format("k_f2h({})", value);
    case DType::BF16:
      return fmt::format("k_f2b({})", value);
    case DType::Bool:
      return fmt::format("(unsigned char)(({}) ? 1 : 0)", value);
    default:
      return fmt::format("({})({})", storage_type(dtype), value);
  }
}

std::string convert_expression(DType from, DType to, const std::string& value) {
  if (from == to) return value;
  if (to == DType::Bool) return fmt::format("(({}) != 0)", value);
  if (is_int(to) && is_float(from)) {
    // NaN -> 0, saturate at the limits, else truncate toward zero (src/core/dtype_dispatch.h).
    return fmt::format(
        "([&]() -> {type} {{ const double v_ = (double)({value}); "
        "if (!(v_ == v_)) return ({type})0; "
        "if (v_ <= {lowest_double}) return ({type}){lowest}; "
        "if (v_ >= {highest_double}) return ({type}){highest}; "
        "return ({type})v_; }}())",
        "type"_a = compute_type(to), "value"_a = value,
        "lowest_double"_a = int_limit_as_double(to, false), "lowest"_a = int_limits(to, false),
        "highest_double"_a = int_limit_as_double(to, true), "highest"_a = int_limits(to, true));
  }
  if (to == DType::F16 || to == DType::BF16) return fmt::format("(float)({})", value);
  return fmt::format("({})({})", compute_type(to), value);
}

}  // namespace kiln::cuda

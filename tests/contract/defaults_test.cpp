// The default implementations of the op contract (src/contract/defaults/) against the backend's
// own ops: for every DEFAULT op in ops.def, the default is called explicitly (a qualified call,
// backend.Backend::op(...)) and compared with the virtual call backend.op(...) on the same
// inputs: several dtypes, non-contiguous layouts, NaN/inf, negatives and zeros, empty shapes.
// Where the CPU backend keeps the default itself, the virtual call runs the same code and that
// comparison proves nothing: those rows also check the default against float64 loops written
// here (expect_reference).
//
// An op whose dependencies the backend does not implement yet throws UnsupportedOperation; such
// a row is skipped (and names the missing op), or fails when KILN_DEFAULTS_STRICT=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "conformance/conformance.h"
#include "contract/op_code.h"
#include "distributed/collective_checks.h"
#include "kiln/quant.h"
#include "runtime/registry.h"
#include "support/layer_norm_reference.h"
#include "support/ranks.h"

namespace kiln {
namespace {

using conformance::kFloatDTypes;
using conformance::kIntDTypes;
using conformance::kLayouts;
using conformance::kNumericDTypes;
using conformance::Layout;

// Where the defaults run and where the backend's own ops run (the same CPU backend here; a
// decorator test can pass a different pair).
struct Env {
  Backend& defaults;
  Backend& backend;
  Device device;
};

constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                DType::U16, DType::U8,  DType::Bool};

std::string describe(DType dtype, Layout layout, const Shape& shape) {
  return std::string(dtype_name(dtype)) + " " + conformance::layout_name(layout) + " " +
         shape.to_string();
}

// Random values in [lo, hi] for dtype; for floats the first elements are the specials
// NaN, inf, -inf, 0, -0 (as many as fit) when `specials` is set.
std::vector<double> values_for(const Shape& shape, DType dtype, std::uint64_t seed, double lo = -3,
                               double hi = 3, bool specials = true) {
  std::vector<double> v = conformance::random_values(shape, dtype, seed, lo, hi);
  if (specials && is_float(dtype)) {
    const double special[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0};
    // Spread them so every row of a 2-D input does not get all of them.
    for (std::size_t i = 0; i < 5 && i * 3 < v.size(); ++i) v[i * 3] = special[i];
  }
  return v;
}

Primitive input(const Env& env, const Shape& shape, DType dtype, Layout layout, std::uint64_t seed,
                double lo = -3, double hi = 3, bool specials = true) {
  return conformance::make_primitive(values_for(shape, dtype, seed, lo, hi, specials), shape, dtype,
                                     layout, env.device);
}

Primitive exact(const Env& env, const std::vector<double>& values, const Shape& shape,
                DType dtype) {
  return conformance::make_primitive(values, shape, dtype, Layout::Contiguous, env.device);
}

// The default's result against the backend's: same shape and dtype, values within the dtype's
// tolerance (NaN matches NaN, infinities match exactly, integers and bools exactly).
void expect_same(const Primitive& from_default, const Primitive& from_backend,
                 const std::string& context, double tolerance_scale = 2.0) {
  ASSERT_TRUE(from_default && from_backend) << context;
  const TensorData expected = detail::into_data(from_backend);
  const TensorData got = detail::into_data(from_default);
  ASSERT_EQ(got.shape(), expected.shape()) << context;
  ASSERT_EQ(got.dtype(), expected.dtype()) << context;
  conformance::expect_close(got, expected.shape(), expected.dtype(), expected.to_f64_vec(),
                            context + " (default vs backend)", tolerance_scale);
}

void expect_same(const PrimitivePair& from_default, const PrimitivePair& from_backend,
                 const std::string& context, double tolerance_scale = 2.0) {
  expect_same(from_default.first, from_backend.first, context + " [first]", tolerance_scale);
  expect_same(from_default.second, from_backend.second, context + " [second]", tolerance_scale);
}

// The values of x in float64, broadcast to `to` (numpy's rules: trailing dims, size 1 repeats).
std::vector<double> values_of(const Primitive& x, const Shape& to) {
  const TensorData data = detail::into_data(x);
  const std::vector<double> v = data.to_f64_vec();
  const Shape& from = data.shape();
  std::vector<double> out(static_cast<std::size_t>(to.num_elements()));
  const std::size_t lead = to.rank() - from.rank();
  for (std::size_t flat = 0; flat < out.size(); ++flat) {
    std::size_t rest = flat, source = 0, stride = 1;
    for (std::size_t d = to.rank(); d-- > 0;) {
      const auto size = static_cast<std::size_t>(to[d]);
      const std::size_t coord = rest % size;
      rest /= size;
      if (d < lead) continue;
      const auto from_size = static_cast<std::size_t>(from[d - lead]);
      source += (from_size == 1 ? 0 : coord) * stride;
      stride *= from_size;
    }
    out[flat] = v[source];
  }
  return out;
}

// The default's result against float64 values computed here, elementwise over the result's
// shape: f receives each input's value at the position (inputs broadcast to that shape).
void expect_reference(const Primitive& got, const std::vector<Primitive>& inputs,
                      const std::function<double(const std::vector<double>&)>& f,
                      const std::string& context, double tolerance_scale = 2.0) {
  const TensorData result = detail::into_data(got);
  std::vector<std::vector<double>> columns;
  for (const Primitive& x : inputs) columns.push_back(values_of(x, result.shape()));
  std::vector<double> expected(static_cast<std::size_t>(result.shape().num_elements()));
  std::vector<double> at(inputs.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    for (std::size_t k = 0; k < inputs.size(); ++k) at[k] = columns[k][i];
    expected[i] = f(at);
  }
  conformance::expect_close(result, result.shape(), result.dtype(), expected,
                            context + " (default vs float64 reference)", tolerance_scale);
}

// softmin(x) along dim in float64: exp(-x - max(-x)) / sum, so a row with NaN or +-inf gives
// what that formula gives (NaN where it divides inf by inf or subtracts inf from inf).
void expect_softmin_reference(const Primitive& got, const Primitive& x, std::int64_t dim,
                              const std::string& context) {
  const TensorData data = detail::into_data(x);
  const std::vector<double> v = data.to_f64_vec();
  const Shape& shape = data.shape();
  std::size_t inner = 1;
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < shape.rank(); ++d) {
    inner *= static_cast<std::size_t>(shape[d]);
  }
  const auto length = static_cast<std::size_t>(shape[static_cast<std::size_t>(dim)]);
  const std::size_t outer = length == 0 || inner == 0 ? 0 : v.size() / (length * inner);
  std::vector<double> expected(v.size());
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      auto at = [&](std::size_t k) { return o * length * inner + k * inner + i; };
      double top = -INFINITY;
      bool nan = false;
      for (std::size_t k = 0; k < length; ++k) {
        nan = nan || v[at(k)] != v[at(k)];
        top = std::max(top, -v[at(k)]);
      }
      double sum = 0;
      for (std::size_t k = 0; k < length; ++k) sum += std::exp(-v[at(k)] - top);
      for (std::size_t k = 0; k < length; ++k) {
        expected[at(k)] = nan ? std::nan("") : std::exp(-v[at(k)] - top) / sum;
      }
    }
  }
  conformance::expect_close(detail::into_data(got), shape, data.dtype(), expected,
                            context + " (default vs float64 reference)", 4.0);
}

// Runs op both ways with the same arguments (each a named primitive or value, copied per call).
#define KILN_BOTH(op, ...) env.defaults.Backend::op(__VA_ARGS__), env.backend.op(__VA_ARGS__)

struct Case {
  std::string op;
  std::function<void(const Env&)> run;
};

// Unary float ops over float dtypes and layouts, with specials, optionally in a value range.
void unary_float(const Env& env, const std::function<Primitive(Backend&, Primitive, bool)>& op,
                 double lo = -3, double hi = 3, double tolerance_scale = 2.0) {
  std::uint64_t seed = 11;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{4, 6}, Shape{0, 3}}) {
        Primitive x = input(env, shape, dtype, layout, seed++, lo, hi);
        expect_same(op(env.defaults, x, true), op(env.backend, x, false),
                    describe(dtype, layout, shape), tolerance_scale);
      }
    }
  }
}

// Binary ops over dtypes and layouts, the second operand broadcasting along dim 0.
void binary(const Env& env, std::span<const DType> dtypes,
            const std::function<Primitive(Backend&, Primitive, Primitive, bool)>& op,
            double lo = -3, double hi = 3) {
  std::uint64_t seed = 23;
  for (DType dtype : dtypes) {
    for (Layout layout : kLayouts) {
      const Shape shape{4, 6};
      Primitive a = input(env, shape, dtype, layout, seed++, lo, hi);
      Primitive b = input(env, Shape{1, 6}, dtype, Layout::Contiguous, seed++, lo, hi, false);
      Primitive c = input(env, shape, dtype, Layout::Contiguous, seed++, lo, hi);
      const std::string ctx = describe(dtype, layout, shape);
      expect_same(op(env.defaults, a, b, true), op(env.backend, a, b, false), ctx + " broadcast");
      expect_same(op(env.defaults, a, c, true), op(env.backend, a, c, false), ctx);
    }
    Primitive empty_a = input(env, Shape{0, 3}, dtype, Layout::Contiguous, seed++);
    expect_same(op(env.defaults, empty_a, empty_a, true), op(env.backend, empty_a, empty_a, false),
                std::string(dtype_name(dtype)) + " empty");
  }
}

// Ops on one tensor with a dim, over dtypes, layouts, every dim, and an empty tensor.
void along_dims(const Env& env, std::span<const DType> dtypes,
                const std::function<void(Primitive, std::int64_t, const std::string&)>& check,
                bool specials = true, bool with_empty = true) {
  std::uint64_t seed = 37;
  for (DType dtype : dtypes) {
    for (Layout layout : kLayouts) {
      const Shape shape{3, 4, 5};
      Primitive x = input(env, shape, dtype, layout, seed++, -3, 3, specials);
      for (std::int64_t dim = 0; dim < 3; ++dim) {
        check(x, dim, describe(dtype, layout, shape) + " dim " + std::to_string(dim));
      }
    }
    if (with_empty) {
      Primitive e = input(env, Shape{2, 0, 3}, dtype, Layout::Contiguous, seed++);
      check(e, 2, std::string(dtype_name(dtype)) + " empty");
    }
  }
}

#define KILN_UNARY_CASE(name, ...)                                                     \
  Case {                                                                               \
#name, [](const Env& env) {                                                          \
      unary_float(                                                                       \
          env,                                                                           \
          [](Backend& b, Primitive x, bool use_default) {                                \
            return use_default ? b.Backend::name(std::move(x)) : b.name(std::move(x));   \
          },                                                                             \
          ##__VA_ARGS__);                                                                \
    } \
  }

#define KILN_BINARY_CASE(name, dtypes, ...)                                            \
  Case {                                                                               \
#name, [](const Env& env) {                                                          \
      binary(                                                                            \
          env, dtypes,                                                                   \
          [](Backend& b, Primitive l, Primitive r, bool use_default) {                   \
            return use_default ? b.Backend::name(std::move(l), std::move(r))             \
                               : b.name(std::move(l), std::move(r));                     \
          },                                                                             \
          ##__VA_ARGS__);                                                                \
    } \
  }

std::vector<Case> creation_cases() {
  std::vector<Case> cases;
  cases.push_back({"full", [](const Env& env) {
                     for (DType dtype : kAllDTypes) {
                       for (const Shape& shape : {Shape{3, 4}, Shape{0, 2}, Shape{1}}) {
                         for (Scalar value :
                              {Scalar(2.5), Scalar(-1), Scalar(std::int64_t{9007199254740993}),
                               Scalar(std::nan("")), Scalar(true)}) {
                           // NaN into an integer dtype: the backend's Scalar::as conversion is not
                           // defined.
                           if (is_int(dtype) && std::isnan(value.to_double())) continue;
                           expect_same(KILN_BOTH(full, shape, value, dtype, env.device),
                                       describe(dtype, Layout::Contiguous, shape) + " value " +
                                           std::to_string(value.to_double()));
                         }
                       }
                     }
                   }});
  cases.push_back({"zeros", [](const Env& env) {
                     for (DType dtype : kAllDTypes) {
                       for (const Shape& shape : {Shape{3, 4}, Shape{0}}) {
                         expect_same(KILN_BOTH(zeros, shape, dtype, env.device),
                                     describe(dtype, Layout::Contiguous, shape));
                         expect_reference(
                             env.defaults.Backend::zeros(shape, dtype, env.device), {},
                             [](const std::vector<double>&) { return 0.0; },
                             std::string(dtype_name(dtype)));
                       }
                     }
                   }});
  cases.push_back({"ones", [](const Env& env) {
                     for (DType dtype : kAllDTypes) {
                       for (const Shape& shape : {Shape{2, 3, 2}, Shape{4, 0}}) {
                         expect_same(KILN_BOTH(ones, shape, dtype, env.device),
                                     describe(dtype, Layout::Contiguous, shape));
                         expect_reference(
                             env.defaults.Backend::ones(shape, dtype, env.device), {},
                             [](const std::vector<double>&) { return 1.0; },
                             std::string(dtype_name(dtype)));
                       }
                     }
                   }});
  cases.push_back(
      {"arange", [](const Env& env) {
         const std::int64_t ranges[][3] = {{0, 10, 1}, {-5, 7, 3}, {10, -4, -3}, {3, 3, 1},
                                           {5, 0, 1},  {0, 1, 5},  {-2, -20, -7}};
         for (DType dtype : kNumericDTypes) {
           for (const auto& r : ranges) {
             if (is_unsigned_int(dtype) && (r[0] < 0 || r[1] < -1)) continue;
             expect_same(KILN_BOTH(arange, r[0], r[1], r[2], dtype, env.device),
                         std::string(dtype_name(dtype)) + " arange(" + std::to_string(r[0]) + ", " +
                             std::to_string(r[1]) + ", " + std::to_string(r[2]) + ")");
           }
         }
       }});
  cases.push_back(
      {"to_device", [](const Env& env) {
         std::uint64_t seed = 3;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{3, 4}, dtype, layout, seed++);
             expect_same(KILN_BOTH(to_device, x, env.device), describe(dtype, layout, Shape{3, 4}));
           }
         }
       }});
  return cases;
}

std::vector<Case> arith_cases() {
  std::vector<Case> cases;
  cases.push_back(KILN_BINARY_CASE(maximum, kNumericDTypes));
  cases.push_back(KILN_BINARY_CASE(minimum, kNumericDTypes));
  cases.push_back(KILN_BINARY_CASE(hypot, kFloatDTypes));
  cases.push_back({"hypot_extremes", [](const Env& env) {
                     // No overflow where the result fits; inf wins over NaN; 0 at the origin.
                     const std::vector<double> a = {1e300, 3e-300, 0, INFINITY, std::nan(""), -4};
                     const std::vector<double> b = {1e300, 4e-300, 0, std::nan(""), -INFINITY, 3};
                     Primitive pa = exact(env, a, Shape{6}, DType::F64),
                               pb = exact(env, b, Shape{6}, DType::F64);
                     expect_same(KILN_BOTH(hypot, pa, pb), "hypot extremes");
                   }});
  cases.push_back(KILN_UNARY_CASE(neg));
  cases.push_back(
      {"neg_ints", [](const Env& env) {
         std::uint64_t seed = 5;
         for (DType dtype : kIntDTypes) {
           Primitive x = input(env, Shape{5, 3}, dtype, Layout::Transposed, seed++, -100, 100);
           expect_same(KILN_BOTH(neg, x), std::string(dtype_name(dtype)));
         }
       }});
  auto clamp_case = [](const char* name, int which) {
    return Case{name, [which](const Env& env) {
                  std::uint64_t seed = 7;
                  for (DType dtype : kNumericDTypes) {
                    for (Layout layout : kLayouts) {
                      Primitive x = input(env, Shape{4, 5}, dtype, layout, seed++, -4, 4);
                      const Scalar lo = is_unsigned_int(dtype) ? Scalar(1) : Scalar(-1);
                      const Scalar hi = is_int(dtype) ? Scalar(2) : Scalar(2.5);
                      const std::string ctx = describe(dtype, layout, Shape{4, 5});
                      if (which == 0) expect_same(KILN_BOTH(clamp, x, lo, hi), ctx);
                      if (which == 1) expect_same(KILN_BOTH(clamp_min, x, lo), ctx);
                      if (which == 2) expect_same(KILN_BOTH(clamp_max, x, hi), ctx);
                    }
                  }
                }};
  };
  cases.push_back(clamp_case("clamp", 0));
  cases.push_back(clamp_case("clamp_min", 1));
  cases.push_back(clamp_case("clamp_max", 2));
  cases.push_back(
      {"cross", [](const Env& env) {
         std::uint64_t seed = 9;
         for (DType dtype : kNumericDTypes) {
           for (Layout layout : kLayouts) {
             Primitive a = input(env, Shape{4, 3}, dtype, layout, seed++, -5, 5, false);
             Primitive b = input(env, Shape{1, 3}, dtype, Layout::Contiguous, seed++, -5, 5, false);
             Primitive c = input(env, Shape{3, 4}, dtype, layout, seed++, -5, 5, false);
             Primitive d = input(env, Shape{3, 4}, dtype, Layout::Contiguous, seed++, -5, 5, false);
             const std::string ctx = describe(dtype, layout, Shape{4, 3});
             expect_same(KILN_BOTH(cross, a, b, 1), ctx + " dim 1");
             expect_same(KILN_BOTH(cross, c, d, 0), ctx + " dim 0");
           }
         }
       }});
  return cases;
}

std::vector<Case> unary_cases() {
  std::vector<Case> cases;
  cases.push_back({"sign", [](const Env& env) {
                     std::uint64_t seed = 13;
                     for (DType dtype : kNumericDTypes) {
                       for (Layout layout : kLayouts) {
                         Primitive x = input(env, Shape{4, 6}, dtype, layout, seed++, -2, 2);
                         expect_same(KILN_BOTH(sign, x), describe(dtype, layout, Shape{4, 6}));
                         expect_reference(
                             env.defaults.Backend::sign(x), {x},
                             [](const std::vector<double>& v) {
                               return v[0] != v[0] ? v[0]
                                                   : static_cast<double>((v[0] > 0) - (v[0] < 0));
                             },
                             describe(dtype, layout, Shape{4, 6}));
                       }
                     }
                   }});
  cases.push_back({"square", [](const Env& env) {
                     std::uint64_t seed = 15;
                     for (DType dtype : kNumericDTypes) {
                       for (Layout layout : kLayouts) {
                         Primitive x = input(env, Shape{4, 6}, dtype, layout, seed++, -100, 100);
                         expect_same(KILN_BOTH(square, x), describe(dtype, layout, Shape{4, 6}));
                         // Integers wrap: the values stay within +-100, whose squares every integer
                         // dtype holds except the 8-bit ones, compared modulo 256.
                         expect_reference(
                             env.defaults.Backend::square(x), {x},
                             [dtype](const std::vector<double>& v) {
                               const double sq = v[0] * v[0];
                               if (dtype == DType::I8)
                                 return static_cast<double>(
                                     static_cast<std::int8_t>(static_cast<std::int64_t>(sq)));
                               if (dtype == DType::U8)
                                 return static_cast<double>(
                                     static_cast<std::uint8_t>(static_cast<std::int64_t>(sq)));
                               return sq;
                             },
                             describe(dtype, layout, Shape{4, 6}));
                       }
                     }
                   }});
  cases.push_back(KILN_UNARY_CASE(expm1));
  cases.push_back({"expm1_tiny", [](const Env& env) {
                     // Near 0 exp(x) - 1 would lose every digit; the default must not.
                     const std::vector<double> v = {1e-10, -1e-10, 1e-5, -3e-7,
                                                    0.49,  -0.51,  20,   -20};
                     for (DType dtype : {DType::F64, DType::F32}) {
                       Primitive x = exact(env, v, Shape{8}, dtype);
                       expect_same(KILN_BOTH(expm1, x), std::string(dtype_name(dtype)), 1.0);
                     }
                   }});
  cases.push_back(KILN_UNARY_CASE(exp2, -20, 20));
  cases.push_back(KILN_UNARY_CASE(log2, 0.001, 100));
  cases.push_back(KILN_UNARY_CASE(log10, 0.001, 100));
  cases.push_back(KILN_UNARY_CASE(rsqrt, 0.001, 100));
  return cases;
}

std::vector<Case> compare_cases() {
  std::vector<Case> cases;
  static const std::vector<DType> with_bool(std::begin(kAllDTypes), std::end(kAllDTypes));
  cases.push_back({"not_equal", [](const Env& env) {
                     binary(
                         env, with_bool,
                         [](Backend& b, Primitive l, Primitive r, bool d) {
                           return d ? b.Backend::not_equal(l, r) : b.not_equal(l, r);
                         },
                         -2, 2);
                   }});
  cases.push_back(
      {"not_equal_elem", [](const Env& env) {
         std::uint64_t seed = 17;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{4, 6}, dtype, layout, seed++, -2, 2);
             const Scalar s = dtype == DType::Bool ? Scalar(true) : Scalar(1);
             expect_same(KILN_BOTH(not_equal_elem, x, s), describe(dtype, layout, Shape{4, 6}));
             expect_same(KILN_BOTH(not_equal_elem, x, std::nan("")),
                         describe(dtype, layout, Shape{4, 6}) + " nan");
           }
         }
       }});
  cases.push_back(KILN_UNARY_CASE(is_nan));
  cases.push_back(KILN_UNARY_CASE(is_inf));
  cases.push_back({"logical_xor", [](const Env& env) {
                     static const DType bools[] = {DType::Bool};
                     binary(env, bools, [](Backend& b, Primitive l, Primitive r, bool d) {
                       return d ? b.Backend::logical_xor(l, r) : b.logical_xor(l, r);
                     });
                   }});
#define KILN_BITWISE_CASE(name)                                                                   \
  cases.push_back({#name, [](const Env& env) {                                                    \
                     std::uint64_t seed = 19;                                                     \
                     for (DType dtype : kIntDTypes) {                                             \
                       for (Layout layout : kLayouts) {                                           \
                         Primitive x = input(env, Shape{4, 5}, dtype, layout, seed++, -100, 100); \
                         for (std::int64_t s : {0, 3, 6, 13}) {                                   \
                           expect_same(KILN_BOTH(name, x, s),                                     \
                                       describe(dtype, layout, Shape{4, 5}) + " scalar " +        \
                                           std::to_string(s));                                    \
                         }                                                                        \
                       }                                                                          \
                     }                                                                            \
                   }});
  KILN_BITWISE_CASE(bitwise_and_scalar)
  KILN_BITWISE_CASE(bitwise_or_scalar)
  KILN_BITWISE_CASE(bitwise_xor_scalar)
  KILN_BITWISE_CASE(bitwise_left_shift_scalar)
  KILN_BITWISE_CASE(bitwise_right_shift_scalar)
#undef KILN_BITWISE_CASE
  return cases;
}

std::vector<Case> reduce_cases() {
  std::vector<Case> cases;
  auto full_reduce = [](const char* name, std::span<const DType> dtypes, bool with_empty,
                        Primitive (*both)(Backend&, Primitive, bool)) {
    return Case{name, [=](const Env& env) {
                  std::uint64_t seed = 29;
                  for (DType dtype : dtypes) {
                    for (Layout layout : kLayouts) {
                      Primitive x = input(env, Shape{3, 4, 5}, dtype, layout, seed++, -1.5, 1.5);
                      expect_same(both(env.defaults, x, true), both(env.backend, x, false),
                                  describe(dtype, layout, Shape{3, 4, 5}), 4.0);
                    }
                    if (with_empty) {
                      Primitive e = input(env, Shape{3, 0}, dtype, Layout::Contiguous, seed++);
                      expect_same(both(env.defaults, e, true), both(env.backend, e, false),
                                  std::string(dtype_name(dtype)) + " empty");
                    }
                  }
                }};
  };
#define KILN_FULL_REDUCE(name, dtypes, with_empty)                                             \
  cases.push_back(full_reduce(#name, dtypes, with_empty, [](Backend& b, Primitive x, bool d) { \
    return d ? b.Backend::name(std::move(x)) : b.name(std::move(x));                           \
  }))
  static const std::vector<DType> with_bool(std::begin(kAllDTypes), std::end(kAllDTypes));
  KILN_FULL_REDUCE(sum, kNumericDTypes, true);
  KILN_FULL_REDUCE(mean, kFloatDTypes, true);
  KILN_FULL_REDUCE(prod, kNumericDTypes, true);
  KILN_FULL_REDUCE(max, kNumericDTypes, false);
  KILN_FULL_REDUCE(min, kNumericDTypes, false);
  KILN_FULL_REDUCE(any, with_bool, true);
  KILN_FULL_REDUCE(all, with_bool, true);
#undef KILN_FULL_REDUCE
  cases.push_back(
      {"prod_signs", [](const Env& env) {
         // Negative factors and zeros: exp(sum(log)) would get these wrong.
         const std::vector<double> v = {-2, 3, -1.5, 0.5, -1, 4, 0, -2, -3, -0.25, 2, 2};
         for (DType dtype : {DType::F32, DType::F64, DType::I64, DType::I8}) {
           std::vector<double> values = v;
           if (is_int(dtype)) values = {-2, 3, -1, 5, -1, 4, 0, -2, -3, -1, 2, 2};
           Primitive x = exact(env, values, Shape{3, 4}, dtype);
           expect_same(KILN_BOTH(prod, x), std::string(dtype_name(dtype)));
           for (std::int64_t dim : {0, 1}) {
             expect_same(KILN_BOTH(prod_dim, x, dim), std::string(dtype_name(dtype)) + " dim");
           }
         }
       }});
  cases.push_back({"mean_dim", [](const Env& env) {
                     along_dims(env, kFloatDTypes,
                                [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                                  expect_same(KILN_BOTH(mean_dim, x, dim), ctx, 4.0);
                                });
                   }});
  cases.push_back({"prod_dim", [](const Env& env) {
                     along_dims(env, kNumericDTypes,
                                [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                                  expect_same(KILN_BOTH(prod_dim, x, dim), ctx, 4.0);
                                });
                   }});
  cases.push_back({"max_dim_with_indices", [](const Env& env) {
                     along_dims(
                         env, kNumericDTypes,
                         [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                           for (DType index : {DType::I64, DType::I32}) {
                             expect_same(KILN_BOTH(max_dim_with_indices, x, dim, index), ctx);
                           }
                         },
                         true, false);
                   }});
  cases.push_back({"min_dim_with_indices", [](const Env& env) {
                     along_dims(
                         env, kNumericDTypes,
                         [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                           for (DType index : {DType::I64, DType::I32}) {
                             expect_same(KILN_BOTH(min_dim_with_indices, x, dim, index), ctx);
                           }
                         },
                         true, false);
                   }});
  cases.push_back({"any_dim", [](const Env& env) {
                     along_dims(env, with_bool,
                                [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                                  expect_same(KILN_BOTH(any_dim, x, dim), ctx);
                                });
                   }});
  cases.push_back({"all_dim", [](const Env& env) {
                     along_dims(env, with_bool,
                                [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                                  expect_same(KILN_BOTH(all_dim, x, dim), ctx);
                                });
                   }});
  return cases;
}

// Integer indices as a tensor of dtype.
Primitive indices(const Env& env, const std::vector<double>& values, const Shape& shape,
                  DType dtype = DType::I64) {
  return exact(env, values, shape, dtype);
}

std::vector<Case> index_cases() {
  std::vector<Case> cases;
  cases.push_back({"select_assign", [](const Env& env) {
                     std::uint64_t seed = 41;
                     const IndexingUpdate updates[] = {IndexingUpdate::Assign, IndexingUpdate::Add,
                                                       IndexingUpdate::Mul, IndexingUpdate::Min,
                                                       IndexingUpdate::Max};
                     for (DType dtype : kAllDTypes) {
                       for (Layout layout : kLayouts) {
                         Primitive x = input(env, Shape{4, 5}, dtype, layout, seed++, -3, 3, false);
                         for (IndexingUpdate update : updates) {
                           if (dtype == DType::Bool && update != IndexingUpdate::Assign) continue;
                           // Assign gets distinct indices (duplicates would race); the others
                           // accumulate.
                           const bool distinct = update == IndexingUpdate::Assign;
                           for (std::int64_t dim : {0, 1}) {
                             const std::vector<double> picks = distinct
                                                                   ? std::vector<double>{3, 0}
                                                                   : std::vector<double>{3, 0, 3};
                             const std::int64_t k = static_cast<std::int64_t>(picks.size());
                             const Shape values_shape = dim == 0 ? Shape{k, 5} : Shape{4, k};
                             Primitive values = input(env, values_shape, dtype, Layout::Contiguous,
                                                      seed++, -3, 3, false);
                             for (DType index : {DType::I64, DType::I32}) {
                               Primitive idx = indices(env, picks, Shape{k}, index);
                               expect_same(KILN_BOTH(select_assign, x, dim, idx, values, update),
                                           describe(dtype, layout, Shape{4, 5}) + " dim " +
                                               std::to_string(dim) + " update " +
                                               std::to_string(static_cast<int>(update)));
                             }
                           }
                         }
                       }
                     }
                   }});
  cases.push_back(
      {"gather_nd", [](const Env& env) {
         std::uint64_t seed = 43;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{3, 4, 2}, dtype, layout, seed++);
             const std::string ctx = describe(dtype, layout, Shape{3, 4, 2});
             // depth 1, 2 and 3 index tuples, with a batch of [2, 2] tuples.
             expect_same(KILN_BOTH(gather_nd, x, indices(env, {2, 0, 1, 2}, Shape{2, 2, 1})),
                         ctx + " depth 1");
             expect_same(
                 KILN_BOTH(gather_nd, x,
                           indices(env, {2, 3, 0, 1, 1, 0, 2, 2}, Shape{2, 2, 2}, DType::I32)),
                 ctx + " depth 2");
             expect_same(KILN_BOTH(gather_nd, x, indices(env, {2, 3, 1, 0, 0, 0}, Shape{2, 3})),
                         ctx + " depth 3");
             expect_same(KILN_BOTH(gather_nd, x, indices(env, {}, Shape{0, 2})),
                         ctx + " no tuples");
           }
         }
       }});
  cases.push_back(
      {"scatter_nd", [](const Env& env) {
         std::uint64_t seed = 47;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{3, 4, 2}, dtype, layout, seed++, -3, 3, false);
             const std::string ctx = describe(dtype, layout, Shape{3, 4, 2});
             Primitive tuples = indices(env, {2, 3, 0, 1, 1, 0}, Shape{3, 2});
             Primitive rows =
                 input(env, Shape{3, 2}, dtype, Layout::Contiguous, seed++, -3, 3, false);
             expect_same(KILN_BOTH(scatter_nd, x, tuples, rows, IndexingUpdate::Assign),
                         ctx + " assign");
             if (dtype == DType::Bool) continue;
             Primitive repeated = indices(env, {2, 3, 2, 3, 1, 0}, Shape{3, 2}, DType::I32);
             expect_same(KILN_BOTH(scatter_nd, x, repeated, rows, IndexingUpdate::Add),
                         ctx + " add");
             Primitive points = indices(env, {2, 3, 1, 0, 0, 1}, Shape{2, 3});
             Primitive scalars =
                 input(env, Shape{2}, dtype, Layout::Contiguous, seed++, -3, 3, false);
             expect_same(KILN_BOTH(scatter_nd, x, points, scalars, IndexingUpdate::Max),
                         ctx + " max");
           }
         }
       }});
  cases.push_back(
      {"mask_select", [](const Env& env) {
         std::uint64_t seed = 53;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{4, 5}, dtype, layout, seed++);
             Primitive mask = input(env, Shape{4, 5}, DType::Bool, layout, seed++);
             expect_same(KILN_BOTH(mask_select, x, mask), describe(dtype, layout, Shape{4, 5}));
           }
           Primitive e = input(env, Shape{0, 5}, dtype, Layout::Contiguous, seed++);
           Primitive em = input(env, Shape{0, 5}, DType::Bool, Layout::Contiguous, seed++);
           expect_same(KILN_BOTH(mask_select, e, em), std::string(dtype_name(dtype)) + " empty");
         }
       }});
  cases.push_back({"argwhere", [](const Env& env) {
                     std::uint64_t seed = 59;
                     for (Layout layout : kLayouts) {
                       for (const Shape& shape : {Shape{3, 4, 5}, Shape{7}, Shape{2, 0, 3}}) {
                         if (shape.rank() == 1 && layout == Layout::Transposed) continue;
                         Primitive mask = input(env, shape, DType::Bool, layout, seed++);
                         for (DType index : {DType::I64, DType::I32}) {
                           expect_same(KILN_BOTH(argwhere, mask, index),
                                       describe(DType::Bool, layout, shape));
                         }
                       }
                     }
                   }});
  return cases;
}

std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  cases.push_back(
      {"swap_dims", [](const Env& env) {
         std::uint64_t seed = 61;
         for (DType dtype : kAllDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{2, 3, 4}, dtype, layout, seed++);
             for (auto [a, b] : {std::pair<int, int>{0, 1}, {1, 2}, {0, 2}, {1, 1}}) {
               expect_same(KILN_BOTH(swap_dims, x, a, b), describe(dtype, layout, Shape{2, 3, 4}));
             }
           }
         }
       }});
  cases.push_back({"cat", [](const Env& env) {
                     std::uint64_t seed = 67;
                     for (DType dtype : kAllDTypes) {
                       for (Layout layout : kLayouts) {
                         for (std::int64_t dim = 0; dim < 3; ++dim) {
                           PrimitiveList xs;
                           for (std::int64_t size : {2, 0, 3, 1}) {
                             Shape shape{2, 3, 4};
                             shape[static_cast<std::size_t>(dim)] = size;
                             xs.push_back(input(env, shape, dtype,
                                                size == 0 ? Layout::Contiguous : layout, seed++));
                           }
                           expect_same(KILN_BOTH(cat, xs, dim),
                                       describe(dtype, layout, Shape{2, 3, 4}) + " dim " +
                                           std::to_string(dim));
                           PrimitiveList one = {xs.front()};
                           expect_same(KILN_BOTH(cat, one, dim),
                                       describe(dtype, layout, Shape{2, 3, 4}) + " single");
                         }
                       }
                     }
                   }});
  cases.push_back({"repeat_dim", [](const Env& env) {
                     along_dims(env, kAllDTypes,
                                [&](Primitive x, std::int64_t dim, const std::string& ctx) {
                                  for (std::int64_t times : {0, 1, 3}) {
                                    expect_same(KILN_BOTH(repeat_dim, x, dim, times),
                                                ctx + " times " + std::to_string(times));
                                  }
                                });
                   }});
  return cases;
}

// Distinct values (a shuffled range) with one NaN, inf and -inf in different lines of every
// dim of a [3, 4, 5] tensor, so sorting has a single right answer, indices included.
Primitive sortable(const Env& env, DType dtype, Layout layout, std::uint64_t seed) {
  const Shape shape{3, 4, 5};
  std::vector<double> v(60);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>(i) - (is_unsigned_int(dtype) ? 0 : 30);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  if (is_float(dtype)) {
    for (double& x : v) x *= 0.25;  // exact in every float dtype
    v[0] = std::nan("");
    v[7] = INFINITY;
    v[14] = -INFINITY;
  }
  return conformance::make_primitive(v, shape, dtype, layout, env.device);
}

std::vector<Case> sort_cases() {
  std::vector<Case> cases;
  auto each =
      [](const Env& env,
         const std::function<void(Primitive, std::int64_t, bool, const std::string&)>& check) {
        std::uint64_t seed = 71;
        for (DType dtype : kNumericDTypes) {
          for (Layout layout : kLayouts) {
            Primitive x = sortable(env, dtype, layout, seed++);
            for (std::int64_t dim = 0; dim < 3; ++dim) {
              for (bool descending : {false, true}) {
                check(x, dim, descending,
                      describe(dtype, layout, Shape{3, 4, 5}) + " dim " + std::to_string(dim) +
                          (descending ? " desc" : " asc"));
              }
            }
          }
          Primitive e = input(env, Shape{2, 0}, dtype, Layout::Contiguous, seed++);
          check(e, 1, false, std::string(dtype_name(dtype)) + " empty");
        }
      };
  cases.push_back(
      {"sort", [each](const Env& env) {
         each(env, [&](Primitive x, std::int64_t dim, bool desc, const std::string& ctx) {
           expect_same(KILN_BOTH(sort, x, dim, desc), ctx);
         });
         // Ties: values only (an unstable sort may order equal values' indices differently).
         Primitive ties = input(env, Shape{4, 9}, DType::I32, Layout::Transposed, 5, -2, 2);
         expect_same(KILN_BOTH(sort, ties, 1, false), "ties");
       }});
  cases.push_back({"argsort", [each](const Env& env) {
                     each(env,
                          [&](Primitive x, std::int64_t dim, bool desc, const std::string& ctx) {
                            for (DType index : {DType::I64, DType::I32})
                              expect_same(KILN_BOTH(argsort, x, dim, desc, index), ctx);
                          });
                   }});
  cases.push_back(
      {"sort_with_indices", [each](const Env& env) {
         each(env, [&](Primitive x, std::int64_t dim, bool desc, const std::string& ctx) {
           expect_same(KILN_BOTH(sort_with_indices, x, dim, desc, DType::I64), ctx);
         });
         // Values only: the backend need not order equal keys' indices as the default does.
         auto check_values = [&](const Primitive& x, std::int64_t dim, bool desc,
                                 const std::string& ctx) {
           expect_same(env.defaults.Backend::sort_with_indices(x, dim, desc, DType::I64).first,
                       env.backend.sort_with_indices(x, dim, desc, DType::I64).first, ctx);
         };
         // Several NaNs, zeros of both signs and repeated infinities in one line.
         const std::vector<double> special{0.0,       -0.0, NAN,  1.5, -INFINITY, NAN, INFINITY,
                                           -INFINITY, -1.5, -0.0, 0.0, NAN,       2.0, -2.0};
         for (DType dtype : kFloatDTypes) {
           Primitive x = conformance::make_primitive(special, Shape{2, 7}, dtype,
                                                     Layout::Transposed, env.device);
           for (bool desc : {false, true}) {
             check_values(x, 0, desc, std::string(dtype_name(dtype)) + " special");
             check_values(x, 1, desc, std::string(dtype_name(dtype)) + " special");
           }
         }
       }});
  cases.push_back(
      {"topk_with_indices", [each](const Env& env) {
         each(env, [&](Primitive x, std::int64_t dim, bool largest, const std::string& ctx) {
           const std::int64_t n = x->shape()[static_cast<std::size_t>(dim)];
           for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, n / 2, n}) {
             if (k > n) continue;
             expect_same(KILN_BOTH(topk_with_indices, x, k, dim, largest, DType::I64),
                         ctx + " k " + std::to_string(k));
           }
         });
       }});
  return cases;
}

constexpr DType kConvDTypes[] = {DType::F32, DType::F64, DType::BF16};

// A convolution problem: x, weight and options; the output gradient has conv's output shape.
struct ConvProblem {
  Shape x, weight;
  ConvOptions options;
};

Shape conv_output_shape(const ConvProblem& p) {
  Shape out{p.x[0], p.weight[0]};
  detail::DimVector dims(out.vector());
  for (std::size_t i = 0; i + 2 < p.x.rank(); ++i) {
    const std::int64_t span =
        p.x[i + 2] + 2 * p.options.padding[i] - p.options.dilation[i] * (p.weight[i + 2] - 1) - 1;
    dims.push_back(span / p.options.stride[i] + 1);
  }
  return Shape(std::move(dims));
}

const std::vector<ConvProblem>& conv_problems() {
  static const std::vector<ConvProblem> problems = {
      {Shape{2, 4, 9}, Shape{6, 2, 3}, ConvOptions{{2}, {1}, {1}, 2}},
      {Shape{2, 3, 8}, Shape{2, 3, 2}, ConvOptions{{1}, {0}, {3}, 1}},
      {Shape{2, 2, 7, 6}, Shape{3, 2, 3, 2}, ConvOptions{{2, 1}, {1, 0}, {1, 2}, 1}},
      {Shape{1, 4, 5, 5}, Shape{4, 1, 3, 3}, ConvOptions{{1, 2}, {1, 1}, {1, 1}, 4}},
  };
  return problems;
}

void conv_backward(const Env& env, int which) {
  std::uint64_t seed = 79;
  for (DType dtype : kConvDTypes) {
    for (const ConvProblem& p : conv_problems()) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        Primitive x = input(env, p.x, dtype, layout, seed++, -1, 1, false);
        Primitive w = input(env, p.weight, dtype, Layout::Contiguous, seed++, -1, 1, false);
        Primitive g = input(env, conv_output_shape(p), dtype, layout, seed++, -1, 1, false);
        const std::string ctx = describe(dtype, layout, p.x) + " weight " + p.weight.to_string();
        if (which == 0) expect_same(KILN_BOTH(conv_x_backward, x, w, g, p.options), ctx, 8.0);
        if (which == 1) expect_same(KILN_BOTH(conv_weight_backward, x, w, g, p.options), ctx, 8.0);
        if (which == 2) expect_same(KILN_BOTH(conv_bias_backward, g), ctx, 8.0);
      }
    }
  }
}

std::vector<Case> module_cases() {
  std::vector<Case> cases;
  cases.push_back({"conv_x_backward", [](const Env& env) { conv_backward(env, 0); }});
  cases.push_back({"conv_weight_backward", [](const Env& env) { conv_backward(env, 1); }});
  cases.push_back({"conv_bias_backward", [](const Env& env) { conv_backward(env, 2); }});
  cases.push_back(
      {"max_pool", [](const Env& env) {
         std::uint64_t seed = 83;
         const PoolOptions two_d{{3, 2}, {2, 2}, {1, 0}, {1, 1}, false, true};
         const PoolOptions one_d{{2}, {1}, {0}, {2}, true, true};
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x4 = input(env, Shape{2, 3, 7, 6}, dtype, layout, seed++, -3, 3, false);
             expect_same(KILN_BOTH(max_pool, x4, two_d),
                         describe(dtype, layout, Shape{2, 3, 7, 6}));
             Primitive x3 = input(env, Shape{2, 3, 8}, dtype, layout, seed++, -3, 3, false);
             expect_same(KILN_BOTH(max_pool, x3, one_d), describe(dtype, layout, Shape{2, 3, 8}));
           }
         }
       }});
  cases.push_back(
      {"embedding", [](const Env& env) {
         std::uint64_t seed = 89;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive w = input(env, Shape{10, 4}, dtype, layout, seed++);
             for (DType index : {DType::I64, DType::I32}) {
               Primitive idx = indices(env, {3, 9, 0, 3, 7, 1}, Shape{2, 3}, index);
               expect_same(KILN_BOTH(embedding, w, idx), describe(dtype, layout, Shape{10, 4}));
             }
             Primitive none = indices(env, {}, Shape{0, 3});
             expect_same(KILN_BOTH(embedding, w, none),
                         describe(dtype, layout, Shape{10, 4}) + " empty");
           }
         }
       }});
  cases.push_back(
      {"embedding_backward", [](const Env& env) {
         std::uint64_t seed = 97;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive w = input(env, Shape{10, 4}, dtype, Layout::Contiguous, seed++);
             Primitive g = input(env, Shape{2, 3, 4}, dtype, layout, seed++, -3, 3, false);
             Primitive idx = indices(env, {3, 9, 0, 3, 7, 3}, Shape{2, 3});
             expect_same(KILN_BOTH(embedding_backward, w, g, idx),
                         describe(dtype, layout, Shape{2, 3, 4}), 4.0);
           }
         }
       }});
  const UnfoldOptions patches{{2, 3}, {2, 1}, {1, 1}, {1, 2}};
  cases.push_back(
      {"unfold_patches", [patches](const Env& env) {
         std::uint64_t seed = 101;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{2, 3, 6, 7}, dtype, layout, seed++, -3, 3, false);
             expect_same(KILN_BOTH(unfold_patches, x, patches),
                         describe(dtype, layout, Shape{2, 3, 6, 7}));
             expect_same(
                 KILN_BOTH(unfold_patches, x, UnfoldOptions{{1, 1}, {1, 1}, {0, 0}, {1, 1}}),
                 describe(dtype, layout, Shape{2, 3, 6, 7}) + " 1x1");
           }
         }
       }});
  cases.push_back(
      {"fold_patches", [patches](const Env& env) {
         std::uint64_t seed = 103;
         // Output 6x7 with the options above: 4 x 5 windows of 2 x 3 taps.
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive cols = input(env, Shape{2, 18, 20}, dtype, layout, seed++, -3, 3, false);
             expect_same(KILN_BOTH(fold_patches, cols, Axes{6, 7}, patches),
                         describe(dtype, layout, Shape{2, 18, 20}), 4.0);
           }
         }
       }});
  cases.push_back(
      {"linear", [](const Env& env) {
         std::uint64_t seed = 107;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{2, 3, 4}, dtype, layout, seed++, -2, 2, false);
             Primitive w = input(env, Shape{4, 5}, dtype, layout, seed++, -2, 2, false);
             Primitive b = input(env, Shape{5}, dtype, Layout::Contiguous, seed++, -2, 2, false);
             const std::string ctx = describe(dtype, layout, Shape{2, 3, 4});
             expect_same(KILN_BOTH(linear, x, w, b), ctx + " bias", 8.0);
             expect_same(KILN_BOTH(linear, x, w, std::nullopt), ctx, 8.0);
           }
         }
       }});
  cases.push_back(
      {"layer_norm", [](const Env& env) {
         std::uint64_t seed = 109;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{3, 4, 6}, dtype, layout, seed++, -3, 3, false);
             Primitive gamma =
                 input(env, Shape{6}, dtype, Layout::Contiguous, seed++, 0.5, 2, false);
             Primitive beta = input(env, Shape{6}, dtype, Layout::Contiguous, seed++, -1, 1, false);
             const std::string ctx = describe(dtype, layout, Shape{3, 4, 6});
             expect_same(KILN_BOTH(layer_norm, x, gamma, beta, 1e-5), ctx, 8.0);
             expect_same(KILN_BOTH(layer_norm, x, gamma, std::nullopt, 0.1), ctx + " no beta", 8.0);
           }
         }
       }});
  cases.push_back(
      {"layer_norm_backward", [](const Env& env) {
         std::uint64_t seed = 111;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             const Shape shape{3, 4, 6};
             Primitive x = input(env, shape, dtype, layout, seed++, -3, 3, false);
             Primitive gamma =
                 input(env, Shape{6}, dtype, Layout::Contiguous, seed++, 0.5, 2, false);
             Primitive grad = input(env, shape, dtype, Layout::Contiguous, seed++, -1, 1, false);
             std::vector<double> dx, dgamma;
             test::layer_norm_backward_reference(
                 detail::into_data(x).to_f64_vec(), 6, detail::into_data(gamma).to_f64_vec(),
                 detail::into_data(grad).to_f64_vec(), 1e-5, dx, dgamma);
             const auto [got_dx, got_dgamma] =
                 env.defaults.Backend::layer_norm_backward(x, gamma, grad, 1e-5);
             const std::string ctx = describe(dtype, layout, shape);
             conformance::expect_close(detail::into_data(got_dx), shape, dtype, dx,
                                       ctx + " dx (default vs float64 reference)", 8.0);
             conformance::expect_close(detail::into_data(got_dgamma), Shape{6}, dtype, dgamma,
                                       ctx + " dgamma (default vs float64 reference)", 8.0);
           }
         }
       }});
  cases.push_back(
      {"batch_norm", [](const Env& env) {
         std::uint64_t seed = 113;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             for (const Shape& shape : {Shape{2, 3, 4}, Shape{5, 3}}) {
               Primitive x = input(env, shape, dtype, layout, seed++, -3, 3, false);
               Primitive gamma =
                   input(env, Shape{3}, dtype, Layout::Contiguous, seed++, 0.5, 2, false);
               Primitive beta =
                   input(env, Shape{3}, dtype, Layout::Contiguous, seed++, -1, 1, false);
               Primitive mean =
                   input(env, Shape{3}, dtype, Layout::Contiguous, seed++, -1, 1, false);
               Primitive var =
                   input(env, Shape{3}, dtype, Layout::Contiguous, seed++, 0.1, 3, false);
               expect_same(KILN_BOTH(batch_norm, x, gamma, beta, mean, var, 1e-5),
                           describe(dtype, layout, shape), 8.0);
             }
           }
         }
       }});
  cases.push_back(
      {"attention", [](const Env& env) {
         std::uint64_t seed = 127;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive q = input(env, Shape{2, 2, 3, 4}, dtype, layout, seed++, -1, 1, false);
             Primitive k = input(env, Shape{2, 2, 5, 4}, dtype, layout, seed++, -1, 1, false);
             Primitive v = input(env, Shape{2, 2, 5, 3}, dtype, layout, seed++, -1, 1, false);
             // Excludes some keys but never a whole row (key 0 stays visible).
             std::vector<double> mask_values =
                 conformance::random_values(Shape{2, 1, 3, 5}, DType::Bool, seed++);
             for (std::size_t i = 0; i < mask_values.size(); i += 5) mask_values[i] = 0;
             Primitive mask = exact(env, mask_values, Shape{2, 1, 3, 5}, DType::Bool);
             Primitive bias =
                 input(env, Shape{1, 2, 3, 5}, dtype, Layout::Contiguous, seed++, -1, 1, false);
             const std::string ctx = describe(dtype, layout, Shape{2, 2, 3, 4});
             const Primitive dropout_seed = exact(env, {918273.0}, Shape{1}, DType::I64);
             expect_same(KILN_BOTH(attention, q, k, v, std::nullopt, std::nullopt, std::nullopt,
                                   AttentionOptions{}),
                         ctx, 8.0);
             expect_same(KILN_BOTH(attention, q, k, v, mask, bias, std::nullopt,
                                   AttentionOptions{0.7, false}),
                         ctx + " mask bias", 8.0);
             expect_same(KILN_BOTH(attention, q, k, v, mask, std::nullopt, std::nullopt,
                                   AttentionOptions{std::nullopt, true}),
                         ctx + " causal", 8.0);
             expect_same(KILN_BOTH(attention, q, k, v, mask, bias, dropout_seed,
                                   AttentionOptions{std::nullopt, true, 0.4}),
                         ctx + " causal mask bias dropout", 8.0);
           }
         }
       }});
  // The gradients: the forward's output from the backend, a random output gradient.
  auto attention_backward = [](const Env& env, bool query) {
    std::uint64_t seed = 137;
    for (DType dtype : kFloatDTypes) {
      for (Layout layout : kLayouts) {
        Primitive q = input(env, Shape{2, 2, 3, 4}, dtype, layout, seed++, -1, 1, false);
        Primitive k = input(env, Shape{2, 1, 5, 4}, dtype, layout, seed++, -1, 1, false);
        Primitive v = input(env, Shape{2, 1, 5, 3}, dtype, layout, seed++, -1, 1, false);
        Primitive bias =
            input(env, Shape{1, 2, 3, 5}, dtype, Layout::Contiguous, seed++, -1, 1, false);
        Primitive g = input(env, Shape{2, 2, 3, 3}, dtype, layout, seed++, -1, 1, false);
        const std::string ctx = describe(dtype, layout, Shape{2, 2, 3, 4});
        const Primitive dropout_seed = exact(env, {4242.0}, Shape{1}, DType::I64);
        for (const AttentionOptions options :
             {AttentionOptions{}, AttentionOptions{std::nullopt, true},
              AttentionOptions{std::nullopt, true, 0.3}}) {
          const OptionalPrimitive seed_in =
              options.dropout > 0 ? OptionalPrimitive(dropout_seed) : std::nullopt;
          Primitive out = env.backend.attention(q, k, v, std::nullopt, bias, seed_in, options);
          if (query) {
            expect_same(KILN_BOTH(attention_query_backward, q, k, v, out, g, std::nullopt, bias,
                                  seed_in, options),
                        ctx, 8.0);
          } else {
            expect_same(KILN_BOTH(attention_key_value_backward, q, k, v, out, g, std::nullopt, bias,
                                  seed_in, options),
                        ctx, 8.0);
          }
        }
      }
    }
  };
  cases.push_back({"attention_query_backward",
                   [attention_backward](const Env& env) { attention_backward(env, true); }});
  cases.push_back({"attention_key_value_backward",
                   [attention_backward](const Env& env) { attention_backward(env, false); }});
  return cases;
}

std::vector<Case> activation_cases() {
  std::vector<Case> cases;
  cases.push_back(KILN_UNARY_CASE(relu));
  cases.push_back(KILN_UNARY_CASE(gelu, -8, 8));
  cases.push_back(KILN_UNARY_CASE(sigmoid, -100, 100));
  cases.push_back(KILN_UNARY_CASE(silu, -100, 100));
  cases.push_back(KILN_UNARY_CASE(log_sigmoid, -100, 100));
  cases.push_back({"leaky_relu", [](const Env& env) {
                     unary_float(env, [](Backend& b, Primitive x, bool d) {
                       return d ? b.Backend::leaky_relu(x, 0.125) : b.leaky_relu(x, 0.125);
                     });
                   }});
  cases.push_back({"hard_sigmoid", [](const Env& env) {
                     unary_float(env, [](Backend& b, Primitive x, bool d) {
                       return d ? b.Backend::hard_sigmoid(x, 0.2, 0.5)
                                : b.hard_sigmoid(x, 0.2, 0.5);
                     });
                     std::uint64_t seed = 211;
                     for (DType dtype : kFloatDTypes) {
                       for (Layout layout : kLayouts) {
                         Primitive x = input(env, Shape{4, 6}, dtype, layout, seed++, -6, 6);
                         expect_reference(
                             env.defaults.Backend::hard_sigmoid(x, 0.2, 0.5), {x},
                             [](const std::vector<double>& v) {
                               return v[0] != v[0] ? v[0] : std::clamp(0.2 * v[0] + 0.5, 0.0, 1.0);
                             },
                             describe(dtype, layout, Shape{4, 6}));
                       }
                     }
                   }});
  cases.push_back(
      {"prelu", [](const Env& env) {
         std::uint64_t seed = 131;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             Primitive x = input(env, Shape{4, 6}, dtype, layout, seed++);
             for (const Shape& alpha_shape : {Shape{1, 6}, Shape{1, 1}, Shape{4, 6}}) {
               Primitive alpha =
                   input(env, alpha_shape, dtype, Layout::Contiguous, seed++, 0, 1, false);
               expect_same(KILN_BOTH(prelu, x, alpha), describe(dtype, layout, Shape{4, 6}) +
                                                           " alpha " + alpha_shape.to_string());
               expect_reference(
                   env.defaults.Backend::prelu(x, alpha), {x, alpha},
                   [](const std::vector<double>& v) { return v[0] < 0 ? v[1] * v[0] : v[0]; },
                   describe(dtype, layout, Shape{4, 6}) + " alpha " + alpha_shape.to_string());
             }
           }
         }
       }});
  auto backward = [](const char* name, int which) {
    return Case{
        name, [which](const Env& env) {
          std::uint64_t seed = 137;
          for (DType dtype : kFloatDTypes) {
            for (Layout layout : kLayouts) {
              Primitive a = input(env, Shape{4, 6}, dtype, layout, seed++, which == 1 ? 0 : -4,
                                  which == 1 ? 1 : 4);
              Primitive g =
                  input(env, Shape{4, 6}, dtype, Layout::Contiguous, seed++, -2, 2, false);
              const std::string ctx = describe(dtype, layout, Shape{4, 6});
              if (which == 0) expect_same(KILN_BOTH(relu_backward, a, g), ctx);
              if (which == 1) expect_same(KILN_BOTH(sigmoid_backward, a, g), ctx);
              if (which == 2) expect_same(KILN_BOTH(gelu_backward, a, g), ctx, 4.0);
              // relu and sigmoid take their output, gelu its input (ops.def).
              // PyTorch's rule: the gradient passes unless the output is <= 0, so a NaN passes it.
              if (which == 0) {
                expect_reference(
                    env.defaults.Backend::relu_backward(a, g), {a, g},
                    [](const std::vector<double>& v) { return v[0] <= 0 ? 0.0 : v[1]; }, ctx);
              }
              if (which == 1) {
                expect_reference(
                    env.defaults.Backend::sigmoid_backward(a, g), {a, g},
                    [](const std::vector<double>& v) { return v[1] * v[0] * (1 - v[0]); }, ctx);
              }
              if (which == 2) {
                expect_reference(
                    env.defaults.Backend::gelu_backward(a, g), {a, g},
                    [](const std::vector<double>& v) {
                      const double x = v[0];
                      const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
                      const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
                      // x phi(x) tends to 0 at +-inf (the derivative's limits are 1 and 0).
                      return v[1] * (cdf + (std::isinf(x) ? 0.0 : x * pdf));
                    },
                    ctx, 4.0);
              }
            }
          }
        }};
  };
  cases.push_back(backward("relu_backward", 0));
  cases.push_back(backward("sigmoid_backward", 1));
  cases.push_back(backward("gelu_backward", 2));
  auto softmax_like = [](const char* name, int which) {
    return Case{
        name, [which](const Env& env) {
          auto check = [&](Primitive x, std::int64_t dim, const std::string& ctx) {
            if (which == 0) expect_same(KILN_BOTH(softmax, x, dim), ctx, 4.0);
            if (which == 1) expect_same(KILN_BOTH(log_softmax, x, dim), ctx, 4.0);
            if (which == 2) {
              expect_same(KILN_BOTH(softmin, x, dim), ctx, 4.0);
              expect_softmin_reference(env.defaults.Backend::softmin(x, dim), x, dim, ctx);
            }
          };
          along_dims(env, kFloatDTypes, check, false);
          along_dims(env, kFloatDTypes, check, true, false);  // rows with NaN and inf
          // Large logits: a naive exp would overflow.
          Primitive big = exact(env, {1000, 999, -1000, 0, 5000, 4999}, Shape{2, 3}, DType::F32);
          check(big, 1, "large logits");
        }};
  };
  cases.push_back(softmax_like("softmax", 0));
  cases.push_back(softmax_like("log_softmax", 1));
  cases.push_back(softmax_like("softmin", 2));
  // Against conformance's float64 reference on every float dtype and layout, with rows of
  // specials (NaN, +-inf, +-0), and with no rows.
  cases.push_back(
      {"softmax_cross_entropy", [](const Env& env) {
         std::uint64_t seed = 151;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             for (const Shape& shape : {Shape{5, 7}, Shape{3, 1}, Shape{0, 4}}) {
               const bool specials = layout == Layout::Contiguous;
               Primitive x = input(env, shape, dtype, layout, seed++, -6, 6, specials);
               std::vector<double> picks = conformance::random_values(
                   Shape{shape[0]}, DType::I64, seed++, 0, double(shape[1] - 1));
               Primitive t = exact(env, picks, Shape{shape[0]}, DType::I64);
               const std::string ctx = describe(dtype, layout, shape);
               const TensorData got =
                   detail::into_data(env.defaults.Backend::softmax_cross_entropy(x, t));
               const DType want = is_float(dtype) && dtype_size(dtype) == 2 ? DType::F32 : dtype;
               ASSERT_EQ(got.dtype(), want) << ctx;
               ASSERT_EQ(got.shape(), Shape{shape[0]}) << ctx;
               const std::vector<double> expected = conformance::ref_softmax_cross_entropy(
                   detail::into_data(x).to_f64_vec(), static_cast<std::size_t>(shape[1]), picks);
               conformance::expect_close(got, got.shape(), got.dtype(), expected,
                                         ctx + " (default vs float64 reference)", 4.0);
             }
           }
         }
       }});
  return cases;
}

std::vector<Case> transaction_cases() {
  std::vector<Case> cases;
  cases.push_back(
      {"read_many", [](const Env& env) {
         std::uint64_t seed = 139;
         PrimitiveList xs;
         std::vector<std::vector<double>> written;  // the values each input was made from
         for (DType dtype : kAllDTypes) {
           for (const Shape& shape : {Shape{3, 4}, Shape{0, 2}}) {
             written.push_back(values_for(shape, dtype, seed));
             xs.push_back(input(env, shape, dtype,
                                shape[0] == 0 ? Layout::Contiguous : Layout::Transposed, seed++));
           }
         }
         const std::vector<TensorData> got = env.defaults.Backend::read_many(xs).get();
         const std::vector<TensorData> expected = env.backend.read_many(xs).get();
         ASSERT_EQ(got.size(), xs.size());
         ASSERT_EQ(expected.size(), xs.size());
         for (std::size_t i = 0; i < xs.size(); ++i) {
           ASSERT_EQ(got[i].dtype(), expected[i].dtype()) << i;
           ASSERT_EQ(got[i].shape(), expected[i].shape()) << i;
           EXPECT_TRUE(std::equal(got[i].bytes().begin(), got[i].bytes().end(),
                                  expected[i].bytes().begin(), expected[i].bytes().end()))
               << "read " << i;
           conformance::expect_close(
               got[i], xs[i]->shape(), xs[i]->dtype(), written[i],
               "read " + std::to_string(i) + " (default vs the values written)");
         }
         EXPECT_TRUE(env.defaults.Backend::read_many({}).get().empty());
       }});
  return cases;
}

// The collectives' defaults (the CPU has no kernels of its own for them), called as Backend's
// own on the two ranks of a thread group (a group of one where kiln was built without Gloo),
// against the values every rank can compute (tests/distributed/collective_checks.h).
std::vector<Case> distributed_cases() {
  using Check = void (*)(const Env&, const ProcessGroup&, DType, const Primitive&);
  static const Shape shape{4, 3};
  auto on_ranks = [](std::string op, bool reduces, Check check) {
    return Case{std::move(op), [reduces, check](const Env& env) {
                  const std::vector<ProcessGroup> groups =
                      distributed::available() ? ProcessGroup::threads(2)
                                               : std::vector<ProcessGroup>{ProcessGroup::single()};
                  const std::vector<DType> dtypes =
                      reduces ? std::vector<DType>{DType::F32, DType::BF16, DType::I16, DType::U8}
                              : std::vector<DType>{DType::F64, DType::F16, DType::I64, DType::Bool};
                  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
                    for (DType dtype : dtypes) {
                      const Primitive x =
                          conformance::make_primitive(test::rank_values(shape, dtype, group.rank()),
                                                      shape, dtype, Layout::Transposed, env.device);
                      check(env, group, dtype, x);
                    }
                  }));
                }};
  };
  std::vector<Case> cases;
  cases.push_back(
      on_ranks("all_reduce", true,
               [](const Env& env, const ProcessGroup& group, DType dtype, const Primitive& x) {
                 for (ReduceOperation op : {ReduceOperation::Mean, ReduceOperation::Min}) {
                   conformance::expect_close(
                       detail::into_data(env.defaults.Backend::all_reduce(x, op, group)), shape,
                       dtype, test::reduced_values(shape, dtype, group.size(), op),
                       "rank " + std::to_string(group.rank()) + " " + test::operation_name(op));
                 }
               }));
  cases.push_back(on_ranks(
      "reduce_scatter", true,
      [](const Env& env, const ProcessGroup& group, DType dtype, const Primitive& x) {
        const Shape chunk{4 / group.size(), 3};
        conformance::expect_close(
            detail::into_data(env.defaults.Backend::reduce_scatter(x, ReduceOperation::Max, group)),
            chunk, dtype,
            test::chunk_of(test::reduced_values(shape, dtype, group.size(), ReduceOperation::Max),
                           group.rank(), group.size()),
            "rank " + std::to_string(group.rank()));
      }));
  cases.push_back(on_ranks(
      "broadcast_from", false,
      [](const Env& env, const ProcessGroup& group, DType dtype, const Primitive& x) {
        const int root = group.size() - 1;
        conformance::expect_close(
            detail::into_data(env.defaults.Backend::broadcast_from(x, root, group)), shape, dtype,
            test::rank_values(shape, dtype, root), "rank " + std::to_string(group.rank()));
      }));
  cases.push_back(on_ranks(
      "all_gather", false,
      [](const Env& env, const ProcessGroup& group, DType dtype, const Primitive& x) {
        std::vector<double> all;
        for (int r = 0; r < group.size(); ++r) {
          const std::vector<double> v = test::rank_values(shape, dtype, r);
          all.insert(all.end(), v.begin(), v.end());
        }
        conformance::expect_close(detail::into_data(env.defaults.Backend::all_gather(x, group)),
                                  Shape{4 * group.size(), 3}, dtype, all,
                                  "rank " + std::to_string(group.rank()));
      }));
  // send and recv: rank 0 sends its x, rank 1 receives it (a group of one has no peer).
  for (const char* op : {"send", "recv"}) {
    cases.push_back(on_ranks(
        op, false, [](const Env& env, const ProcessGroup& group, DType dtype, const Primitive& x) {
          if (group.size() < 2) return;
          if (group.rank() == 0) {
            EXPECT_EQ(env.defaults.Backend::send(x, 1, group), x);  // send returns its input
          } else {
            conformance::expect_close(
                detail::into_data(env.defaults.Backend::recv(shape, dtype, env.device, 0, group)),
                shape, dtype, test::rank_values(shape, dtype, 0), "rank 1");
          }
        }));
  }
  return cases;
}

// quantize and dequantize through the host (TensorData's codecs) against the backend's kernels:
// the same blocks, and the same values in every float dtype, for views in every layout and for
// a transposed quantized tensor (its default reads it back decoded).
std::vector<Case> quantized_cases() {
  using Kind = QuantScheme::Kind;
  std::vector<Case> cases;
  cases.push_back(
      {"quantize", [](const Env& env) {
         std::uint64_t seed = 151;
         for (DType dtype : kFloatDTypes) {
           for (Layout layout : kLayouts) {
             for (const Shape& shape : {Shape{3, 64}, Shape{0, 32}}) {
               for (const QuantScheme& scheme : {quant_scheme(Kind::Q4_0), quant_scheme(Kind::Q5_1),
                                                 quant_scheme(Kind::Q8_0), int8_channel_scheme()}) {
                 const Primitive x = input(env, shape, dtype, layout, seed++, -3, 3,
                                           /*specials=*/false);
                 const TensorData a = detail::into_data(env.defaults.Backend::quantize(x, scheme));
                 const TensorData b = detail::into_data(env.backend.quantize(x, scheme));
                 const std::string context = describe(dtype, layout, shape) + " " +
                                             std::string(quant_kind_name(scheme.kind));
                 ASSERT_EQ(a.dtype(), DType::QFloat) << context;
                 EXPECT_EQ(a.scheme(), b.scheme()) << context;
                 EXPECT_EQ(a.shape(), b.shape()) << context;
                 EXPECT_TRUE(std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin(),
                                        b.bytes().end()))
                     << context;
               }
             }
           }
         }
       }});
  cases.push_back(
      {"dequantize", [](const Env& env) {
         std::uint64_t seed = 152;
         for (const QuantScheme& scheme :
              {quant_scheme(Kind::Q4_1), quant_scheme(Kind::Q8_0), int8_block_scheme(8)}) {
           const Shape shape{4, 64};
           const TensorData q =
               TensorData::from_vec(conformance::random_values(shape, DType::F32, seed++), shape)
                   .quantize(scheme);
           const Primitive stored = env.backend.from_data(q, env.device);
           const Primitive transposed = env.backend.swap_dims(stored, 0, 1);
           for (DType dtype : kFloatDTypes) {
             for (const Primitive& x : {stored, transposed}) {
               const std::string context =
                   std::string(dtype_name(dtype)) + " " + x->shape().to_string();
               const Primitive a = env.defaults.Backend::dequantize(x, dtype);
               expect_same(a, env.backend.dequantize(x, dtype), context);
               // In stored order, against the host's decoding.
               const Primitive in_order = x == stored ? a : env.backend.swap_dims(a, 0, 1);
               conformance::expect_close(
                   detail::into_data(in_order), shape, dtype,
                   conformance::representable(q.dequantize().to_f64_vec(), dtype),
                   context + " (default vs the host's decoding)");
             }
           }
         }
       }});
  return cases;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    for (auto group : {creation_cases, arith_cases, unary_cases, compare_cases, reduce_cases,
                       index_cases, layout_cases, sort_cases, module_cases, activation_cases,
                       transaction_cases, distributed_cases, quantized_cases}) {
      for (Case& c : group()) all.push_back(std::move(c));
    }
    return all;
  }();
  return cases;
}

class DefaultOpTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(DefaultOpTest, MatchesBackend) {
  const Case& c = all_cases()[GetParam()];
  Backend& cpu = backend_for(Device::cpu());
  const Env env{cpu, cpu, Device::cpu()};
  try {
    c.run(env);
  } catch (const UnsupportedOperation& e) {
    const char* strict = std::getenv("KILN_DEFAULTS_STRICT");
    if (strict != nullptr && std::string(strict) == "1") {
      FAIL() << c.op << ": " << e.what();
    }
    GTEST_SKIP() << c.op << " needs an op the backend does not implement yet: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Defaults, DefaultOpTest,
                         ::testing::Range<std::size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return all_cases()[info.param].op;
                         });

// Every DEFAULT op of ops.def has a row above (extra rows may test edge cases of one op).
TEST(DefaultOpCoverage, EveryDefaultOpHasACase) {
  std::set<std::string> covered;
  for (const Case& c : all_cases()) covered.insert(c.op);
  std::string missing;
  for (const OpInfo& op : all_ops()) {
    if (op.availability == OpAvailability::Default && !covered.count(std::string(op.name))) {
      missing += std::string(op.name) + " ";
    }
  }
  EXPECT_TRUE(missing.empty()) << "DEFAULT ops without a case: " << missing;
}

}  // namespace
}  // namespace kiln

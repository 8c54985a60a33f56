// The conformance table: one row per op (or small op family), each run on every device under
// test against a float64 reference written for the test, over dtypes, layouts (contiguous,
// strided, transposed, offset views), broadcasting, empty shapes and NaN/inf. Rows name the
// ops.def ops they cover; a coverage test fails while any op has no row.
//
// Adding a row:
//   KILN_CONFORMANCE_ROW(exp, ({"exp"})) {
//     for (DType dt : kFloatDTypes) for (Layout layout : kLayouts) { ... EXPECT_... }
//   }
// The body sees `const Device& device`. Later backends and decorators run the same rows by
// listing their device in KILN_TEST_DEVICES (e.g. "cpu,cuda:0,cpu-autodiff,cpu-fused-autodiff").
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/indexing_update_name.h"

namespace kiln::conformance {

struct Row {
  std::string name;
  std::vector<std::string> ops;
  std::function<void(const Device&)> run;
};

std::vector<Row>& registry();

struct RowRegistration {
  RowRegistration(std::string name, std::vector<std::string> ops,
                  std::function<void(const Device&)> run) {
    registry().push_back({std::move(name), std::move(ops), std::move(run)});
  }
};

#define KILN_CONFORMANCE_ROW(id, ops_list)                                        \
  static void kiln_conformance_##id(const ::kiln::Device& device);                \
  static ::kiln::conformance::RowRegistration kiln_conformance_registration_##id( \
      #id, std::vector<std::string> ops_list, kiln_conformance_##id);             \
  static void kiln_conformance_##id([[maybe_unused]] const ::kiln::Device& device)

// Devices from KILN_TEST_DEVICES ("cpu" when unset); unavailable ones are skipped.
std::vector<Device> devices_under_test();

inline constexpr DType kFloatDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
inline constexpr DType kIntDTypes[] = {DType::I64, DType::I32, DType::I16, DType::I8,
                                       DType::U64, DType::U32, DType::U16, DType::U8};
inline constexpr DType kNumericDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                           DType::I64, DType::I32, DType::I16, DType::I8,
                                           DType::U64, DType::U32, DType::U16, DType::U8};

// Every dtype a tensor can have: the numeric ones and Bool.
std::vector<DType> every_dtype();

// An exact integer result wrapped to dtype's width (two's complement), as integer kernels do;
// other dtypes pass through.
double wrap_to(double v, DType dtype);

// How an input is laid out in memory; the logical values are the same for every layout.
enum class Layout { Contiguous, Strided, Transposed, Offset };
inline constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Strided, Layout::Transposed,
                                      Layout::Offset};
std::string layout_name(Layout layout);

// Random logical values for shape, exactly representable in dtype (integers for int dtypes,
// in [lo, hi]; 0/1 for bool).
std::vector<double> random_values(const Shape& shape, DType dtype, std::uint64_t seed,
                                  double lo = -3.0, double hi = 3.0);
// Values rounded to what dtype can hold (what the backend sees after from_data).
std::vector<double> representable(const std::vector<double>& values, DType dtype);

// A tensor holding values (row-major over shape) in the requested layout.
Primitive make_primitive(const std::vector<double>& values, const Shape& shape, DType dtype,
                         Layout layout, const Device& device);
template <std::size_t D, class K = Float>
Tensor<D, K> make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype,
                         Layout layout, const Device& device) {
  return Tensor<D, K>::from_primitive(make_primitive(values, shape, dtype, layout, device));
}

// Absolute + relative tolerance for results of dtype (loose for 16-bit floats).
double tolerance(DType dtype);

// Checks shape, dtype and every value (NaN matches NaN, infinities match exactly) and reports
// the first few mismatches with their index and context.
void expect_close(const TensorData& actual, const Shape& shape, DType dtype,
                  const std::vector<double>& expected, const std::string& context,
                  double tolerance_scale = 1.0);

// Row-major index helpers for references.
std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape);
std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape);
// The value of a broadcast operand at an output index.
double broadcast_at(const std::vector<double>& values, const Shape& shape,
                    const std::vector<std::int64_t>& out_index);

std::string context(const Device& device, DType dtype, Layout layout, const Shape& shape);

// softmax_cross_entropy in float64: logsumexp(row) - row[target] for row-major logits
// [targets.size(), classes] (a row holding a NaN or a +inf gives NaN, as log_softmax does);
// dlogits, when given g per row, receives (softmax(row) - onehot(target)) * g.
std::vector<double> ref_softmax_cross_entropy(const std::vector<double>& logits,
                                              std::size_t classes,
                                              const std::vector<double>& targets,
                                              const std::vector<double>* g = nullptr,
                                              std::vector<double>* dlogits = nullptr);

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Contiguous i64 indices on like's device (gather, scatter, select arguments).
inline Primitive ints(const std::vector<double>& values, const Shape& shape,
                      const Primitive& like) {
  return make_primitive(values, shape, DType::I64, Layout::Contiguous, like->device());
}

// The name of an indexing update in a row's context.
inline std::string update_name(IndexingUpdate update) { return indexing_update_name(update); }

}  // namespace kiln::conformance

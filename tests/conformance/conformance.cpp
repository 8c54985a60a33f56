#include "conformance/conformance.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "contract/op_code.h"
#ifdef KILN_HAVE_REMOTE_SERVER
#include "support/remote_server.h"
#endif

namespace kiln::conformance {

std::vector<Row>& registry() {
  static std::vector<Row> rows;
  return rows;
}

std::vector<Device> devices_under_test() {
  const char* env = std::getenv("KILN_TEST_DEVICES");
  std::string list = env != nullptr && *env != '\0' ? env : "cpu";
  std::vector<Device> devices;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      // A device and its decorators: "cpu", "cpu-autodiff", "cuda:0-fused", "cpu-fused-autodiff",
      // "remote-autodiff".
      std::stringstream parts(item);
      std::string part;
      std::getline(parts, part, '-');
      // "remote": a server started in this process on a free port (its CPU runs the ops).
#ifdef KILN_HAVE_REMOTE_SERVER
      Device device = part == "remote" ? test::remote_device() : Device::parse(part);
#else
      Device device = Device::parse(part);
#endif
      while (std::getline(parts, part, '-')) {
        if (part == "autodiff") {
          device = device.autodiff();
        } else if (part == "fused") {
          device = device.fused();
        } else {
          detail::fail<InvalidArgument>("KILN_TEST_DEVICES", "unknown decorator ", part);
        }
      }
      devices.push_back(device);
    } catch (const Error& e) {
      std::cerr << "conformance: skipping device " << item << ": " << e.what() << "\n";
    }
  }
  return devices;
}

std::vector<DType> every_dtype() {
  std::vector<DType> out(std::begin(kNumericDTypes), std::end(kNumericDTypes));
  out.push_back(DType::Bool);
  return out;
}

double wrap_to(double v, DType dtype) {
  if (!is_int(dtype)) return v;
  const int bits = static_cast<int>(dtype_size(dtype) * 8);
  const double range = std::ldexp(1.0, bits);
  const double lo = is_signed_int(dtype) ? -range / 2 : 0.0;
  if (v >= lo && v < lo + range) return v;  // in range: exact, no wrap needed
  double m = std::fmod(v, range);
  if (m < 0) m += range;
  if (is_signed_int(dtype) && m >= range / 2) m -= range;
  return m;
}

std::string layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Strided:
      return "strided";
    case Layout::Transposed:
      return "transposed";
    case Layout::Offset:
      return "offset";
  }
  return "?";
}

std::vector<double> random_values(const Shape& shape, DType dtype, std::uint64_t seed, double lo,
                                  double hi) {
  std::mt19937_64 rng(seed);
  const std::size_t n = static_cast<std::size_t>(shape.num_elements());
  std::vector<double> out(n);
  if (is_bool(dtype)) {
    std::bernoulli_distribution coin(0.5);
    for (double& v : out) v = coin(rng) ? 1.0 : 0.0;
    return out;
  }
  if (is_int(dtype)) {
    if (is_unsigned_int(dtype)) lo = std::max(lo, 0.0);
    std::uniform_int_distribution<std::int64_t> dist(static_cast<std::int64_t>(std::ceil(lo)),
                                                     static_cast<std::int64_t>(std::floor(hi)));
    for (double& v : out) v = static_cast<double>(dist(rng));
    return out;
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& v : out) v = dist(rng);
  return representable(out, dtype);
}

std::vector<double> representable(const std::vector<double>& values, DType dtype) {
  TensorData data = TensorData::from_vec(values).convert(dtype);
  return data.to_f64_vec();
}

namespace {

// Data of shape `physical` where logical element i lands at physical flat index map(i).
TensorData scatter_into(const std::vector<double>& values, const Shape& physical, DType dtype,
                        const std::function<std::int64_t(std::int64_t)>& map) {
  std::vector<double> buffer(static_cast<std::size_t>(physical.num_elements()), 0.0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    buffer[static_cast<std::size_t>(map(static_cast<std::int64_t>(i)))] = values[i];
  }
  return TensorData::from_vec(buffer, physical).convert(dtype);
}

template <std::size_t D>
Primitive make_ranked(const std::vector<double>& values, const Shape& shape, DType dtype,
                      Layout layout, const Device& device) {
  using T = Tensor<D, Float>;
  auto wrap = [&](TensorData data) {
    // Build through the detail layer so every kind works.
    return detail::from_data(
        std::move(data), device,
        is_float(dtype) ? Kind::Float : (is_int(dtype) ? Kind::Int : Kind::Bool), D);
  };
  (void)sizeof(T);
  switch (layout) {
    case Layout::Contiguous:
      return wrap(TensorData::from_vec(values, shape).convert(dtype));
    case Layout::Strided: {
      // Every other element along the last dim.
      detail::DimVector dims(shape.vector());
      dims.back() = dims.back() * 2;
      const Shape physical(dims);
      auto data = scatter_into(values, physical, dtype, [&](std::int64_t i) {
        auto index = unravel(i, shape);
        index.back() *= 2;
        return ravel(index, physical);
      });
      std::vector<Slice> slices(D, Slice::all());
      slices.back() = Slice(0, std::nullopt, 2);
      return detail::slice(wrap(std::move(data)), slices);
    }
    case Layout::Transposed: {
      if constexpr (D < 2) {
        return make_ranked<D>(values, shape, dtype, Layout::Strided, device);
      } else {
        detail::DimVector dims(shape.vector());
        std::swap(dims[D - 2], dims[D - 1]);
        const Shape physical(dims);
        auto data = scatter_into(values, physical, dtype, [&](std::int64_t i) {
          auto index = unravel(i, shape);
          std::swap(index[D - 2], index[D - 1]);
          return ravel(index, physical);
        });
        return detail::swap_dims(wrap(std::move(data)), D - 2, D - 1);
      }
    }
    case Layout::Offset: {
      // One extra leading row along dim 0, sliced away.
      detail::DimVector dims(shape.vector());
      dims[0] += 1;
      const Shape physical(dims);
      auto data = scatter_into(values, physical, dtype, [&](std::int64_t i) {
        auto index = unravel(i, shape);
        index[0] += 1;
        return ravel(index, physical);
      });
      std::vector<Slice> slices(D, Slice::all());
      slices[0] = Slice(1, std::nullopt);
      return detail::slice(wrap(std::move(data)), slices);
    }
  }
  return nullptr;
}

}  // namespace

Primitive make_primitive(const std::vector<double>& values, const Shape& shape, DType dtype,
                         Layout layout, const Device& device) {
  switch (shape.rank()) {
    case 1:
      return make_ranked<1>(values, shape, dtype, layout, device);
    case 2:
      return make_ranked<2>(values, shape, dtype, layout, device);
    case 3:
      return make_ranked<3>(values, shape, dtype, layout, device);
    case 4:
      return make_ranked<4>(values, shape, dtype, layout, device);
    case 5:
      return make_ranked<5>(values, shape, dtype, layout, device);
    default:
      break;
  }
  ADD_FAILURE() << "make_primitive: unsupported rank " << shape.rank();
  return nullptr;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 1e-10;
    case DType::F32:
      return 2e-5;
    case DType::F16:
      return 4e-3;
    case DType::BF16:
      return 2e-2;
    default:
      return 0.0;
  }
}

void expect_close(const TensorData& actual, const Shape& shape, DType dtype,
                  const std::vector<double>& expected, const std::string& context,
                  double tolerance_scale) {
  ASSERT_EQ(actual.shape(), shape) << context;
  ASSERT_EQ(actual.dtype(), dtype)
      << context << ": dtype " << dtype_name(actual.dtype()) << " vs " << dtype_name(dtype);
  const std::vector<double> got = actual.to_f64_vec();
  ASSERT_EQ(got.size(), expected.size()) << context;
  const double tol = tolerance(dtype) * tolerance_scale;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    bool ok;
    if (std::isnan(e)) {
      ok = std::isnan(g);
    } else if (std::isinf(e)) {
      ok = g == e;
    } else {
      ok = std::fabs(g - e) <= tol * (1.0 + std::fabs(e));
    }
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << context << ": element " << i << " is " << g << ", expected " << e;
    }
  }
}

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.rank());
  for (std::size_t d = shape.rank(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

double broadcast_at(const std::vector<double>& values, const Shape& shape,
                    const std::vector<std::int64_t>& out_index) {
  std::vector<std::int64_t> index(shape.rank());
  const std::size_t lead = out_index.size() - shape.rank();
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    index[d] = shape[d] == 1 ? 0 : out_index[lead + d];
  }
  return values[static_cast<std::size_t>(ravel(index, shape))];
}

std::vector<double> ref_softmax_cross_entropy(const std::vector<double>& logits,
                                              std::size_t classes,
                                              const std::vector<double>& targets,
                                              const std::vector<double>* g,
                                              std::vector<double>* dlogits) {
  std::vector<double> loss(targets.size());
  if (dlogits != nullptr) dlogits->assign(logits.size(), 0.0);
  for (std::size_t r = 0; r < targets.size(); ++r) {
    const double* row = logits.data() + r * classes;
    double top = -kInf;
    bool nan = false;
    for (std::size_t c = 0; c < classes; ++c) {
      nan = nan || std::isnan(row[c]);
      top = std::max(top, row[c]);
    }
    double total = top;
    if (std::isfinite(top)) {
      double sum = 0;
      for (std::size_t c = 0; c < classes; ++c) sum += std::exp(row[c] - top);
      total = top + std::log(sum);
    }
    // A +inf (no distribution) or a NaN gives NaN, as log_softmax does.
    if (nan || top == kInf) total = kNaN;
    const auto target = static_cast<std::size_t>(targets[r]);
    loss[r] = total - row[target];
    if (dlogits != nullptr && g != nullptr) {
      for (std::size_t c = 0; c < classes; ++c) {
        (*dlogits)[r * classes + c] =
            (std::exp(row[c] - total) - (c == target ? 1.0 : 0.0)) * (*g)[r];
      }
    }
  }
  return loss;
}

std::string context(const Device& device, DType dtype, Layout layout, const Shape& shape) {
  std::ostringstream out;
  out << device.to_string() << " " << dtype_name(dtype) << " " << layout_name(layout) << " "
      << shape.to_string();
  return out.str();
}

// ---- the table as tests ----

class ConformanceTest : public ::testing::TestWithParam<std::pair<std::size_t, Device>> {};

TEST_P(ConformanceTest, MatchesReference) {
  const auto& [row, device] = GetParam();
  registry()[row].run(device);
}

std::vector<std::pair<std::size_t, Device>> all_cases() {
  std::vector<std::pair<std::size_t, Device>> cases;
  for (const Device& d : devices_under_test()) {
    for (std::size_t r = 0; r < registry().size(); ++r) cases.emplace_back(r, d);
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<std::pair<std::size_t, Device>>& info) {
  std::string device = info.param.second.to_string();
  for (char& c : device) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return registry()[info.param.first].name + "_" + device;
}

INSTANTIATE_TEST_SUITE_P(Ops, ConformanceTest, ::testing::ValuesIn(all_cases()), case_name);

// Every op of the contract (but those whose issue has not landed) has a row.
TEST(ConformanceCoverage, EveryOpHasARow) {
  std::set<std::string> covered;
  for (const Row& row : registry()) covered.insert(row.ops.begin(), row.ops.end());
  std::vector<std::string> missing;
  for (const OpInfo& op : all_ops()) {
    if (op.availability == OpAvailability::Later) continue;
    if (!covered.count(std::string(op.name))) missing.emplace_back(op.name);
  }
  std::string list;
  for (const std::string& m : missing) list += m + " ";
  EXPECT_TRUE(missing.empty()) << missing.size() << " ops without a conformance row: " << list;
}

// Every differentiable op (impl D in ops.def) has a gradcheck row (a row naming "grad:<op>").
TEST(ConformanceCoverage, EveryDifferentiableOpHasAGradcheckRow) {
  std::set<std::string> covered;
  for (const Row& row : registry()) covered.insert(row.ops.begin(), row.ops.end());
  std::string missing;
  int count = 0;
  for (const OpInfo& op : all_ops()) {
    if (!op.differentiable || covered.count("grad:" + std::string(op.name))) continue;
    missing += std::string(op.name) + " ";
    ++count;
  }
  EXPECT_EQ(count, 0) << count << " differentiable ops without a gradcheck row: " << missing;
}

}  // namespace kiln::conformance

// Cumulative ops along a dim: cumsum, cumprod, cummin, cummax. Float sums and products run in
// double, integer ones wrap around in 64 bits; cummin/cummax keep NaN once seen (PyTorch).
// Each line is read before it is written, so a uniquely owned input is reused as the output.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dim_plan.h"
#include "core/dtype_dispatch.h"

namespace kiln {

using namespace cpu;

namespace {

constexpr std::int64_t kColumnWidth = 256;

template <class T>
constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

template <class T>
using wide_t = std::conditional_t<is_float_v<T>, double, std::uint64_t>;

template <class T>
wide_t<T> to_wide(T v) noexcept {
  if constexpr (is_float_v<T>) {
    return static_cast<double>(static_cast<compute_t<T>>(v));
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

template <class T>
T from_wide(wide_t<T> v) noexcept {
  if constexpr (is_float_v<T>) {
    return static_cast<T>(static_cast<compute_t<T>>(v));
  } else {
    return static_cast<T>(v);  // modular (C++20)
  }
}

template <class T>
struct SumScan {
  using Acc = wide_t<T>;
  Acc init() const { return 0; }
  void step(Acc& acc, T v) const { acc += to_wide(v); }
  T value(const Acc& acc) const { return from_wide<T>(acc); }
};

template <class T>
struct ProdScan {
  using Acc = wide_t<T>;
  Acc init() const { return 1; }
  void step(Acc& acc, T v) const { acc *= to_wide(v); }
  T value(const Acc& acc) const { return from_wide<T>(acc); }
};

template <class T, bool IsMax>
struct ExtremumScan {
  using Acc = compute_t<T>;
  Acc init() const {
    if constexpr (is_float_v<T>) {
      return IsMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return IsMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  void step(Acc& acc, T v) const {
    const Acc x = static_cast<Acc>(v);
    if constexpr (is_float_v<T>) {
      if (acc != acc) return;  // NaN stays
      if (x != x) {
        acc = x;
        return;
      }
    }
    if (IsMax ? x > acc : x < acc) acc = x;
  }
  T value(const Acc& acc) const { return static_cast<T>(acc); }
};

template <class T, class S>
Primitive scan(Primitive x, std::int64_t dim, const S& s) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  std::shared_ptr<CpuTensor> out;
  if (reusable_as_output(x, shape, dtype)) {
    out = std::static_pointer_cast<CpuTensor>(x);
  } else {
    out = make_tensor(dtype, shape);
  }
  if (shape.num_elements() == 0) return out;
  const CpuTensor& in = as_cpu(x);
  const DimPlan plan = plan_dim(shape, dim, {&in.strides(), &out->strides()});
  const T* src = in.data_as<T>();
  T* dst = out->data_as<T>();
  const std::int64_t n = plan.length;
  const std::int64_t si = plan.dim_strides[0];
  const std::int64_t so = plan.dim_strides[1];
  using Acc = typename S::Acc;
  if (!columns_pay_off<2>(plan)) {
    for_each_line<2>(plan, [&](std::int64_t, const std::array<std::int64_t, 2>& off) {
      const T* p = src + off[0];
      T* q = dst + off[1];
      Acc acc = s.init();
      for (std::int64_t j = 0; j < n; ++j) {
        s.step(acc, p[j * si]);
        q[j * so] = s.value(acc);
      }
    });
    return out;
  }
  for_each_column_block<2>(
      plan, kColumnWidth,
      [&](std::int64_t, const std::array<std::int64_t, 2>& off, std::int64_t width) {
        Acc acc[kColumnWidth];
        for (std::int64_t c = 0; c < width; ++c) acc[c] = s.init();
        for (std::int64_t j = 0; j < n; ++j) {
          const T* p = src + off[0] + j * si;
          T* q = dst + off[1] + j * so;
          for (std::int64_t c = 0; c < width; ++c) {
            s.step(acc[c], p[c]);
            q[c] = s.value(acc[c]);
          }
        }
      });
  return out;
}

template <template <class> class Scan>
Primitive scan_numeric(Primitive x, std::int64_t dim, const char* op) {
  return visit_numeric_types(x->dtype(), op, [&]<class T>(type_tag<T>) -> Primitive {
    return scan<T>(std::move(x), dim, Scan<T>{});
  });
}

template <class T>
using MaxScan = ExtremumScan<T, true>;
template <class T>
using MinScan = ExtremumScan<T, false>;

}  // namespace

Primitive CpuBackend::cumsum(Primitive x, std::int64_t dim) {
  return scan_numeric<SumScan>(std::move(x), dim, "cumsum");
}
Primitive CpuBackend::cumprod(Primitive x, std::int64_t dim) {
  return scan_numeric<ProdScan>(std::move(x), dim, "cumprod");
}
Primitive CpuBackend::cummin(Primitive x, std::int64_t dim) {
  return scan_numeric<MinScan>(std::move(x), dim, "cummin");
}
Primitive CpuBackend::cummax(Primitive x, std::int64_t dim) {
  return scan_numeric<MaxScan>(std::move(x), dim, "cummax");
}

}  // namespace kiln

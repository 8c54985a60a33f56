// Cumulative ops along a dim: cumsum, cumprod, cummin, cummax. Float sums and products run in
// double, integer ones wrap around in 64 bits; cummin/cummax keep NaN once seen (PyTorch).
// Each line is read before it is written, so a uniquely owned input is reused as the output.
// The driver (reduce.h) plans and threads; this file makes only the scans' loops.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dim_plan.h"
#include "backends/cpu/reduce.h"
#include "core/dtype_dispatch.h"

namespace kiln {

using namespace cpu;

namespace {

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
  using In = T;
  using Acc = wide_t<T>;
  Acc init() const { return 0; }
  void step(Acc& acc, T v) const { acc += to_wide(v); }
  T value(const Acc& acc) const { return from_wide<T>(acc); }
};

template <class T>
struct ProdScan {
  using In = T;
  using Acc = wide_t<T>;
  Acc init() const { return 1; }
  void step(Acc& acc, T v) const { acc *= to_wide(v); }
  T value(const Acc& acc) const { return from_wide<T>(acc); }
};

template <class T, bool IsMax>
struct ExtremumScan {
  using In = T;
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

// Wrapping sums and products are blind to signedness: one kernel per integer width.
template <template <class> class Scan, bool ByWidth>
Primitive scan_numeric(Primitive x, std::int64_t dim, const char* op) {
  return visit_numeric_types(x->dtype(), op, [&]<class T>(type_tag<T>) -> Primitive {
    using K = std::conditional_t<ByWidth, width_t<T>, T>;
    const Scan<K> scan{};
    return run_scan(std::move(x), dim, make_scan_kernel(scan), op);
  });
}

template <class T>
using MaxScan = ExtremumScan<T, true>;
template <class T>
using MinScan = ExtremumScan<T, false>;

}  // namespace

Primitive CpuBackend::cumsum(Primitive x, std::int64_t dim) {
  return scan_numeric<SumScan, true>(std::move(x), dim, "cumsum");
}
Primitive CpuBackend::cumprod(Primitive x, std::int64_t dim) {
  return scan_numeric<ProdScan, true>(std::move(x), dim, "cumprod");
}
Primitive CpuBackend::cummin(Primitive x, std::int64_t dim) {
  return scan_numeric<MinScan, false>(std::move(x), dim, "cummin");
}
Primitive CpuBackend::cummax(Primitive x, std::int64_t dim) {
  return scan_numeric<MaxScan, false>(std::move(x), dim, "cummax");
}

}  // namespace kiln

// Reductions: sum, mean, prod, logsumexp, max/min (with or without indices), argmax/argmin,
// any/all, over everything (result shape [1]) or along one dim (kept with size 1). Strided inputs
// are read in place. Float sums accumulate in double, pairwise along contiguous lines and in blocks
// otherwise; integer sums and products wrap around in 64 bits, then to the dtype. The driver
// (reduce.h) plans and threads; this file makes only the reducers' loops.
#include <cmath>
#include <limits>
#include <optional>
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
compute_t<T> value_of(T v) noexcept {
  return static_cast<compute_t<T>>(v);
}

// Integers are summed and multiplied as unsigned 64-bit numbers: wrap-around without UB, and
// the low bits are the dtype's wrapped result (so one kernel per width serves both signs).
template <class T>
std::uint64_t to_wide(T v) noexcept {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

template <class T, class Acc>
T from_acc(Acc acc) noexcept {
  if constexpr (is_float_v<T>) {
    return static_cast<T>(static_cast<compute_t<T>>(acc));
  } else {
    return static_cast<T>(acc);
  }
}

template <class T>
using wide_t = std::conditional_t<is_float_v<T>, double, std::uint64_t>;

template <class T>
T& at(char* const* out, std::size_t k, std::int64_t i) noexcept {
  return reinterpret_cast<T*>(out[k])[i];
}

// Sum of n values at p with stride, in double, pairwise above a small block.
template <class T>
double pairwise_sum(const T* p, std::int64_t n, std::int64_t stride) {
  if (n <= 256) {
    // Eight independent lanes: no dependency chain, and the compiler vectorises the loop.
    double lanes[8] = {};
    std::int64_t k = 0;
    if (stride == 1) {
      for (; k + 8 <= n; k += 8) {
        for (std::int64_t u = 0; u < 8; ++u) lanes[u] += static_cast<double>(value_of(p[k + u]));
      }
    }
    for (; k < n; ++k) lanes[0] += static_cast<double>(value_of(p[k * stride]));
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
  const std::int64_t half = (n / 2 + 7) / 8 * 8;
  return pairwise_sum(p, half, stride) + pairwise_sum(p + half * stride, n - half, stride);
}

// ---- reducers (reduce.h): init, step(acc, value, index), combine(earlier, later),
// write(out, position, acc) ----

template <class T>
struct SumReducer {
  using In = T;
  using Acc = wide_t<T>;
  double divisor = 1.0;  // mean divides the sum by the count
  Acc init() const { return Acc(0); }
  void step(Acc& acc, T v, std::int64_t) const {
    if constexpr (is_float_v<T>)
      acc += static_cast<double>(value_of(v));
    else
      acc += to_wide(v);
  }
  void combine(Acc& a, const Acc& b) const { a += b; }
  Acc line(const T* p, std::int64_t n, std::int64_t stride) const {
    if constexpr (is_float_v<T>) {
      return pairwise_sum(p, n, stride);
    } else {
      Acc acc = 0;
      if (stride == 1) {
        for (std::int64_t k = 0; k < n; ++k) acc += to_wide(p[k]);
      } else {
        for (std::int64_t k = 0; k < n; ++k) acc += to_wide(p[k * stride]);
      }
      return acc;
    }
  }
  void write(char* const* out, std::int64_t i, const Acc& acc) const {
    if constexpr (is_float_v<T>)
      at<T>(out, 0, i) = from_acc<T>(acc / divisor);
    else
      at<T>(out, 0, i) = from_acc<T>(acc);
  }
};

template <class T>
struct ProdReducer {
  using In = T;
  using Acc = wide_t<T>;
  static constexpr bool kOrderFree = true;
  Acc init() const { return Acc(1); }
  void step(Acc& acc, T v, std::int64_t) const {
    if constexpr (is_float_v<T>)
      acc *= static_cast<double>(value_of(v));
    else
      acc *= to_wide(v);
  }
  void combine(Acc& a, const Acc& b) const { a *= b; }
  void write(char* const* out, std::int64_t i, const Acc& acc) const {
    at<T>(out, 0, i) = from_acc<T>(acc);
  }
};

// The starting point of a max (IsMax) or min: -inf / +inf, or the integer type's extreme.
template <class T, bool IsMax>
compute_t<T> extremum_start() {
  using C = compute_t<T>;
  if constexpr (is_float_v<T>) {
    return IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  } else {
    return IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
}

// Max (IsMax) or min; NaN wins, as in PyTorch. Whether a NaN was seen is kept apart from the
// running extremum: two independent selects, no branch, twice as fast as testing for NaN first.
template <class T, bool IsMax>
struct ExtremumReducer {
  using In = T;
  using C = compute_t<T>;
  struct Acc {
    C value;
    bool nan;
  };
  static constexpr bool kOrderFree = true;
  Acc init() const { return {extremum_start<T, IsMax>(), false}; }
  static C pick(C a, C b) { return (IsMax ? b > a : b < a) ? b : a; }
  void step(Acc& acc, T v, std::int64_t) const {
    const C x = value_of(v);
    acc.value = pick(acc.value, x);
    if constexpr (is_float_v<T>) acc.nan |= (x != x);
  }
  void combine(Acc& a, const Acc& b) const {
    a.value = pick(a.value, b.value);
    a.nan |= b.nan;
  }
  void write(char* const* out, std::int64_t i, const Acc& acc) const {
    if constexpr (is_float_v<T>) {
      at<T>(out, 0, i) =
          acc.nan ? static_cast<T>(std::numeric_limits<C>::quiet_NaN()) : static_cast<T>(acc.value);
    } else {
      at<T>(out, 0, i) = static_cast<T>(acc.value);
    }
  }
  // A column block (outputs first .. first + width - 1): values and NaN flags in local arrays
  // of their own, a form the compiler vectorises (5x over an array of Acc).
  void columns(const T* base, std::int64_t n, std::int64_t stride, std::int64_t width,
               char* const* out, std::int64_t first) const {
    C value[kReduceColumnWidth];
    int nan[kReduceColumnWidth];
    for (std::int64_t c = 0; c < width; ++c) {
      value[c] = extremum_start<T, IsMax>();
      nan[c] = 0;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const T* row = base + j * stride;
      for (std::int64_t c = 0; c < width; ++c) {
        const C x = value_of(row[c]);
        value[c] = pick(value[c], x);
        if constexpr (is_float_v<T>) nan[c] |= (x != x);
      }
    }
    for (std::int64_t c = 0; c < width; ++c) write(out, first + c, {value[c], nan[c] != 0});
  }
};

// Position of the max (IsMax) or min along a dim: the first one on ties, the first NaN if any.
// Writes the indices to out[0], and the values to out[1] when it is set.
template <class T, bool IsMax>
struct ArgReducer {
  using In = T;
  using C = compute_t<T>;
  struct Acc {
    C value;
    std::int64_t index;
  };
  static constexpr bool kDimOnly = true;
  DType index_dtype;
  static bool better(C v, C best) {
    if constexpr (is_float_v<T>) {
      if (v != v) return best == best;  // the first NaN wins
    }
    return IsMax ? v > best : v < best;
  }
  Acc init() const { return {extremum_start<T, IsMax>(), 0}; }
  void step(Acc& acc, T v, std::int64_t j) const {
    const C x = value_of(v);
    if (better(x, acc.value)) acc = {x, j};
  }
  void combine(Acc& a, const Acc& b) const {
    if (better(b.value, a.value)) a = b;
  }
  void write(char* const* out, std::int64_t i, const Acc& acc) const {
    IndexWriter{reinterpret_cast<std::byte*>(out[0]), index_dtype}(i, acc.index);
    if (out[1] != nullptr) at<T>(out, 1, i) = static_cast<T>(acc.value);
  }
  // A column block, with branch-free selects on separate arrays (vectorises).
  void columns(const T* base, std::int64_t n, std::int64_t stride, std::int64_t width,
               char* const* out, std::int64_t first) const {
    C value[kReduceColumnWidth];
    std::int64_t index[kReduceColumnWidth];
    for (std::int64_t c = 0; c < width; ++c) {
      value[c] = extremum_start<T, IsMax>();
      index[c] = 0;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const T* row = base + j * stride;
      for (std::int64_t c = 0; c < width; ++c) {
        const C x = value_of(row[c]);
        bool take = IsMax ? x > value[c] : x < value[c];
        if constexpr (is_float_v<T>) take = take || ((x != x) && (value[c] == value[c]));
        value[c] = take ? x : value[c];
        index[c] = take ? j : index[c];
      }
    }
    for (std::int64_t c = 0; c < width; ++c) write(out, first + c, {value[c], index[c]});
  }
};

// any (IsAny) or all of "x != 0" (NaN counts as true).
template <class T, bool IsAny>
struct TruthReducer {
  using In = T;
  using Acc = bool;
  static constexpr bool kOrderFree = true;
  Acc init() const { return !IsAny; }
  void step(Acc& acc, T v, std::int64_t) const {
    const bool truth = value_of(v) != compute_t<T>(0);
    acc = IsAny ? (acc || truth) : (acc && truth);
  }
  void combine(Acc& a, const Acc& b) const { a = IsAny ? (a || b) : (a && b); }
  void write(char* const* out, std::int64_t i, const Acc& acc) const { at<bool>(out, 0, i) = acc; }
};

// log(sum(exp(x))) in one pass, without overflow: the running maximum and the sum of exp(v - max)
// in double, rescaled when the maximum grows. A NaN gives NaN, a +inf +inf, and nothing (or only
// -inf) -inf, as PyTorch's logsumexp.
struct LogSumExp {
  double max;
  double sum;
};

template <class T>
struct LogSumExpReducer {
  using In = T;
  using Acc = LogSumExp;
  static void merge(Acc& a, double max, double sum) {
    if (std::isnan(a.max) || max == -std::numeric_limits<double>::infinity()) return;
    if (std::isnan(max) || max == std::numeric_limits<double>::infinity() ||
        a.max == std::numeric_limits<double>::infinity()) {
      a.max = std::isnan(max) ? max : std::numeric_limits<double>::infinity();
    } else if (max > a.max) {
      a.sum = a.sum * std::exp(a.max - max) + sum;
      a.max = max;
    } else {
      a.sum += sum * std::exp(max - a.max);
    }
  }
  Acc init() const { return {-std::numeric_limits<double>::infinity(), 0.0}; }
  void step(Acc& acc, T v, std::int64_t) const {
    merge(acc, static_cast<double>(value_of(v)), 1.0);
  }
  void combine(Acc& a, const Acc& b) const { merge(a, b.max, b.sum); }
  void write(char* const* out, std::int64_t i, const Acc& acc) const {
    const double result = std::isfinite(acc.max) ? acc.max + std::log(acc.sum) : acc.max;
    at<T>(out, 0, i) = from_acc<T>(result);
  }
};

void check_index_dtype(DType index_dtype, const char* op) {
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
}

// Wrapping sums and products are blind to signedness: one kernel per integer width.
Primitive sum_impl(Primitive x, std::int64_t dim, bool mean, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    const std::int64_t count =
        dim < 0 ? x->shape().num_elements() : x->shape()[static_cast<std::size_t>(dim)];
    const SumReducer<width_t<T>> reducer{mean ? static_cast<double>(count) : 1.0};
    return run_reduce(x, dim, dtype, std::nullopt, make_reduce_kernel(reducer), op).first;
  });
}

Primitive prod_impl(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    const ProdReducer<width_t<T>> reducer{};
    return run_reduce(x, dim, dtype, std::nullopt, make_reduce_kernel(reducer), op).first;
  });
}

template <bool IsMax>
Primitive extremum_impl(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    const ExtremumReducer<T, IsMax> reducer{};
    return run_reduce(x, dim, dtype, std::nullopt, make_reduce_kernel(reducer), op).first;
  });
}

// "x != 0" is blind to signedness too (not for floats: -0 is zero).
template <bool IsAny>
Primitive truth_impl(Primitive x, std::int64_t dim, const char* op) {
  return visit_dtype(x->dtype(), op, [&]<class T>(type_tag<T>) -> Primitive {
    const TruthReducer<width_t<T>, IsAny> reducer{};
    return run_reduce(x, dim, DType::Bool, std::nullopt, make_reduce_kernel(reducer), op).first;
  });
}

// Indices (and values when with_values) of the max or min along dim.
template <bool IsMax>
PrimitivePair arg_impl(Primitive x, std::int64_t dim, DType index_dtype, bool with_values,
                       const char* op) {
  check_index_dtype(index_dtype, op);
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> PrimitivePair {
    const ArgReducer<T, IsMax> reducer{index_dtype};
    auto [indices, values] =
        run_reduce(x, dim, index_dtype, with_values ? std::optional<DType>(dtype) : std::nullopt,
                   make_reduce_kernel(reducer), op);
    return {values, indices};
  });
}

}  // namespace

Primitive CpuBackend::sum(Primitive x) { return sum_impl(std::move(x), -1, false, "sum"); }
Primitive CpuBackend::sum_dim(Primitive x, std::int64_t dim) {
  return sum_impl(std::move(x), dim, false, "sum_dim");
}
Primitive CpuBackend::mean(Primitive x) {
  visit_float_dtype(x->dtype(), "mean", []<class T>(type_tag<T>) {});
  return sum_impl(std::move(x), -1, true, "mean");
}
Primitive CpuBackend::mean_dim(Primitive x, std::int64_t dim) {
  visit_float_dtype(x->dtype(), "mean_dim", []<class T>(type_tag<T>) {});
  return sum_impl(std::move(x), dim, true, "mean_dim");
}
Primitive CpuBackend::logsumexp_dim(Primitive x, std::int64_t dim) {
  const DType dtype = x->dtype();
  return visit_float_dtype(dtype, "logsumexp_dim", [&]<class T>(type_tag<T>) -> Primitive {
    const LogSumExpReducer<T> reducer{};
    return run_reduce(x, dim, dtype, std::nullopt, make_reduce_kernel(reducer), "logsumexp_dim")
        .first;
  });
}
Primitive CpuBackend::prod(Primitive x) { return prod_impl(std::move(x), -1, "prod"); }
Primitive CpuBackend::prod_dim(Primitive x, std::int64_t dim) {
  return prod_impl(std::move(x), dim, "prod_dim");
}
Primitive CpuBackend::max(Primitive x) { return extremum_impl<true>(std::move(x), -1, "max"); }
Primitive CpuBackend::min(Primitive x) { return extremum_impl<false>(std::move(x), -1, "min"); }
Primitive CpuBackend::max_dim(Primitive x, std::int64_t dim) {
  return extremum_impl<true>(std::move(x), dim, "max_dim");
}
Primitive CpuBackend::min_dim(Primitive x, std::int64_t dim) {
  return extremum_impl<false>(std::move(x), dim, "min_dim");
}
Primitive CpuBackend::argmax(Primitive x, std::int64_t dim, DType index_dtype) {
  return arg_impl<true>(std::move(x), dim, index_dtype, false, "argmax").second;
}
Primitive CpuBackend::argmin(Primitive x, std::int64_t dim, DType index_dtype) {
  return arg_impl<false>(std::move(x), dim, index_dtype, false, "argmin").second;
}
PrimitivePair CpuBackend::max_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) {
  return arg_impl<true>(std::move(x), dim, index_dtype, true, "max_dim_with_indices");
}
PrimitivePair CpuBackend::min_dim_with_indices(Primitive x, std::int64_t dim, DType index_dtype) {
  return arg_impl<false>(std::move(x), dim, index_dtype, true, "min_dim_with_indices");
}
Primitive CpuBackend::any(Primitive x) { return truth_impl<true>(std::move(x), -1, "any"); }
Primitive CpuBackend::all(Primitive x) { return truth_impl<false>(std::move(x), -1, "all"); }
Primitive CpuBackend::any_dim(Primitive x, std::int64_t dim) {
  return truth_impl<true>(std::move(x), dim, "any_dim");
}
Primitive CpuBackend::all_dim(Primitive x, std::int64_t dim) {
  return truth_impl<false>(std::move(x), dim, "all_dim");
}

}  // namespace kiln

// Reductions: sum, mean, prod, max/min (with or without indices), argmax/argmin, any/all, over
// everything (result shape [1]) or along one dim (kept with size 1). Strided inputs are read in
// place. Float sums accumulate in double, pairwise along contiguous lines and in blocks
// otherwise; integer sums and products wrap around in 64 bits, then to the dtype.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dim_plan.h"
#include "backends/cpu/integer_math.h"
#include "core/dtype_dispatch.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

// Columns walked together when a dim is reduced row by row, and rows summed before their
// block is added to the total (keeps f64 sums accurate without a pairwise tree per column).
constexpr std::int64_t kColumnWidth = 256;
constexpr std::int64_t kRowBlock = 1024;
// Elements per partial result of a full reduction (fixed, so results do not depend on the
// number of threads).
constexpr std::int64_t kFullChunk = 1 << 16;

template <class T>
constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

template <class T>
compute_t<T> value_of(T v) noexcept {
  return static_cast<compute_t<T>>(v);
}

// Integers are summed and multiplied as unsigned 64-bit numbers: wrap-around without UB, and
// the low bits are the dtype's wrapped result.
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

// ---- reducers: init, step(acc, value, index), combine(earlier, later), write(position, acc) ----

template <class T>
struct SumReducer {
  using Acc = wide_t<T>;
  T* out;
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
  void write(std::int64_t i, const Acc& acc) const {
    if constexpr (is_float_v<T>)
      out[i] = from_acc<T>(acc / divisor);
    else
      out[i] = from_acc<T>(acc);
  }
};

template <class T>
struct ProdReducer {
  using Acc = wide_t<T>;
  static constexpr bool kOrderFree = true;
  T* out;
  Acc init() const { return Acc(1); }
  void step(Acc& acc, T v, std::int64_t) const {
    if constexpr (is_float_v<T>)
      acc *= static_cast<double>(value_of(v));
    else
      acc *= to_wide(v);
  }
  void combine(Acc& a, const Acc& b) const { a *= b; }
  void write(std::int64_t i, const Acc& acc) const { out[i] = from_acc<T>(acc); }
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
  using C = compute_t<T>;
  struct Acc {
    C value;
    bool nan;
  };
  static constexpr bool kOrderFree = true;
  T* out;
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
  void write(std::int64_t i, const Acc& acc) const {
    if constexpr (is_float_v<T>) {
      out[i] =
          acc.nan ? static_cast<T>(std::numeric_limits<C>::quiet_NaN()) : static_cast<T>(acc.value);
    } else {
      out[i] = static_cast<T>(acc.value);
    }
  }
  // A column block of reduce_dim (outputs i .. i + width - 1): values and NaN flags in local
  // arrays of their own, a form the compiler vectorises (5x over an array of Acc).
  void columns(const T* base, std::int64_t n, std::int64_t stride, std::int64_t width,
               std::int64_t i) const {
    C value[kColumnWidth];
    int nan[kColumnWidth];
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
    for (std::int64_t c = 0; c < width; ++c) write(i + c, {value[c], nan[c] != 0});
  }
};

// Position of the max (IsMax) or min along a dim: the first one on ties, the first NaN if any.
// Writes the value too when values is set.
template <class T, bool IsMax>
struct ArgReducer {
  using C = compute_t<T>;
  struct Acc {
    C value;
    std::int64_t index;
  };
  IndexWriter indices;
  T* values = nullptr;
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
  void write(std::int64_t i, const Acc& acc) const {
    indices(i, acc.index);
    if (values != nullptr) values[i] = static_cast<T>(acc.value);
  }
  // A column block of reduce_dim, with branch-free selects on separate arrays (vectorises).
  void columns(const T* base, std::int64_t n, std::int64_t stride, std::int64_t width,
               std::int64_t i) const {
    C value[kColumnWidth];
    std::int64_t index[kColumnWidth];
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
    for (std::int64_t c = 0; c < width; ++c) write(i + c, {value[c], index[c]});
  }
};

// any (IsAny) or all of "x != 0" (NaN counts as true).
template <class T, bool IsAny>
struct TruthReducer {
  using Acc = bool;
  static constexpr bool kOrderFree = true;
  bool* out;
  Acc init() const { return !IsAny; }
  void step(Acc& acc, T v, std::int64_t) const {
    const bool truth = value_of(v) != compute_t<T>(0);
    acc = IsAny ? (acc || truth) : (acc && truth);
  }
  void combine(Acc& a, const Acc& b) const { a = IsAny ? (a || b) : (a && b); }
  void write(std::int64_t i, const Acc& acc) const { out[i] = acc; }
};

// The reduction of n values at p with stride; index j0 for the first. Reducers whose result
// does not depend on the order (kOrderFree) run contiguous lines in independent lanes, which
// breaks the dependency chain and lets the compiler vectorise.
template <class R, class T>
typename R::Acc reduce_line(const R& r, const T* p, std::int64_t n, std::int64_t stride,
                            std::int64_t j0) {
  using Acc = typename R::Acc;
  if constexpr (requires { r.line(p, n, stride); }) {
    return r.line(p, n, stride);
  } else {
    Acc acc = r.init();
    std::int64_t k = 0;
    if constexpr (requires { R::kOrderFree; }) {
      constexpr std::int64_t kLanes = 8;
      if (stride == 1 && n >= 4 * kLanes) {
        Acc lanes[kLanes];
        for (std::int64_t u = 0; u < kLanes; ++u) lanes[u] = r.init();
        for (; k + kLanes <= n; k += kLanes) {
          for (std::int64_t u = 0; u < kLanes; ++u) r.step(lanes[u], p[k + u], j0 + k + u);
        }
        for (std::int64_t u = 0; u < kLanes; ++u) r.combine(acc, lanes[u]);
      }
    }
    if (stride == 1) {
      for (; k < n; ++k) r.step(acc, p[k], j0 + k);
    } else {
      for (; k < n; ++k) r.step(acc, p[k * stride], j0 + k);
    }
    return acc;
  }
}

// A column block of reduce_dim: outputs i .. i + width - 1, one per adjacent column, over n
// rows; rows are combined in blocks so that long f64 sums keep their precision.
template <class R, class T>
void reduce_columns(const R& r, const T* base, std::int64_t n, std::int64_t stride,
                    std::int64_t width, std::int64_t i) {
  using Acc = typename R::Acc;
  Acc total[kColumnWidth];
  Acc block[kColumnWidth];
  for (std::int64_t c = 0; c < width; ++c) total[c] = r.init();
  for (std::int64_t j0 = 0; j0 < n; j0 += kRowBlock) {
    const std::int64_t j1 = std::min(n, j0 + kRowBlock);
    for (std::int64_t c = 0; c < width; ++c) block[c] = r.init();
    for (std::int64_t j = j0; j < j1; ++j) {
      const T* row = base + j * stride;
      for (std::int64_t c = 0; c < width; ++c) r.step(block[c], row[c], j);
    }
    for (std::int64_t c = 0; c < width; ++c) r.combine(total[c], block[c]);
  }
  for (std::int64_t c = 0; c < width; ++c) r.write(i + c, total[c]);
}

// Reduces dim of x, writing output position i (row-major over the kept dims) through r.
template <class T, class R>
void reduce_dim(const CpuTensor& x, std::int64_t dim, const R& r) {
  const DimPlan plan = plan_dim(x.shape(), dim, {&x.strides()});
  if (plan.kept.elements == 0) return;
  const T* base = x.data_as<T>();
  const std::int64_t n = plan.length;
  const std::int64_t stride = plan.dim_strides[0];
  if (!columns_pay_off<1>(plan)) {
    for_each_line<1>(plan, [&](std::int64_t i, const std::array<std::int64_t, 1>& off) {
      r.write(i, reduce_line(r, base + off[0], n, stride, 0));
    });
    return;
  }
  for_each_column_block<1>(
      plan, kColumnWidth,
      [&](std::int64_t i, const std::array<std::int64_t, 1>& off, std::int64_t width) {
        if constexpr (requires { r.columns(base, n, stride, width, i); }) {
          r.columns(base + off[0], n, stride, width, i);
        } else {
          reduce_columns(r, base + off[0], n, stride, width, i);
        }
      });
}

// A loop over x's elements in the order they lie in memory (dims sorted by stride): a full
// reduction does not care about the logical order, and a transposed view is then read in order.
LoopPlan memory_order_plan(const CpuTensor& x) {
  const std::size_t rank = x.rank();
  std::vector<std::size_t> order(rank);
  for (std::size_t i = 0; i < rank; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::abs(x.strides()[a]) > std::abs(x.strides()[b]);
  });
  detail::DimVector dims(rank);
  Strides strides(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    dims[i] = x.shape()[order[i]];
    strides[i] = x.strides()[order[i]];
  }
  return plan_loop(Shape(std::move(dims)), {&strides});
}

// Reduces every element of x into r's output position 0.
template <class T, class R>
void reduce_all(const CpuTensor& x, const R& r) {
  using Acc = typename R::Acc;
  const std::int64_t n = x.shape().num_elements();
  const std::int64_t chunks = std::max<std::int64_t>(1, (n + kFullChunk - 1) / kFullChunk);
  struct Partial {
    Acc value;
  };  // not std::vector<bool>: threads write neighbouring partials
  detail::Buffer<Partial> partials(static_cast<std::size_t>(chunks), Partial{r.init()});
  const T* base = x.data_as<T>();
  if (n > 0) {
    const bool contiguous = x.is_contiguous();
    const LoopPlan plan = memory_order_plan(x);
    parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        const std::int64_t first = c * kFullChunk;
        const std::int64_t last = std::min(n, first + kFullChunk);
        Acc& acc = partials[static_cast<std::size_t>(c)].value;
        if (contiguous) {
          acc = reduce_line(r, base + first, last - first, 1, first);
          continue;
        }
        walk_segments<1>(
            plan, first, last,
            [&](std::int64_t j, std::int64_t count, const std::array<std::int64_t, 1>& off,
                const std::array<std::int64_t, 1>& step) {
              r.combine(acc, reduce_line(r, base + off[0], count, step[0], j));
            });
      }
    });
  }
  // Pairwise combination of the partials, in order.
  for (std::size_t width = 1; width < partials.size(); width *= 2) {
    for (std::size_t i = 0; i + width < partials.size(); i += 2 * width) {
      r.combine(partials[i].value, partials[i + width].value);
    }
  }
  r.write(0, partials[0].value);
}

Shape kept_shape(const Shape& shape, std::int64_t dim) {
  Shape out = shape;
  out[static_cast<std::size_t>(dim)] = 1;
  return out;
}

void check_index_dtype(DType index_dtype, const char* op) {
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
}

// Runs make_reducer(out_pointer) over everything (dim < 0) or along dim; out has out_dtype.
template <class T, class Out, class MakeReducer>
Primitive run_reduction(const Primitive& x, std::int64_t dim, DType out_dtype,
                        MakeReducer make_reducer) {
  const CpuTensor& in = as_cpu(x);
  const Shape shape = dim < 0 ? Shape{1} : kept_shape(in.shape(), dim);
  auto out = make_tensor(out_dtype, shape);
  const auto reducer = make_reducer(out->template data_as<Out>());
  if (dim < 0) {
    reduce_all<T>(in, reducer);
  } else {
    reduce_dim<T>(in, dim, reducer);
  }
  return out;
}

Primitive sum_impl(Primitive x, std::int64_t dim, bool mean, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    const std::int64_t count =
        dim < 0 ? x->shape().num_elements() : x->shape()[static_cast<std::size_t>(dim)];
    return run_reduction<T, T>(x, dim, dtype, [&](T* out) {
      return SumReducer<T>{out, mean ? static_cast<double>(count) : 1.0};
    });
  });
}

Primitive prod_impl(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return run_reduction<T, T>(x, dim, dtype, [](T* out) { return ProdReducer<T>{out}; });
  });
}

template <bool IsMax>
Primitive extremum_impl(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return run_reduction<T, T>(x, dim, dtype,
                               [](T* out) { return ExtremumReducer<T, IsMax>{out}; });
  });
}

template <bool IsAny>
Primitive truth_impl(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  return visit_dtype(dtype, op, [&]<class T>(type_tag<T>) -> Primitive {
    return run_reduction<T, bool>(x, dim, DType::Bool,
                                  [](bool* out) { return TruthReducer<T, IsAny>{out}; });
  });
}

// Indices (and values when with_values) of the max or min along dim.
template <bool IsMax>
PrimitivePair arg_impl(Primitive x, std::int64_t dim, DType index_dtype, bool with_values,
                       const char* op) {
  check_index_dtype(index_dtype, op);
  const DType dtype = x->dtype();
  return visit_numeric_types(dtype, op, [&]<class T>(type_tag<T>) -> PrimitivePair {
    const CpuTensor& in = as_cpu(x);
    const Shape shape = kept_shape(in.shape(), dim);
    auto indices = make_tensor(index_dtype, shape);
    std::shared_ptr<CpuTensor> values;
    if (with_values) values = make_tensor(dtype, shape);
    const ArgReducer<T, IsMax> reducer{IndexWriter{indices->data(), index_dtype},
                                       values ? values->data_as<T>() : nullptr};
    reduce_dim<T>(in, dim, reducer);
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

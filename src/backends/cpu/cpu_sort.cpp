// Sorting along a dim: sort, sort_with_indices, argsort (stable; NaN last ascending, first
// descending, as in PyTorch) and topk (largest or smallest first, ties by lower index, NaN
// counts as the largest). Slices are sorted in parallel; one long slice is sorted by a parallel
// merge sort.
#include <algorithm>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dim_plan.h"
#include "core/buffer.h"
#include "core/dtype_dispatch.h"

namespace kiln {

using namespace cpu;

namespace {

// Below this slice length, a single slice is sorted on one thread.
constexpr std::int64_t kParallelSortLength = 1 << 16;

// Strict weak orders with NaN as the largest value.
template <class C>
bool ascending_before(C a, C b) noexcept {
  if constexpr (std::is_floating_point_v<C>)
    return a < b || (b != b && a == a);
  else
    return a < b;
}

// The element type a slice is sorted as: float or double, else an integer that holds every
// value of T (int32 for the narrow ones), so that the sorts are made for five types, not twelve.
template <class T>
using sort_key_t = std::conditional_t<
    std::is_floating_point_v<compute_t<T>>, compute_t<T>,
    std::conditional_t<
        (sizeof(T) < 4 || (sizeof(T) == 4 && std::is_signed_v<T>)), std::int32_t,
        std::conditional_t<std::is_signed_v<T> || sizeof(T) == 4, std::int64_t, std::uint64_t>>>;

// Ascending or descending order of values.
template <class C>
struct Before {
  bool descending;
  bool operator()(C a, C b) const noexcept {
    return descending ? ascending_before(b, a) : ascending_before(a, b);
  }
};

// A value with its position; 32-bit positions when the slice allows (half the bytes to move).
template <class C, class I>
struct Entry {
  C value;
  I index;
};

template <class C, class I>
struct ByValue {
  Before<C> before;
  bool operator()(const Entry<C, I>& a, const Entry<C, I>& b) const noexcept {
    return before(a.value, b.value);
  }
};
// topk: a total order (ties by position), so a partial selection is deterministic.
template <class C, class I>
struct ByValueThenIndex {
  Before<C> before;
  bool operator()(const Entry<C, I>& a, const Entry<C, I>& b) const noexcept {
    if (before(a.value, b.value)) return true;
    if (before(b.value, a.value)) return false;
    return a.index < b.index;
  }
};

// std::stable_sort of [first, last), in parallel for long ranges: chunks are sorted on their
// own threads, then merged pairwise (std::merge keeps the left run first on ties, so the result
// stays stable).
template <class E, class Less>
void stable_sort_range(E* first, E* last, Less less) {
  const std::int64_t n = last - first;
  const std::int64_t chunks =
      std::min<std::int64_t>(thread_count(), std::max<std::int64_t>(1, n / kParallelSortLength));
  if (chunks <= 1 || in_parallel_region()) {
    std::stable_sort(first, last, less);
    return;
  }
  auto bound = [&](std::int64_t c) { return std::min(n, n * c / chunks); };
  parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c)
      std::stable_sort(first + bound(c), first + bound(c + 1), less);
  });
  detail::Buffer<E> scratch(static_cast<std::size_t>(n));
  E* from = first;
  E* to = scratch.data();
  for (std::int64_t width = 1; width < chunks; width *= 2) {
    const std::int64_t pairs = (chunks + 2 * width - 1) / (2 * width);
    parallel_for(pairs, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        const std::int64_t lo = bound(p * 2 * width);
        const std::int64_t mid = bound(std::min(chunks, p * 2 * width + width));
        const std::int64_t hi = bound(std::min(chunks, (p + 1) * 2 * width));
        std::merge(from + lo, from + mid, from + mid, from + hi, to + lo, less);
      }
    });
    std::swap(from, to);
  }
  if (from != first) std::copy(from, from + n, first);
}

struct SortRequest {
  std::int64_t dim;
  bool descending;    // sort: descending order; topk: largest first
  std::int64_t keep;  // topk: how many to keep; -1 for a full sort
  bool want_values;
  bool want_indices;
  DType index_dtype;
};

// A thread's buffer for the values or entries of one slice.
using Scratch = detail::Buffer<std::uint64_t>;

// work(in_offset, out_offset, scratch) for every slice along the plan's dim. Few long slices
// run one after another (each sort is parallel inside); many slices are spread over threads,
// with one scratch buffer per thread. One parallel region for every dtype: work is called
// through a pointer, once per slice.
void for_each_slice(const DimPlan& plan,
                    const std::function<void(std::int64_t, std::int64_t, Scratch&)>& work) {
  const std::int64_t slices = plan.kept.elements;
  const std::int64_t n = plan.length;
  if (slices == 1 || (slices < thread_count() && n >= kParallelSortLength)) {
    Scratch scratch;
    for (std::int64_t s = 0; s < slices; ++s) {
      const auto off = offsets_at<2>(plan.kept, s);
      work(off[0], off[1], scratch);
    }
    return;
  }
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, n * 8));
  parallel_for(slices, grain, [&](std::int64_t begin, std::int64_t end) {
    Scratch scratch;
    walk_segments<2>(plan.kept, begin, end,
                     [&](std::int64_t, std::int64_t count, const std::array<std::int64_t, 2>& start,
                         const std::array<std::int64_t, 2>& step) {
                       for (std::int64_t c = 0; c < count; ++c) {
                         work(start[0] + c * step[0], start[1] + c * step[1], scratch);
                       }
                     });
  });
}

// scratch as room for n elements of E (whose alignment is at most 8).
template <class E>
E* room_for(Scratch& scratch, std::int64_t n) {
  static_assert(alignof(E) <= alignof(std::uint64_t));
  scratch.resize((static_cast<std::size_t>(n) * sizeof(E) + 7) / 8);
  return reinterpret_cast<E*>(scratch.data());
}

// The orderings, made once per key type C (and position type I), whatever the dtype stored.
template <class C>
void sort_values(C* first, std::int64_t n, bool descending) {
  stable_sort_range(first, first + n, Before<C>{descending});
}
// The first `keep` entries in order (all of them, stably, when keep < 0).
template <class C, class I>
void order_entries(Entry<C, I>* first, std::int64_t n, std::int64_t keep, bool descending) {
  const Before<C> before{descending};
  const ByValueThenIndex<C, I> total_less{before};
  if (keep < 0) {
    stable_sort_range(first, first + n, ByValue<C, I>{before});
  } else if (keep * 16 <= n) {
    // Few wanted: a heap of keep entries rejects most values with one comparison.
    std::partial_sort(first, first + keep, first + n, total_less);
  } else if (keep < n) {
    std::nth_element(first, first + keep, first + n, total_less);
    std::sort(first, first + keep, total_less);
  } else {
    std::sort(first, first + n, total_less);
  }
}

// One routine for every op here: per slice along dim, gather values (with their positions when
// indices are wanted), order them, and write the first `keep` (or all) of them.
template <class T>
PrimitivePair sort_slices(const Primitive& x, const SortRequest& request) {
  using C = sort_key_t<T>;
  const CpuTensor& in = as_cpu(x);
  const Shape& shape = in.shape();
  const std::size_t d = static_cast<std::size_t>(request.dim);
  const std::int64_t n = shape[d];
  const std::int64_t keep = request.keep < 0 ? n : request.keep;
  Shape out_shape = shape;
  out_shape[d] = keep;
  std::shared_ptr<CpuTensor> values;
  std::shared_ptr<CpuTensor> indices;
  if (request.want_values) values = make_tensor(x->dtype(), out_shape);
  if (request.want_indices) indices = make_tensor(request.index_dtype, out_shape);
  if (out_shape.num_elements() == 0) return {values, indices};

  // Both outputs are contiguous of out_shape, so they share offsets.
  const Strides out_strides = contiguous_strides(out_shape);
  const DimPlan plan = plan_dim(shape, request.dim, {&in.strides(), &out_strides});
  const T* src = in.data_as<T>();
  T* value_out = values ? values->data_as<T>() : nullptr;
  const IndexWriter index_out{indices ? indices->data() : nullptr, request.index_dtype};
  const std::int64_t si = plan.dim_strides[0];
  const std::int64_t so = plan.dim_strides[1];
  const bool descending = request.descending;

  if (!request.want_indices) {
    // Values only: no positions to carry.
    for_each_slice(plan, [&](std::int64_t in_offset, std::int64_t out_offset, Scratch& scratch) {
      C* buffer = room_for<C>(scratch, n);
      const T* p = src + in_offset;
      for (std::int64_t j = 0; j < n; ++j) buffer[j] = static_cast<C>(p[j * si]);
      sort_values(buffer, n, descending);
      for (std::int64_t j = 0; j < n; ++j) {
        value_out[out_offset + j * so] = static_cast<T>(buffer[j]);
      }
    });
    return {values, indices};
  }

  auto with_positions = [&]<class I>(type_tag<I>) {
    using E = Entry<C, I>;
    for_each_slice(plan, [&](std::int64_t in_offset, std::int64_t out_offset, Scratch& scratch) {
      E* entries = room_for<E>(scratch, n);
      const T* p = src + in_offset;
      for (std::int64_t j = 0; j < n; ++j)
        entries[j] = {static_cast<C>(p[j * si]), static_cast<I>(j)};
      order_entries(entries, n, request.keep, descending);
      for (std::int64_t j = 0; j < keep; ++j) {
        const E& e = entries[j];
        if (value_out != nullptr) value_out[out_offset + j * so] = static_cast<T>(e.value);
        index_out(out_offset + j * so, static_cast<std::int64_t>(e.index));
      }
    });
  };
  if (n <= std::numeric_limits<std::int32_t>::max()) {
    with_positions(type_tag<std::int32_t>{});
  } else {
    with_positions(type_tag<std::int64_t>{});
  }
  return {values, indices};
}

PrimitivePair run_sort(const Primitive& x, const SortRequest& request, const char* op) {
  if (request.want_indices && !is_int(request.index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(request.index_dtype));
  }
  return visit_numeric_types(x->dtype(), op, [&]<class T>(type_tag<T>) -> PrimitivePair {
    return sort_slices<T>(x, request);
  });
}

}  // namespace

Primitive CpuBackend::sort(Primitive x, std::int64_t dim, bool descending) {
  return run_sort(x, {dim, descending, -1, true, false, DType::I64}, "sort").first;
}

PrimitivePair CpuBackend::sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                            DType index_dtype) {
  return run_sort(x, {dim, descending, -1, true, true, index_dtype}, "sort_with_indices");
}

Primitive CpuBackend::argsort(Primitive x, std::int64_t dim, bool descending, DType index_dtype) {
  return run_sort(x, {dim, descending, -1, false, true, index_dtype}, "argsort").second;
}

PrimitivePair CpuBackend::topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim,
                                            bool largest, DType index_dtype) {
  return run_sort(x, {dim, largest, k, true, true, index_dtype}, "topk_with_indices");
}

}  // namespace kiln

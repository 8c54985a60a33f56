// The CPU reduction and scan layer: a type-erased driver and typed kernels over lines.
//
// Planning (which dim is walked, the kept dims merged, the output allocated or reused), the
// choice between whole lines and blocks of adjacent columns, the split over threads and the
// partial results of a full reduction are ordinary code compiled once (reduce.cpp). The only
// code instantiated per (op, element type) is a ReduceKernel or a ScanKernel: loops over a
// block of lines that depend on nothing but the pointers and steps they are given, so a later
// fusion can run them tile by tile.
//
//   const SumReducer<float> sum{};
//   Primitive y =
//       run_reduce(x, dim, DType::F32, std::nullopt, make_reduce_kernel(sum), "sum_dim").first;
//
// Ops blind to signedness (wrapping sums and products, any/all) take the kernel of the unsigned
// type of the same width (width_t), which the driver runs on the signed storage as it is.
// 16-bit floats keep kernels of their own: a kernel reads a whole line at once (the pairwise sum
// depends on it), so the elementwise driver's f32 tiles would change the order of the sums.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "backends/cpu/cpu_tensor.h"
#include "core/dtype_dispatch.h"

namespace kiln::cpu {

// Outputs of one column block: at most this many adjacent columns are reduced together.
inline constexpr std::int64_t kReduceColumnWidth = 256;

// `count` lines of `length` values: line c starts at in + c * line_step and its values lie
// dim_step bytes apart. Line c's result goes to position first + c of the contiguous outputs
// out[0] (and out[1] when the op has a second output and it is not null).
using ReduceLines = void (*)(std::int64_t count, std::int64_t length, const char* in,
                             std::int64_t line_step, std::int64_t dim_step, char* const* out,
                             std::int64_t first, const void* context);

// The typed part of a reduction. context (the reducer: its parameters, no pointers to data)
// must outlive the run.
struct ReduceKernel {
  ReduceLines lines = nullptr;
  // The same contract for lines one element apart (count <= kReduceColumnWidth): the kernel
  // walks the dim row by row over the block, reading memory in order.
  ReduceLines columns = nullptr;
  // A full reduction, or a few long lines cut into chunks for several threads, through
  // accumulators of at most kMaxAccumulator bytes that the driver holds, aligned to that size.
  // Null for ops that only reduce along a dim.
  void (*init)(void* acc, const void* context) = nullptr;
  // acc = combine(acc, the reduction of n values at in, step bytes apart, the first at index
  // first).
  void (*accumulate)(void* acc, std::int64_t n, const char* in, std::int64_t step,
                     std::int64_t first, const void* context) = nullptr;
  void (*combine)(void* acc, const void* later, const void* context) = nullptr;
  // Writes acc as output position `position`.
  void (*write)(char* const* out, std::int64_t position, const void* acc,
                const void* context) = nullptr;
  const void* context = nullptr;
  DType in = DType::F32;  // the element type the kernel reads
};

inline constexpr std::size_t kMaxAccumulator = 16;

// Reduces x along dim (kept with size 1), or every element when dim < 0 (result shape [1]), into
// a new tensor of out_dtype, and a second one of second_dtype when given (null otherwise).
// Both are contiguous, so the kernel writes output position i at element i.
// x's dtype is the kernel's input type or an integer of its width.
std::pair<Primitive, Primitive> run_reduce(const Primitive& x, std::int64_t dim, DType out_dtype,
                                           std::optional<DType> second_dtype,
                                           const ReduceKernel& kernel, const char* op);

// `count` lines of `length` values: line c of the input starts at in + c * in_line, of the
// output at out + c * out_line; values along the dim lie in_dim and out_dim bytes apart. The
// kernel writes each running result; it reads each input value before writing its output, so
// the output may be the input.
using ScanLines = void (*)(std::int64_t count, std::int64_t length, const char* in,
                           std::int64_t in_line, std::int64_t in_dim, char* out,
                           std::int64_t out_line, std::int64_t out_dim, const void* context);

struct ScanKernel {
  ScanLines lines = nullptr;
  ScanLines columns = nullptr;  // lines one element apart in both, count <= kReduceColumnWidth
  const void* context = nullptr;
  DType type = DType::F32;  // read and written
};

// The running results of kernel along dim, of x's shape and dtype; x's memory is reused when it
// is uniquely owned.
Primitive run_scan(Primitive x, std::int64_t dim, const ScanKernel& kernel, const char* op);

// ---- element types of kernels ----

// For ops blind to signedness: the unsigned integer of T's width, T itself otherwise.
template <class T>
using width_t = typename std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                                            std::make_unsigned<T>, std::type_identity<T>>::type;

// ---- the loops of a kernel ----
//
// A reducer R has In (the element type read), Acc, init(), step(acc, value, index),
// combine(earlier, later) and write(out, position, acc); optionally line(p, n, stride) for a
// whole line, columns(p, n, stride, width, out, first) for a column block, and kOrderFree when
// its result does not depend on the order of the values.

namespace reduce_1d {

// Columns of a block whose rows are summed before their block is added to the total (keeps f64
// sums accurate without a pairwise tree per column).
inline constexpr std::int64_t kRowBlock = 1024;

// The reduction of n values at p, stride elements apart; index j0 for the first. Order-free
// reducers run contiguous lines in independent lanes: no dependency chain, and the compiler
// vectorises.
template <class R>
typename R::Acc reduce_line(const R& r, const typename R::In* p, std::int64_t n,
                            std::int64_t stride, std::int64_t j0) {
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

template <class R>
void lines(std::int64_t count, std::int64_t length, const char* in, std::int64_t line_step,
           std::int64_t dim_step, char* const* out, std::int64_t first, const void* context) {
  using T = typename R::In;
  const R& r = *static_cast<const R*>(context);
  const T* p = reinterpret_cast<const T*>(in);
  const std::int64_t line = line_step / std::int64_t{sizeof(T)};
  const std::int64_t stride = dim_step / std::int64_t{sizeof(T)};
  for (std::int64_t c = 0; c < count; ++c) {
    r.write(out, first + c, reduce_line(r, p + c * line, length, stride, 0));
  }
}

// A column block: outputs first .. first + width - 1 over n rows; rows are combined in blocks
// so that long f64 sums keep their precision.
template <class R>
void columns(std::int64_t width, std::int64_t n, const char* in, std::int64_t,
             std::int64_t dim_step, char* const* out, std::int64_t first, const void* context) {
  using T = typename R::In;
  using Acc = typename R::Acc;
  const R& r = *static_cast<const R*>(context);
  const T* base = reinterpret_cast<const T*>(in);
  const std::int64_t stride = dim_step / std::int64_t{sizeof(T)};
  if constexpr (requires { r.columns(base, n, stride, width, out, first); }) {
    r.columns(base, n, stride, width, out, first);
  } else {
    Acc total[kReduceColumnWidth];
    Acc block[kReduceColumnWidth];
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
    for (std::int64_t c = 0; c < width; ++c) r.write(out, first + c, total[c]);
  }
}

template <class R>
void init(void* acc, const void* context) {
  *static_cast<typename R::Acc*>(acc) = static_cast<const R*>(context)->init();
}
template <class R>
void accumulate(void* acc, std::int64_t n, const char* in, std::int64_t step, std::int64_t first,
                const void* context) {
  using T = typename R::In;
  const R& r = *static_cast<const R*>(context);
  r.combine(
      *static_cast<typename R::Acc*>(acc),
      reduce_line(r, reinterpret_cast<const T*>(in), n, step / std::int64_t{sizeof(T)}, first));
}
template <class R>
void combine(void* acc, const void* later, const void* context) {
  static_cast<const R*>(context)->combine(*static_cast<typename R::Acc*>(acc),
                                          *static_cast<const typename R::Acc*>(later));
}
template <class R>
void write(char* const* out, std::int64_t position, const void* acc, const void* context) {
  static_cast<const R*>(context)->write(out, position, *static_cast<const typename R::Acc*>(acc));
}

// A scan S has In, Acc, init(), step(acc, value) and value(acc) (the element written).
template <class S>
void scan_lines(std::int64_t count, std::int64_t length, const char* in, std::int64_t in_line,
                std::int64_t in_dim, char* out, std::int64_t out_line, std::int64_t out_dim,
                const void* context) {
  using T = typename S::In;
  const S& s = *static_cast<const S*>(context);
  constexpr std::int64_t size = sizeof(T);
  for (std::int64_t c = 0; c < count; ++c) {
    const T* p = reinterpret_cast<const T*>(in + c * in_line);
    T* q = reinterpret_cast<T*>(out + c * out_line);
    const std::int64_t si = in_dim / size;
    const std::int64_t so = out_dim / size;
    typename S::Acc acc = s.init();
    for (std::int64_t j = 0; j < length; ++j) {
      s.step(acc, p[j * si]);
      q[j * so] = s.value(acc);
    }
  }
}

template <class S>
void scan_columns(std::int64_t width, std::int64_t n, const char* in, std::int64_t,
                  std::int64_t in_dim, char* out, std::int64_t, std::int64_t out_dim,
                  const void* context) {
  using T = typename S::In;
  const S& s = *static_cast<const S*>(context);
  typename S::Acc acc[kReduceColumnWidth];
  for (std::int64_t c = 0; c < width; ++c) acc[c] = s.init();
  for (std::int64_t j = 0; j < n; ++j) {
    const T* p = reinterpret_cast<const T*>(in + j * in_dim);
    T* q = reinterpret_cast<T*>(out + j * out_dim);
    for (std::int64_t c = 0; c < width; ++c) {
      s.step(acc[c], p[c]);
      q[c] = s.value(acc[c]);
    }
  }
}

}  // namespace reduce_1d

// The kernels of reducer r, which must outlive the run. A reducer marked kDimOnly (those with
// indices) gets no full-reduction kernels.
template <class R>
ReduceKernel make_reduce_kernel(const R& r) {
  ReduceKernel kernel;
  kernel.lines = &reduce_1d::lines<R>;
  kernel.columns = &reduce_1d::columns<R>;
  kernel.context = &r;
  kernel.in = dtype_of<typename R::In>::value;
  if constexpr (!requires { R::kDimOnly; }) {
    using Acc = typename R::Acc;
    static_assert(sizeof(Acc) <= kMaxAccumulator && alignof(Acc) <= kMaxAccumulator &&
                  std::is_trivially_copyable_v<Acc>);
    kernel.init = &reduce_1d::init<R>;
    kernel.accumulate = &reduce_1d::accumulate<R>;
    kernel.combine = &reduce_1d::combine<R>;
    kernel.write = &reduce_1d::write<R>;
  }
  return kernel;
}

template <class S>
ScanKernel make_scan_kernel(const S& s) {
  return {&reduce_1d::scan_lines<S>, &reduce_1d::scan_columns<S>, &s,
          dtype_of<typename S::In>::value};
}

}  // namespace kiln::cpu

// Walking a tensor along one dim, for reductions, scans and sorts. The other ("kept") dims are
// collapsed where every operand allows (plan_loop), and the work is either
//   - runs of kept positions, one line each (for_each_line_run): good when the dim is
//     contiguous, or
//   - blocks of adjacent kept positions that are contiguous in every operand
//     (for_each_column_block): the dim is then walked row by row over a block of columns, so a
//     reduction of dim 0 of a row-major matrix reads memory in order.
// Both split the kept positions across threads.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/parallel.h"
#include "core/dtype_dispatch.h"
#include "kiln/dtype.h"

namespace kiln::cpu {

struct DimPlan {
  LoopPlan kept;            // the kept dims; kept.elements kept positions, in row-major order
  std::int64_t length = 0;  // size of the dim being walked (of operand 0)
  std::array<std::int64_t, kMaxOperands> dim_strides{};  // each operand's stride along the dim
};

// strides[i] are operand i's strides over shape (full rank); dim is the dim walked.
inline DimPlan plan_dim(const Shape& shape, std::int64_t dim,
                        std::initializer_list<const Strides*> strides) {
  const std::size_t d = static_cast<std::size_t>(dim);
  detail::DimVector kept_dims;
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (i != d) kept_dims.push_back(shape[i]);
  }
  std::array<Strides, kMaxOperands> kept_strides;
  DimPlan plan;
  std::size_t k = 0;
  for (const Strides* s : strides) {
    for (std::size_t i = 0; i < shape.rank(); ++i) {
      if (i != d) kept_strides[k].push_back((*s)[i]);
    }
    plan.dim_strides[k] = (*s)[d];
    ++k;
  }
  const Shape kept_shape(std::move(kept_dims));
  switch (k) {
    case 1:
      plan.kept = plan_loop(kept_shape, {&kept_strides[0]});
      break;
    case 2:
      plan.kept = plan_loop(kept_shape, {&kept_strides[0], &kept_strides[1]});
      break;
    default:
      plan.kept = plan_loop(kept_shape, {&kept_strides[0], &kept_strides[1], &kept_strides[2]});
      break;
  }
  plan.length = shape[d];
  return plan;
}

// Element offsets of each operand at kept position flat.
template <std::size_t N>
std::array<std::int64_t, N> offsets_at(const LoopPlan& plan, std::int64_t flat) {
  std::array<std::int64_t, N> offsets{};
  for (std::size_t d = plan.shape.size(); d-- > 0;) {
    const std::int64_t c = flat % plan.shape[d];
    flat /= plan.shape[d];
    for (std::size_t k = 0; k < N; ++k) offsets[k] += c * plan.strides[k][d];
  }
  return offsets;
}

// segment(flat, count, offsets, steps) for runs of kept positions (walk_segments over
// plan.kept), split over threads at a grain of kParallelGrain / work_per_line positions.
template <std::size_t N, class Segment>
void for_each_line_run(const DimPlan& plan, std::int64_t work_per_line, Segment&& segment) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, work_per_line));
  parallel_for(plan.kept.elements, grain, [&](std::int64_t begin, std::int64_t end) {
    walk_segments<N>(plan.kept, begin, end, segment);
  });
}

// True when the innermost kept dim is contiguous in every operand while the walked dim is not:
// then for_each_column_block reads and writes memory in order.
template <std::size_t N>
bool columns_pay_off(const DimPlan& plan) {
  const std::size_t last = plan.kept.shape.size() - 1;
  if (plan.kept.shape[last] < 2 || plan.dim_strides[0] == 1) return false;
  for (std::size_t k = 0; k < N; ++k) {
    if (plan.kept.strides[k][last] != 1) return false;
  }
  return true;
}

// block(flat, offsets, width): kept positions flat .. flat + width - 1, adjacent in memory
// (stride 1) in every operand; width <= max_width. In parallel.
template <std::size_t N, class Block>
void for_each_column_block(const DimPlan& plan, std::int64_t max_width, Block&& block) {
  const std::int64_t inner = plan.kept.shape.back();
  const std::int64_t outer = plan.kept.elements / inner;
  const std::int64_t chunks = (inner + max_width - 1) / max_width;
  const std::int64_t grain = std::max<std::int64_t>(
      1, kParallelGrain / std::max<std::int64_t>(1, plan.length * std::min(inner, max_width)));
  parallel_for(outer * chunks, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t c0 = (item % chunks) * max_width;
      const std::int64_t flat = (item / chunks) * inner + c0;
      block(flat, offsets_at<N>(plan.kept, flat), std::min(max_width, inner - c0));
    }
  });
}

// visit_numeric_dtype without instantiating f for bool (which it rejects at run time anyway):
// kernels that make no sense on bool need not compile for it.
template <class F>
decltype(auto) visit_numeric_types(DType dtype, std::string_view op, F&& f) {
  using Result = decltype(f(type_tag<float>{}));
  return visit_numeric_dtype(dtype, op, [&]<class T>(type_tag<T> tag) -> Result {
    if constexpr (std::is_same_v<T, bool>) {
      detail::fail<UnsupportedDType>(op, "expected a float or integer dtype, got bool");
    } else {
      return f(tag);
    }
  });
}

// Writes integer indices into an output of any integer dtype (the op's index_dtype argument).
struct IndexWriter {
  std::byte* base;
  DType dtype;
  void operator()(std::int64_t position, std::int64_t value) const noexcept {
    switch (dtype) {
      case DType::I64:
        put<std::int64_t>(position, value);
        break;
      case DType::I32:
        put<std::int32_t>(position, value);
        break;
      case DType::I16:
        put<std::int16_t>(position, value);
        break;
      case DType::I8:
        put<std::int8_t>(position, value);
        break;
      case DType::U64:
        put<std::uint64_t>(position, value);
        break;
      case DType::U32:
        put<std::uint32_t>(position, value);
        break;
      case DType::U16:
        put<std::uint16_t>(position, value);
        break;
      case DType::U8:
        put<std::uint8_t>(position, value);
        break;
      default:
        break;
    }
  }

 private:
  template <class I>
  void put(std::int64_t position, std::int64_t value) const noexcept {
    reinterpret_cast<I*>(base)[position] = static_cast<I>(value);
  }
};

}  // namespace kiln::cpu

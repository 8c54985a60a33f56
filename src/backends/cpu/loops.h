// The strided loop engine behind elementwise kernels. Operands (output first) are described by
// a base pointer and element strides over a common shape; dims that are contiguous for every
// operand are merged, then the iteration space is split across threads and each thread walks
// 1-D segments of the innermost dim. Kernels only write the 1-D segment loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/parallel.h"

namespace kiln::cpu {

inline constexpr std::size_t kMaxOperands = 4;

struct LoopPlan {
  detail::DimVector shape;  // collapsed dims (at least one)
  std::array<Strides, kMaxOperands> strides;
  std::size_t operands = 0;
  std::int64_t elements = 0;
};

// strides[i] are the element strides of operand i over shape.
LoopPlan plan_loop(const Shape& shape, std::initializer_list<const Strides*> strides);

// segment(flat, count, offsets, inner_strides) for positions [begin, end) of plan, in runs
// along the innermost collapsed dim; flat is the row-major index of the run's first position.
template <std::size_t N, class Segment>
void walk_segments(const LoopPlan& plan, std::int64_t begin, std::int64_t end, Segment&& segment) {
  const std::size_t rank = plan.shape.size();
  const std::int64_t inner = plan.shape[rank - 1];
  std::array<std::int64_t, N> inner_strides;
  for (std::size_t k = 0; k < N; ++k) inner_strides[k] = plan.strides[k][rank - 1];
  detail::DimVector coords(rank);
  std::array<std::int64_t, N> offsets{};
  std::int64_t rest = begin;
  for (std::size_t d = rank; d-- > 0;) {
    coords[d] = rest % plan.shape[d];
    rest /= plan.shape[d];
    for (std::size_t k = 0; k < N; ++k) offsets[k] += coords[d] * plan.strides[k][d];
  }
  std::int64_t i = begin;
  while (i < end) {
    const std::int64_t count = std::min(inner - coords[rank - 1], end - i);
    segment(i, count, offsets, inner_strides);
    i += count;
    coords[rank - 1] += count;
    for (std::size_t k = 0; k < N; ++k) offsets[k] += count * inner_strides[k];
    for (std::size_t d = rank - 1; d > 0 && coords[d] == plan.shape[d]; --d) {
      coords[d] = 0;
      ++coords[d - 1];
      for (std::size_t k = 0; k < N; ++k) {
        offsets[k] += plan.strides[k][d - 1] - plan.shape[d] * plan.strides[k][d];
      }
    }
  }
}

// segment(count, offsets, inner_strides): process count elements; offsets[i] is the element
// offset of operand i at the segment start, inner_strides[i] its stride along the segment.
// The positions are split across threads.
template <std::size_t N, class Segment>
void run_loop(const LoopPlan& plan, Segment&& segment, std::int64_t grain = kParallelGrain) {
  parallel_for(plan.elements, grain, [&](std::int64_t begin, std::int64_t end) {
    walk_segments<N>(plan, begin, end,
                     [&](std::int64_t, std::int64_t count, const auto& offsets,
                         const auto& strides) { segment(count, offsets, strides); });
  });
}

// dst[...] = src[...] for same-shape tensors of the same dtype, any strides.
void copy_strided(const CpuTensor& src, CpuTensor& dst);

}  // namespace kiln::cpu

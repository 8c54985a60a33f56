// The scatter family (generated source): out = x, then every element of `indices` sends its
// value to out at its position with the coordinate along dim replaced by the index, combined by
// the update mode (IndexingUpdate) with the CPU backend's semantics (src/backends/cpu/
// index_kernels.h: integers wrap, float min/max propagate NaN, Bool add/max are `or`, mul/min
// `and`). Two strategies, one module:
//  - kiln_scatter_lines: a thread per line along dim, walking it in order like the CPU backend
//    (distinct lines never meet, so the result is the CPU's exactly, duplicates included);
//    taken when there are enough lines to fill the GPU.
//  - kiln_scatter_atomic: a thread per element; Add/Mul/Min/Max through atomics (native where
//    the hardware has one, else a compare-and-swap loop on the element's aligned 32/64-bit
//    word, so 8/16-bit ints, f16, bf16 and Bool work too). Integer and min/max results equal
//    the CPU's; float add/mul may differ in rounding (the order of the updates differs).
//    Assign takes two passes that keep the CPU's "last duplicate wins": kiln_scatter_claim
//    records the largest position along dim that targets each output element (atomicMax into
//    a scratch word per element), kiln_scatter_assign lets only that one write.
// An index out of [0, size of dim) is reported at the next read as an ExecutionError.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "kiln/options.h"

namespace kiln::cuda {

inline constexpr int kScatterMaxRank = 12;

// Mirrors struct P of the generated source: same members, same order.
struct ScatterParams {
  std::int64_t n;  // lines (kiln_scatter_lines) or elements (the others)
  std::int64_t line, dim_size, out_step, index_step, value_step;
  std::int32_t rank, dim;
  std::int64_t sizes[kScatterMaxRank];
  std::int64_t out_strides[kScatterMaxRank];  // 0 along dim (the index gives that coordinate)
  std::int64_t index_strides[kScatterMaxRank];
  std::int64_t value_strides[kScatterMaxRank];
  std::uint64_t out, index, values, winner;
  std::uint64_t error_word;
  std::uint32_t error_token;
};

// Source of the module for values of dtype (the raw unsigned dtype of its width for Assign),
// indices of index_dtype.
std::string scatter_source(DType dtype, DType index_dtype, IndexingUpdate update);

}  // namespace kiln::cuda

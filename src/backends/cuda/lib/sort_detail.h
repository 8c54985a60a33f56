// Internal to kiln_cuda_lib: the per-dtype sort entry points, defined in sort_kernels.cuh and
// instantiated by the width of the keys CUB sorts: sort_u32.cu (8-, 16- and 32-bit dtypes) and
// sort_u64.cu, one translation unit per CUB key type so nvcc compiles them in parallel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/lib/keys.h"
#include "backends/cuda/lib/sort.h"

namespace kiln::cuda::lib::sort_detail {

// Workspace bytes for desc's keys (desc already validated and non-empty).
template <class U, KeyKind K>
std::size_t workspace_bytes(const SortDesc& desc);

// Float sorts without indices restore the bits of +-0 and NaNs by carrying positions through the
// sort (set: the way indices are made), or from compacted lists of where they are (unset, the
// default: a keys-only sort, 15% faster on the H200). Segmented sorts (many rows) always carry
// positions. For tests, which check both, and benchmarks; change it only when no sort is being
// planned.
void set_float_values_by_positions(bool enabled);
bool float_values_by_positions();

template <class U, KeyKind K>
void sort_typed(const SortDesc& desc, const void* input, void* values, void* indices,
                void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib::sort_detail

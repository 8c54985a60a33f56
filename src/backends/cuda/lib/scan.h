// Inclusive scans (cumsum, cumprod, cummin, cummax) along rows of a contiguous [rows, n] device
// buffer, with the CPU backend's dtype semantics (src/backends/cpu/cpu_scan.cpp):
//   - float sums and products accumulate in double and each output is rounded from it
//     (f16/bf16 through float, as the CPU does);
//   - integer sums and products wrap around (64-bit modular arithmetic, then the dtype's width);
//   - cummin/cummax compare in the dtype's compute type and keep a NaN once seen (PyTorch).
// The association order differs from the CPU's left-to-right loop, so float results can differ
// in the last bit of the double accumulator.
//
// Usage (cumsum of x[rows, n] f32 into y, which may be x itself):
//   ScanDesc desc{.dtype = DType::F32, .rows = rows, .n = n, .op = ScanOp::Sum};
//   std::size_t bytes = scan_workspace_bytes(desc);   // 0 when one tile covers a row
//   scan_rows(desc, x, y, workspace, bytes, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda::lib {

enum class ScanOp : std::uint8_t { Sum, Prod, Min, Max };

struct ScanDesc {
  DType dtype = DType::F32;  // every float and integer dtype (not Bool)
  std::int64_t rows = 1;
  std::int64_t n = 0;
  ScanOp op = ScanOp::Sum;
};

// Throws InvalidArgument / UnsupportedDType naming the field when desc cannot be scanned.
void validate(const ScanDesc& desc);

// Bytes of device workspace scan_rows needs (per-tile partial results of long rows).
[[nodiscard]] std::size_t scan_workspace_bytes(const ScanDesc& desc);

// output[r, j] = op(input[r, 0..j]). output may equal input (in place); otherwise they must not
// overlap. Asynchronous on stream.
void scan_rows(const ScanDesc& desc, const void* input, void* output, void* workspace,
               std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda::lib

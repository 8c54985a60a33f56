// topk of the rows of a contiguous [rows, n] buffer by selection, without sorting the rows
// (lib/sort.h sorts them; this reads each element once). Generated kernels, compiled by NVRTC
// per (key width, key kind, list length K) on first use. For k up to max_select_k(dtype):
//   select: a warp walks a row (or a segment of a long row, when there are too few rows to fill
//           the GPU) with 16-byte loads, every lane keeping its best K in registers
//           (topk_lists.h) and rejecting most elements with one compare against a warp-wide
//           threshold; the lanes' lists merge by shuffles.
//   merge:  a block per row of a segmented plan merges the segments' lists.
// The result is exactly the CPU backend's (src/backends/cpu/cpu_sort.cpp): largest (or smallest)
// first, ties by the lower index, NaN the largest value, -0.0 equal to +0.0, and the values
// written are the input's own bits. cuda_sort.cpp launches it for topk_with_indices.
//
// Usage (top 8 of each row of x[rows, n] f32, with i64 indices):
//   TopkDesc desc{.dtype = DType::F32, .rows = rows, .n = n, .k = 8, .largest = true,
//                 .index_dtype = DType::I64};
//   if (desc.k <= max_select_k(desc.dtype)) {
//     const TopkPlan plan = plan_topk(desc);                 // validates desc
//     const std::size_t bytes = topk_workspace_bytes(desc);  // the partial lists' workspace
//     TopkParams p = topk_params(desc, plan);                // + the four device addresses
//     for (const TopkLaunch& launch : plan.launches) {
//       // compile topk_kernel_source(launch.kernel, desc.dtype, plan.list) under its
//       // topk_kernel_key, launch topk_kernel_name(launch.kernel) with launch.blocks x kTopkBlock
//     }
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/lib/keys.h"
#include "kiln/dtype.h"

namespace kiln::cuda {

// Larger k takes the row sort. Each lane's list lives in registers: 32 entries of a key up to 32
// bits are 64 registers (168 in all on sm_90); a 64-bit key's entry takes three, and at 32 of
// them the kernel spills (255 registers and kilobytes of local memory), so those stop at 16.
// 8-bit keys stop at 16 too: their 32-entry lists took NVRTC 45 s (unsigned) to 145 s (signed)
// to compile on first use, for a k that the row sort serves as well.
inline constexpr std::int64_t kMaxSelectK = 32;
constexpr std::int64_t max_select_k(DType dtype) {
  return dtype_size(dtype) == 8 || dtype_size(dtype) == 1 ? 16 : kMaxSelectK;
}

struct TopkDesc {
  DType dtype = DType::F32;        // every float and integer dtype (not Bool)
  std::int64_t rows = 1;           // independent rows, each of n elements, row-major and contiguous
  std::int64_t n = 0;              // at most 2^31 - 1
  std::int64_t k = 0;              // 0 .. min(n, max_select_k(dtype))
  bool largest = true;             // largest first; else smallest first
  DType index_dtype = DType::I64;  // I64 or I32
};

// Throws InvalidArgument naming the field (UnsupportedDType for the dtype) when desc cannot be
// selected.
void validate(const TopkDesc& desc);

// A warp per row fills the GPU from about this many rows (132 SMs x 32 resident warps on an
// H100/H200: enough loads in flight to reach the copy bandwidth). Fewer, long rows are cut into
// segments of at least kMinSegment elements (128 per lane), a warp each, whose lists a second
// kernel merges.
inline constexpr std::int64_t kTopkTargetWarps = 4096;
inline constexpr std::int64_t kTopkMinSegment = 4096;
inline constexpr unsigned kTopkBlock = 256;  // threads of both kernels' blocks
// Grids beyond this loop inside the kernels.
inline constexpr std::int64_t kTopkMaxBlocks = std::int64_t{1} << 20;

enum class TopkKernel { Select, Merge };

struct TopkLaunch {
  TopkKernel kernel;
  unsigned blocks;
};

// How the rows are split, and the launches (none when the result is empty).
struct TopkPlan {
  int list = 1;               // K: the list length compiled for k
  std::int64_t segments = 1;  // per row
  std::int64_t segment = 0;   // elements per segment (the last may be shorter)
  std::vector<TopkLaunch> launches;
};
// Validates desc.
TopkPlan plan_topk(const TopkDesc& desc);

// The list length compiled for k: the next power of two (1 .. 32).
constexpr int list_length(std::int64_t k) {
  int length = 1;
  while (length < k) length *= 2;
  return length;
}

// Bytes of one list entry (topk_lists.h's Candidate) for dtype's key width.
std::size_t candidate_bytes(DType dtype);

// Bytes of device workspace desc needs (0 unless long rows are split in segments; 256-byte
// aligned). Validates desc.
[[nodiscard]] std::size_t topk_workspace_bytes(const TopkDesc& desc);

// Mirrors struct P of the generated source (topk_source.cpp): same members, same order.
// values/indices: row-major [rows, k], indices as i64 (wide_indices) or i32; partial: the
// workspace, [rows, segments, K] lists when segments > 1. Outputs must not overlap the input.
struct TopkParams {
  std::int64_t rows, n, segments, segment, k;
  std::uint64_t input, values, indices, partial;
  std::int32_t largest, wide_indices;
};
TopkParams topk_params(const TopkDesc& desc, const TopkPlan& plan);

// The name of the kernel's entry point, and its module's key for the compiler, e.g.
// "topk:select:u32:signed:8" (the merge is the same for every kind of a width).
const char* topk_kernel_name(TopkKernel kernel);
std::string topk_kernel_key(TopkKernel kernel, DType dtype, int list);

// Generated source of one kernel for keys of `bits` (8, 16, 32, 64) ordered as kind, with lists
// of `list` entries (a power of two up to 32; 16 for 64-bit keys).
std::string topk_kernel_source(TopkKernel kernel, int bits, lib::KeyKind kind, int list);
// The same for dtype's key type.
std::string topk_kernel_source(TopkKernel kernel, DType dtype, int list);

}  // namespace kiln::cuda

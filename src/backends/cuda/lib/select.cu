// Stream compaction with CUB's DeviceReduce (the count) and DeviceSelect (the items or their
// positions). The number of items selected, which DeviceSelect also writes, goes to the
// workspace: the caller has it from count_flags already.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/select.h"
#include "backends/cuda/lib/workspace.h"

namespace kiln::cuda::lib {

namespace {

// A flag as a count of 0 or 1.
struct FlagCount {
  __host__ __device__ std::int64_t operator()(unsigned char flag) const { return flag != 0; }
};

using Flags = const unsigned char*;
using CountingFlags = thrust::transform_iterator<FlagCount, Flags>;

std::size_t count_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  KILN_CUDA_CHECK("count_flags",
                  cub::DeviceReduce::Sum(nullptr, bytes, CountingFlags(nullptr, FlagCount{}),
                                         static_cast<std::int64_t*>(nullptr), n));
  return bytes;
}

template <class T>
std::size_t select_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  KILN_CUDA_CHECK("select_flagged",
                  cub::DeviceSelect::Flagged(nullptr, bytes, static_cast<const T*>(nullptr),
                                             static_cast<Flags>(nullptr), static_cast<T*>(nullptr),
                                             static_cast<std::int64_t*>(nullptr), n));
  return bytes;
}

std::size_t positions_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  KILN_CUDA_CHECK(
      "flagged_positions",
      cub::DeviceSelect::Flagged(nullptr, bytes, thrust::counting_iterator<std::int64_t>(0),
                                 static_cast<Flags>(nullptr), static_cast<std::int64_t*>(nullptr),
                                 static_cast<std::int64_t*>(nullptr), n));
  return bytes;
}

// f(T{}) with the unsigned integer type of item_bytes.
template <class F>
void visit_item(std::size_t item_bytes, const char* op, F&& f) {
  switch (item_bytes) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    case 8:
      return f(std::uint64_t{});
    default:
      break;
  }
  detail::fail<InvalidArgument>(op, "items of ", item_bytes, " bytes (1, 2, 4 or 8)");
}

// The workspace split into the selection's count (first 256 bytes) and CUB's storage.
struct Pieces {
  std::int64_t* selected;
  void* temp;
  std::size_t temp_bytes;
};

Pieces split(void* workspace, std::size_t workspace_bytes, std::size_t needed, const char* op) {
  if (workspace == nullptr || workspace_bytes < needed) {
    detail::fail<InvalidArgument>(op, "workspace of ", workspace_bytes, " bytes, need ", needed);
  }
  auto* base = static_cast<unsigned char*>(workspace);
  return {reinterpret_cast<std::int64_t*>(base), base + kWorkspaceAlignment,
          workspace_bytes - kWorkspaceAlignment};
}

void check_n(std::int64_t n, const char* op) {
  if (n < 0) detail::fail<InvalidArgument>(op, "negative item count ", n);
}

}  // namespace

std::size_t compaction_workspace_bytes(std::int64_t n, std::size_t item_bytes) {
  check_n(n, "compaction");
  if (n == 0) return 0;
  std::size_t cub = count_bytes(n);
  if (item_bytes != 0) {
    visit_item(item_bytes, "compaction",
               [&]<class T>(T) { cub = std::max(cub, select_bytes<T>(n)); });
    cub = std::max(cub, positions_bytes(n));
  }
  return kWorkspaceAlignment + align_up(cub);
}

void count_flags(const void* flags, std::int64_t n, std::int64_t* count, void* workspace,
                 std::size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "count_flags";
  check_n(n, op);
  if (n == 0) {
    KILN_CUDA_CHECK(op, cudaMemsetAsync(count, 0, sizeof(std::int64_t), stream));
    return;
  }
  Pieces p = split(workspace, workspace_bytes, kWorkspaceAlignment + align_up(count_bytes(n)), op);
  KILN_CUDA_CHECK(op, cub::DeviceReduce::Sum(p.temp, p.temp_bytes,
                                             CountingFlags(static_cast<Flags>(flags), FlagCount{}),
                                             count, n, stream));
}

void select_flagged(std::size_t item_bytes, const void* items, const void* flags, std::int64_t n,
                    void* out, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "select_flagged";
  check_n(n, op);
  if (n == 0) return;
  visit_item(item_bytes, op, [&]<class T>(T) {
    Pieces p =
        split(workspace, workspace_bytes, kWorkspaceAlignment + align_up(select_bytes<T>(n)), op);
    KILN_CUDA_CHECK(
        op, cub::DeviceSelect::Flagged(p.temp, p.temp_bytes, static_cast<const T*>(items),
                                       static_cast<Flags>(flags), static_cast<T*>(out), p.selected,
                                       n, stream));
  });
}

void flagged_positions(const void* flags, std::int64_t n, std::int64_t* out, void* workspace,
                       std::size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "flagged_positions";
  check_n(n, op);
  if (n == 0) return;
  Pieces p =
      split(workspace, workspace_bytes, kWorkspaceAlignment + align_up(positions_bytes(n)), op);
  KILN_CUDA_CHECK(op, cub::DeviceSelect::Flagged(
                          p.temp, p.temp_bytes, thrust::counting_iterator<std::int64_t>(0),
                          static_cast<Flags>(flags), out, p.selected, n, stream));
}

}  // namespace kiln::cuda::lib

#include "backends/cuda/allocator.h"

#include "backends/cuda/check.h"
#include "backends/cuda/context.h"

namespace kiln::cuda {

namespace {
constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
constexpr std::size_t kSmallStep = 512;
constexpr std::size_t kLargeStep = std::size_t(2) << 20;
// A cached block may serve a request down to half its size, no smaller (bounded waste).
constexpr std::size_t kMaxWasteFactor = 2;
}  // namespace

std::size_t Allocator::size_class(std::size_t bytes) noexcept {
  if (bytes == 0) bytes = 1;
  const std::size_t step = bytes < kSmallLimit ? kSmallStep : kLargeStep;
  return (bytes + step - 1) / step * step;
}

Allocator::~Allocator() { release_cache_locked(); }

CUdeviceptr Allocator::allocate(std::size_t bytes, std::size_t& capacity, const char* op) {
  // Requests past the address space would wrap in size_class; no GPU has this much memory.
  if (bytes > (std::size_t(1) << 56)) {
    detail::fail<OutOfMemory>(op, "cannot allocate ", bytes, " bytes on cuda:", context_.index());
  }
  const std::size_t size = size_class(bytes);
  std::lock_guard lock(mutex_);
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size * kMaxWasteFactor) {
    capacity = it->first;
    const CUdeviceptr pointer = it->second;
    free_.erase(it);
    in_use_ += static_cast<std::int64_t>(capacity);
    peak_ = std::max(peak_, in_use_);
    return pointer;
  }
  context_.make_current();
  CUdeviceptr pointer = 0;
  CUresult status = cuMemAlloc(&pointer, size);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    // Cached blocks may be what is missing: give them back to the driver and try once more.
    release_cache_locked();
    status = cuMemAlloc(&pointer, size);
  }
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    detail::fail<OutOfMemory>(op, "cannot allocate ", size, " bytes on cuda:", context_.index(),
                              " (", in_use_, " bytes in use by tensors, ", reserved_,
                              " reserved)");
  }
  check(status, op, "cuMemAlloc");
  capacity = size;
  reserved_ += static_cast<std::int64_t>(size);
  in_use_ += static_cast<std::int64_t>(size);
  peak_ = std::max(peak_, in_use_);
  return pointer;
}

void Allocator::deallocate(CUdeviceptr pointer, std::size_t capacity) noexcept {
  std::lock_guard lock(mutex_);
  in_use_ -= static_cast<std::int64_t>(capacity);
  free_.emplace(capacity, pointer);
}

void Allocator::release_cache() noexcept {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void Allocator::release_cache_locked() noexcept {
  if (free_.empty()) return;
  cuCtxSetCurrent(context_.context());  // noexcept path: no checked call that could throw
  // Queued kernels may still use a block freed on the host; wait before returning it.
  cuStreamSynchronize(context_.stream());
  for (const auto& [size, pointer] : free_) {
    cuMemFree(pointer);
    reserved_ -= static_cast<std::int64_t>(size);
  }
  free_.clear();
}

MemoryStats Allocator::stats() const noexcept {
  std::lock_guard lock(mutex_);
  return {in_use_, reserved_, peak_};
}

void Allocator::reset_peak() noexcept {
  std::lock_guard lock(mutex_);
  peak_ = in_use_;
}

}  // namespace kiln::cuda

#include "backends/cuda/allocator.h"

#include <bit>

#include "backends/cuda/check.h"
#include "backends/cuda/context.h"
#include "backends/cuda/host_trace.h"
#include "backends/cuda/shutdown.h"
#include "decorators/capture/session.h"

namespace kiln::cuda {

namespace {
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
  // Memory the host writes before each run of the graph (capturing::Session::Pause) must not be
  // a block the graph's earlier ops use: it never comes from the pool.
  if (capturing_ != nullptr && !capturing::Session::paused_here()) {
    auto it = capturing_->free.lower_bound(size);
    if (it != capturing_->free.end() && it->first <= size * kMaxWasteFactor) {
      capacity = it->first;
      const CUdeviceptr pointer = it->second;
      capturing_->free.erase(it);
      in_use_ += static_cast<std::int64_t>(capacity);
      peak_ = std::max(peak_, in_use_);
      return pointer;
    }
  }
  if (const CUdeviceptr cached = take_cached(size, size * kMaxWasteFactor, capacity)) {
    in_use_ += static_cast<std::int64_t>(capacity);
    peak_ = std::max(peak_, in_use_);
    if (capturing_ != nullptr) pool_of_[cached] = capturing_.get();
    return cached;
  }

  context_.make_current();
  CUdeviceptr pointer = 0;
  CUresult status;
  {
    HostTrace trace(op, "cuMemAlloc");
    status = cuMemAlloc(&pointer, size);
  }
  if (status == CUDA_ERROR_OUT_OF_MEMORY && capturing_ == nullptr) {
    // Cached blocks may be what is missing: give them back to the driver and try once more (not
    // under a capture: that waits for the stream).
    HostTrace trace(op, "out of memory: the cache released and cuMemAlloc again");
    release_cache_locked();
    status = cuMemAlloc(&pointer, size);
  }
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    detail::fail<OutOfMemory>(op, "cannot allocate ", size, " bytes on cuda:", context_.index(),
                              " (", in_use_, " bytes in use by tensors, ", reserved_, " reserved)");
  }
  check(status, op, "cuMemAlloc");
  capacity = size;
  if (capturing_ != nullptr) pool_of_[pointer] = capturing_.get();
  reserved_ += static_cast<std::int64_t>(size);
  in_use_ += static_cast<std::int64_t>(size);
  peak_ = std::max(peak_, in_use_);
  return pointer;
}

CUdeviceptr Allocator::take_cached(std::size_t size, std::size_t limit, std::size_t& capacity) {
  if (size <= kSmallLimit) {
    // Class c (bytes c * 512 + 512) is bit c; the first set bit from size's own class up.
    const std::size_t first = size / kSmallStep - 1;
    const std::size_t last = std::min(limit, kSmallLimit) / kSmallStep - 1;
    for (std::size_t word = first / 64; word <= last / 64; ++word) {
      std::uint64_t bits = small_bits_[word];
      if (word == first / 64) bits &= ~std::uint64_t(0) << (first % 64);
      if (bits == 0) continue;
      const std::size_t c = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      if (c > last) break;
      std::vector<CUdeviceptr>& stack = small_[c];
      const CUdeviceptr pointer = stack.back();
      stack.pop_back();
      if (stack.empty()) small_bits_[c / 64] &= ~(std::uint64_t(1) << (c % 64));
      capacity = (c + 1) * kSmallStep;
      return pointer;
    }
    if (limit <= kSmallLimit) return 0;
  }
  auto it = large_.lower_bound(size);
  if (it == large_.end() || it->first > limit) return 0;
  capacity = it->first;
  const CUdeviceptr pointer = it->second;
  large_.erase(it);
  return pointer;
}

void Allocator::deallocate(CUdeviceptr pointer, std::size_t capacity) noexcept {
  std::lock_guard lock(mutex_);
  in_use_ -= static_cast<std::int64_t>(capacity);
  if (!pool_of_.empty() || capturing_ != nullptr) {
    auto it = pool_of_.find(pointer);
    Pool* pool = it != pool_of_.end() ? it->second : capturing_.get();
    if (pool != nullptr) {
      try {
        if (it == pool_of_.end()) pool_of_.emplace(pointer, pool);
        pool->free.emplace(capacity, pointer);
        return;
      } catch (const std::bad_alloc&) {
        // No host memory to remember it: the block stays allocated, unused, until exit.
        return;
      }
    }
  }
  cache_locked(pointer, capacity);
}

void Allocator::cache_locked(CUdeviceptr pointer, std::size_t capacity) noexcept {
  if (capacity > kSmallLimit) {
    large_.emplace(capacity, pointer);
    return;
  }
  const std::size_t c = capacity / kSmallStep - 1;
  try {
    small_[c].push_back(pointer);
  } catch (const std::bad_alloc&) {
    // No host memory to remember the block: give it back to the driver instead, or, while the
    // process ends, to nobody (the driver may be gone; the memory goes with the process).
    if (!shutdown::exiting()) {
      cuCtxSetCurrent(context_.context());
      cuStreamSynchronize(context_.stream());
      cuMemFree(pointer);
    }
    reserved_ -= static_cast<std::int64_t>(capacity);
    return;
  }
  small_bits_[c / 64] |= std::uint64_t(1) << (c % 64);
}

void Allocator::begin_pool() {
  std::lock_guard lock(mutex_);
  capturing_ = std::make_shared<Pool>();
}

std::shared_ptr<Allocator::Pool> Allocator::end_pool() {
  std::lock_guard lock(mutex_);
  return std::move(capturing_);
}

void Allocator::release_pool(Pool& pool) noexcept {
  std::lock_guard lock(mutex_);
  for (auto it = pool_of_.begin(); it != pool_of_.end();) {
    it = it->second == &pool ? pool_of_.erase(it) : std::next(it);
  }
  // Stream order keeps a replay still queued ahead of whoever takes these blocks next.
  for (const auto& [capacity, pointer] : pool.free) cache_locked(pointer, capacity);
  pool.free.clear();
}

void Allocator::release_cache() noexcept {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void Allocator::release_cache_locked() noexcept {
  bool any = !large_.empty();
  for (std::uint64_t bits : small_bits_) any = any || bits != 0;
  if (!any) return;
  cuCtxSetCurrent(context_.context());  // noexcept path: no checked call that could throw
  // Queued kernels may still use a block freed on the host; wait before returning it.
  cuStreamSynchronize(context_.stream());
  for (std::size_t c = 0; c < kSmallClasses; ++c) {
    for (CUdeviceptr pointer : small_[c]) {
      cuMemFree(pointer);
      reserved_ -= static_cast<std::int64_t>((c + 1) * kSmallStep);
    }
    small_[c].clear();
  }
  small_bits_.fill(0);
  for (const auto& [size, pointer] : large_) {
    cuMemFree(pointer);
    reserved_ -= static_cast<std::int64_t>(size);
  }
  large_.clear();
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

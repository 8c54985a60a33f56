// Splits [0, n) into contiguous ranges, one per thread, when the work is large enough.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {

// Elements below which a memory-bound loop stays on one thread. The ThreadSanitizer build
// (cmake/ThreadSanitizer.cmake) sets KILN_PARALLEL_GRAIN small, so that the test suite's small
// tensors run their kernels threaded: TSan checks only the parallel paths that run, and reports
// a race between two threads' chunks reliably only while the chunks are short.
#ifdef KILN_PARALLEL_GRAIN
inline constexpr std::int64_t kParallelGrain = KILN_PARALLEL_GRAIN;
#else
inline constexpr std::int64_t kParallelGrain = 32768;
#endif

// kiln::set_num_threads's count (threads.cpp): 0 for OpenMP's default.
extern std::atomic<int> thread_limit;

// The threads a parallel region of the CPU backend uses: kiln::set_num_threads's count, else
// OpenMP's (OMP_NUM_THREADS, else one per core).
inline int thread_count() noexcept {
  const int limit = thread_limit.load(std::memory_order_relaxed);
  return limit > 0 ? limit : omp_get_max_threads();
}

// Ranges per thread: handed out as threads come free (thread_pool.h), so that when another
// process takes a core from one thread the others do more of the ranges (a MiniLM forward beside
// a CPU hog, 95th percentile over the quiet median: 2.2 with one range per thread, 1.9-2.0).
inline constexpr std::int64_t kPiecesPerThread = 4;

// body(begin, end) on disjoint ranges covering [0, n), at least grain elements each where n
// allows. Exceptions from a body are rethrown.
template <class Body>
void parallel_for(std::int64_t n, std::int64_t grain, Body&& body) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<std::int64_t>(
      thread_count(), std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1))));
  if (threads <= 1 || in_parallel_region()) {
    body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t pieces =
      std::min<std::int64_t>(std::int64_t{threads} * kPiecesPerThread,
                             std::max<std::int64_t>(threads, n / std::max<std::int64_t>(grain, 1)));
  run_tasks(threads, pieces, [&](std::int64_t t) {
    const std::int64_t begin = n * t / pieces, end = n * (t + 1) / pieces;
    if (begin < end) body(begin, end);
  });
}

}  // namespace kiln::cpu

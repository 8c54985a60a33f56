// How many threads the CPU backend's kernels use.
//
//   kiln::set_num_threads(2);   // every later CPU op, from any thread, uses at most 2
//   kiln::num_threads();        // 2; after set_num_threads(0), OpenMP's default again
//
// By default the CPU backend uses OpenMP's thread count (OMP_NUM_THREADS, else one per core);
// the threads themselves are kiln's own workers, which sleep when idle (after polling 50 us).
// A kernel runs on one thread when its work is small, whatever the setting. Matrix products use
// these threads too: OpenBLAS itself is kept to one thread inside kiln's, so the two never
// oversubscribe the cores. set_num_threads is process-wide (unlike omp_set_num_threads, which
// sets the calling thread's count only) and may be called at any time; ops already running
// finish with the count they started with.
#pragma once

namespace kiln {

// n >= 1: at most n threads per CPU op; n = 0: OpenMP's default. InvalidArgument for n < 0.
void set_num_threads(int n);
// The threads a large CPU op uses now.
int num_threads() noexcept;

}  // namespace kiln

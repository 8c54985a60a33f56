#include "kiln/threads.h"

#include <omp.h>

#include "backends/cpu/parallel.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln {

void set_num_threads(int n) {
  if (n < 0) {
    detail::fail<InvalidArgument>("set_num_threads", "the thread count ", n,
                                  " must be >= 1, or 0 for OpenMP's default");
  }
  cpu::thread_limit.store(n, std::memory_order_relaxed);
}

int num_threads() noexcept { return cpu::thread_count(); }

namespace cpu {
std::atomic<int> thread_limit{0};
}  // namespace cpu

}  // namespace kiln

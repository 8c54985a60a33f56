// oneDNN (Debian's build) threads with OpenMP; kiln splits the work over its own pool
// (thread_pool.h) and runs each oneDNN call on one thread: nested OpenMP teams would
// oversubscribe the cores and spin against kiln's workers.
#pragma once

#include <omp.h>

namespace dnnl {
struct engine;
}

namespace kiln::cpu {

// The CPU engine every oneDNN primitive of the backend runs on (made on first use;
// dnnl_engine.cpp).
const dnnl::engine& dnnl_cpu_engine();

// While alive, the calling thread's OpenMP team is one thread (its setting restored after).
class SingleThreadedDnnl {
 public:
  SingleThreadedDnnl() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~SingleThreadedDnnl() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  SingleThreadedDnnl(const SingleThreadedDnnl&) = delete;
  SingleThreadedDnnl& operator=(const SingleThreadedDnnl&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::cpu

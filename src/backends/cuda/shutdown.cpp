#include "backends/cuda/shutdown.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backends/cuda/dispatcher.h"

namespace kiln::cuda::shutdown {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<Dispatcher*> dispatchers;
  bool hook_registered = false;
};

// Never destroyed: the guards and the atexit handler use it while the process ends.
Registry& registry() {
  static auto& r = *new Registry();
  return r;
}

std::atomic<bool> g_exiting{false};

void stop_every_launcher() noexcept {
  g_exiting.store(true, std::memory_order_seq_cst);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (Dispatcher* dispatcher : r.dispatchers) dispatcher->stop();
}

void wait_every_launcher() noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (Dispatcher* dispatcher : r.dispatchers) dispatcher->wait_handed_over();
}

// Destroyed when its thread ends, and for the thread that calls exit() before every static
// destructor and atexit handler (shutdown.h).
struct ThreadGuard {
  ThreadGuard() = default;
  ThreadGuard(const ThreadGuard&) = delete;
  ThreadGuard& operator=(const ThreadGuard&) = delete;
  ~ThreadGuard() {
    // The main thread ends only with the process (or by pthread_exit, after which launching on
    // the calling thread is merely slower). In a forked child the calling thread is its main one.
    if (gettid() == getpid()) {
      stop_every_launcher();
    } else {
      wait_every_launcher();
    }
  }
};

thread_local bool t_armed = false;

}  // namespace

void add(Dispatcher* dispatcher) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.hook_registered) {
    r.hook_registered = std::atexit(stop_every_launcher) == 0;
  }
  r.dispatchers.push_back(dispatcher);
}

void remove(Dispatcher* dispatcher) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase(r.dispatchers, dispatcher);
}

void arm_this_thread() {
  if (t_armed) return;
  static thread_local ThreadGuard guard;  // constructed here, once per thread
  (void)guard;
  t_armed = true;
}

bool exiting() noexcept { return g_exiting.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda::shutdown

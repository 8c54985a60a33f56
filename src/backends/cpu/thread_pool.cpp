#include "backends/cpu/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_CPU_RELAX() _mm_pause()
#else
#define KILN_CPU_RELAX() ((void)0)
#endif

namespace kiln::cpu {
namespace {

thread_local bool running_a_task = false;

// The kernel's wait and wake on a 32-bit word, without libstdc++'s atomic wait, which first
// polls and then yields the core a few times.
void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t old) {
  syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, old,
          nullptr, nullptr, 0);
}
void futex_wake(std::atomic<std::uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
}

// How long a waiting thread polls before it sleeps. A forward's regions follow each other within
// tens of microseconds, and a futex wake-up costs about as much: without the poll a [1024, 768]
// layer norm took 0.11 ms instead of 0.065. Much longer, and a waiting thread keeps a core from
// the thread it waits for whenever another process wants the core too (libgomp's default,
// about a millisecond, put a MiniLM forward's 95th percentile beside a CPU hog at 3.6 times its
// quiet median; 50 us: about 2).
constexpr auto kPollFor = std::chrono::microseconds(50);

// Sleeps until a changes from old.
void wait_until_changed(const std::atomic<std::uint32_t>& a, std::uint32_t old) {
  const auto until = std::chrono::steady_clock::now() + kPollFor;
  do {
    for (int i = 0; i < 16; ++i) {
      if (a.load(std::memory_order_acquire) != old) return;
      KILN_CPU_RELAX();
    }
  } while (std::chrono::steady_clock::now() < until);
  while (a.load(std::memory_order_acquire) == old) futex_wait(a, old);
}

// One worker's doorbell, on a cache line of its own: a region adds one to wake it.
struct alignas(64) Doorbell {
  std::atomic<std::uint32_t> rings{0};
};

class Pool {
 public:
  void run(int threads, std::int64_t count, TaskRef task) {
    std::unique_lock lock(dispatch_, std::try_to_lock);
    if (!lock.owns_lock()) {
      // Another thread's region holds the workers: this one runs on its caller alone.
      for (std::int64_t i = 0; i < count; ++i) task.call(task.callable, i);
      return;
    }
    const auto helpers = static_cast<std::size_t>(
        std::max<std::int64_t>(0, std::min<std::int64_t>(threads, count) - 1));
    const std::size_t available = add_workers(helpers);
    task_ = task;
    count_ = count;
    next_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    pending_.store(static_cast<std::uint32_t>(available), std::memory_order_relaxed);
    // The release of each ring publishes the region's fields to the worker it wakes.
    for (std::size_t w = 0; w < available; ++w) {
      doorbells_[w]->rings.fetch_add(1, std::memory_order_release);
      futex_wake(doorbells_[w]->rings);
    }
    running_a_task = true;
    work();
    running_a_task = false;
    for (std::uint32_t left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
      wait_until_changed(pending_, left);
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Starts workers until there are wanted; returns how many there are, at most wanted (fewer
  // only when the system refuses a thread).
  std::size_t add_workers(std::size_t wanted) {
    while (doorbells_.size() < wanted) {
      auto doorbell = std::make_unique<Doorbell>();
      try {
        std::thread([this, bell = doorbell.get()] { serve(*bell); }).detach();
      } catch (const std::system_error&) {
        break;
      }
      doorbells_.push_back(std::move(doorbell));
    }
    return std::min(wanted, doorbells_.size());
  }

  void serve(const Doorbell& bell) {
    running_a_task = true;
    std::uint32_t seen = 0;
    for (;;) {
      wait_until_changed(bell.rings, seen);
      seen = bell.rings.load(std::memory_order_acquire);
      work();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake(pending_);
    }
  }

  // Takes task indices until none is left; after a failure the rest are taken and skipped.
  void work() {
    for (;;) {
      const std::int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) return;
      if (failed_.load(std::memory_order_relaxed)) continue;
      try {
        task_.call(task_.callable, i);
      } catch (...) {
        const std::lock_guard guard(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
  }

  std::mutex dispatch_;  // held by the thread whose region runs
  std::vector<std::unique_ptr<Doorbell>> doorbells_;
  // The running region: written before its workers are rung, read by them after.
  TaskRef task_{};
  std::int64_t count_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<std::uint32_t> pending_{0};  // woken workers not yet done
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The pool is never destroyed: its workers sleep on its fields until the process ends. A forked
// child has none of the parent's threads, so it starts a pool of its own on first use.
std::atomic<Pool*> the_pool{nullptr};
Pool* parents_pool = nullptr;  // kept reachable in a child, for the leak checker

void forget_pool_in_child() {
  parents_pool = the_pool.exchange(nullptr, std::memory_order_relaxed);
}

Pool& pool() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, forget_pool_in_child);
    return true;
  }();
  (void)registered;
  Pool* p = the_pool.load(std::memory_order_acquire);
  if (p == nullptr) {
    auto* fresh = new Pool;  // NOLINT: never freed, as above
    if (the_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) {
      p = fresh;
    } else {
      delete fresh;
    }
  }
  return *p;
}

}  // namespace

void run_tasks(int threads, std::int64_t count, TaskRef task) {
  if (count <= 0) return;
  if (threads <= 1 || count == 1 || running_a_task) {
    for (std::int64_t i = 0; i < count; ++i) task.call(task.callable, i);
    return;
  }
  pool().run(threads, count, task);
}

bool in_parallel_region() noexcept { return running_a_task; }

}  // namespace kiln::cpu

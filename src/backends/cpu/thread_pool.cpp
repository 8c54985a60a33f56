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

// One worker's doorbell, on a cache line of its own: a region stores its generation to wake it.
struct alignas(64) Doorbell {
  std::atomic<std::uint32_t> rings{0};
};

// A region's next task index and its generation in one word, so that a worker claims an index
// only of the region it read the count of: a worker woken late, after its region has ended,
// finds another generation (or no index left) and touches nothing.
constexpr std::uint64_t ticket(std::uint32_t generation, std::uint32_t index) {
  return (std::uint64_t{generation} << 32) | index;
}

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
    // Indices are 32-bit: a longer region runs as several.
    constexpr std::int64_t kMaxCount = std::int64_t{1} << 31;
    for (std::int64_t first = 0; first < count; first += kMaxCount) {
      region(available, first, std::min(kMaxCount, count - first), task);
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }
  }

 private:
  // Tasks first .. first + count - 1 on the caller and the available workers. The caller waits
  // for the tasks, not for the workers: a worker another process keeps off its core (or one not
  // yet awake) when every task is taken costs the region nothing (beside a CPU hog, 2% of a
  // MiniLM forward went to waiting for workers that then found no task).
  void region(std::size_t available, std::int64_t first, std::int64_t count, TaskRef task) {
    // Never 0, a new worker's doorbell before its first ring.
    if (++generation_ == 0) generation_ = 1;
    const std::uint32_t generation = generation_;
    task_ = task;
    first_ = first;
    limit_.store(ticket(generation, static_cast<std::uint32_t>(count)), std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    // The release publishes the region's fields to every worker that reads this ticket.
    ticket_.store(ticket(generation, 0), std::memory_order_release);
    for (std::size_t w = 0; w < available; ++w) {
      doorbells_[w]->rings.store(generation, std::memory_order_release);
      futex_wake(doorbells_[w]->rings);
    }
    running_a_task = true;
    work(generation);
    running_a_task = false;
    const auto total = static_cast<std::uint32_t>(count);
    for (std::uint32_t done; (done = done_.load(std::memory_order_acquire)) != total;) {
      wait_until_changed(done_, done);
    }
  }

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
      work(seen);
    }
  }

  // Claims task indices of the region `generation` until none is left, or the region is over;
  // after a failure the rest are claimed and skipped. A claimed task keeps its region (and the
  // caller's task) alive until it is counted done.
  void work(std::uint32_t generation) {
    for (;;) {
      std::uint64_t t = ticket_.load(std::memory_order_acquire);
      if (static_cast<std::uint32_t>(t >> 32) != generation) return;
      // The count is read with its generation: between regions the caller writes the next
      // region's count before its ticket, and a count taken for the old ticket would let a late
      // worker claim an index past the old region's end (ThreadSanitizer caught it running the
      // next region's task half-written).
      const std::uint64_t limit = limit_.load(std::memory_order_acquire);
      if (static_cast<std::uint32_t>(limit >> 32) != generation) return;
      const auto index = static_cast<std::uint32_t>(t);
      const auto count = static_cast<std::uint32_t>(limit);
      if (index >= count) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
        continue;
      }
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          task_.call(task_.callable, first_ + index);
        } catch (...) {
          const std::lock_guard guard(error_mutex_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true, std::memory_order_relaxed);
        }
      }
      // The release publishes the task's writes (and its error) to the caller.
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) futex_wake(done_);
    }
  }

  std::mutex dispatch_;  // held by the thread whose region runs
  std::vector<std::unique_ptr<Doorbell>> doorbells_;
  // The running region. task_ and first_ are written before the region's ticket is stored and
  // read only by a thread holding one of its claimed indices (the region cannot end before that
  // task is done); limit_ (generation and task count) may be read late, and is then another
  // region's.
  std::uint32_t generation_ = 0;  // the caller's, under dispatch_
  TaskRef task_{};
  std::int64_t first_ = 0;
  std::atomic<std::uint64_t> limit_{0};
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<std::uint32_t> done_{0};  // tasks finished (or skipped)
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

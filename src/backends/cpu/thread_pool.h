// The CPU backend's worker threads: a parallel region hands out task indices to the caller and
// to the workers it wakes, one index at a time as each comes free.
//
// Why not OpenMP's regions: libgomp's idle workers spin (GOMP_SPINCOUNT, about a millisecond)
// before they sleep, and its barriers wait for every thread of the team. Beside another busy
// process on a 2-core machine, a spinning kiln thread kept a core from the thread whose work it
// waited for: a MiniLM forward's 95th percentile was 3.6 times its quiet median (torch 2.15:
// 3.9), and OMP_WAIT_POLICY=passive, which only the environment can set before the runtime
// starts, brought it to 1.9 (bench/transformer_bench's bert_contention). Here a waiting thread
// sleeps in the kernel at once, a region wakes only the workers it needs, and its tasks go to
// whichever thread is running; the region ends when its tasks are done, without waiting for a
// worker that took none (one kept off its core by another process).
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace kiln::cpu {

// A task to run as task(index): the callable's address and a function that calls it.
struct TaskRef {
  void (*call)(const void* callable, std::int64_t index);
  const void* callable;
};

// Runs task(0) .. task(count - 1) on the calling thread and up to threads - 1 workers, and
// returns when every task has finished. The first exception a task throws is rethrown here (the
// tasks not yet started are then skipped). A call from inside a region, or while another thread
// holds the workers, runs every task on the calling thread.
void run_tasks(int threads, std::int64_t count, TaskRef task);

template <class F>
void run_tasks(int threads, std::int64_t count, const F& task) {
  run_tasks(threads, count,
            TaskRef{[](const void* f, std::int64_t i) { (*static_cast<const F*>(f))(i); },
                    std::addressof(task)});
}

// Whether the calling thread is running a task of a region (nested regions run inline).
bool in_parallel_region() noexcept;

}  // namespace kiln::cpu

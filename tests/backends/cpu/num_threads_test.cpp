// kiln::set_num_threads / num_threads (kiln/threads.h): the count every CPU op's parallel region
// uses, process-wide, with 0 restoring OpenMP's default; and the worker threads those regions run
// on (backends/cpu/thread_pool.h).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/threads.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/parallel.h"

namespace kiln {
namespace {

// How many threads a large parallel loop is split for: it cuts kPiecesPerThread ranges per thread,
// or runs whole on one.
int threads_used() {
  std::atomic<int> ranges{0};
  cpu::parallel_for(1 << 20, 1, [&](std::int64_t, std::int64_t) { ranges.fetch_add(1); });
  return ranges.load() == 1 ? 1 : static_cast<int>(ranges.load() / cpu::kPiecesPerThread);
}

TEST(Threads, TheCountIsProcessWideAndZeroRestoresTheDefault) {
  const int standard = num_threads();
  EXPECT_GE(standard, 1);
  EXPECT_EQ(threads_used(), standard);

  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_EQ(threads_used(), 1);
  int elsewhere = 0;
  std::thread([&] { elsewhere = num_threads(); }).join();
  EXPECT_EQ(elsewhere, 1);  // set once for every thread, unlike omp_set_num_threads
  // The same bits on one thread as on several, exact arithmetic and the vector maths alike
  // (a chunk's tail once went through libm's scalar exp, which rounds some values otherwise).
  const auto x = Tensor<2>::random({512, 512}, Distribution::normal(0, 1), Device::cpu());
  const std::vector<float> one = (x * 2.0 + 1.0).into_data().to_vec<float>();
  const std::vector<float> exp_one = x.exp().into_data().to_vec<float>();
  const std::vector<float> tanh_one = x.tanh().into_data().to_vec<float>();

  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  EXPECT_EQ(threads_used(), 3);
  EXPECT_EQ((x * 2.0 + 1.0).into_data().to_vec<float>(), one);
  EXPECT_EQ(x.exp().into_data().to_vec<float>(), exp_one);
  EXPECT_EQ(x.tanh().into_data().to_vec<float>(), tanh_one);

  set_num_threads(0);
  EXPECT_EQ(num_threads(), standard);
  try {
    set_num_threads(-2);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[set_num_threads]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(num_threads(), standard);
}

// Tasks that each wait until `threads` of them are running at once: they can finish only when the
// region runs on that many threads. False if that does not happen within ten seconds.
bool ran_together(int threads) {
  std::atomic<int> arrived{0};
  std::atomic<bool> together{true};
  cpu::run_tasks(threads, threads, [&](std::int64_t) {
    arrived.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < threads) {
      if (std::chrono::steady_clock::now() > give_up) {
        together = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  return together.load();
}

TEST(ThreadPool, ARegionRunsOnAsManyThreadsAsItAsksFor) {
  EXPECT_TRUE(ran_together(2));
  EXPECT_TRUE(ran_together(4));
  EXPECT_TRUE(ran_together(3));  // fewer than the workers already started
}

TEST(ThreadPool, EveryTaskRunsOnceAndTheFirstErrorIsRethrown) {
  std::vector<std::atomic<int>> runs(1000);
  cpu::run_tasks(4, 1000, [&](std::int64_t i) { runs[static_cast<std::size_t>(i)].fetch_add(1); });
  for (std::size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "task " << i;

  std::atomic<int> started{0};
  EXPECT_THROW(cpu::run_tasks(3, 64,
                              [&](std::int64_t i) {
                                started.fetch_add(1);
                                if (i == 5) throw std::runtime_error("task 5");
                              }),
               std::runtime_error);
  EXPECT_LE(started.load(), 64);
  // The workers are free again afterwards.
  EXPECT_TRUE(ran_together(3));
  std::atomic<std::int64_t> sum{0};
  cpu::run_tasks(3, 100, [&](std::int64_t i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 4950);
}

// Regions of a few tasks back to back: a worker woken for one region often finds it over (the
// caller took every task) and must claim nothing of it, nor run a later region's task under the
// earlier region's count. Every task of every region runs once, with its own region's callable.
TEST(ThreadPool, ShortRegionsBackToBackRunEachTaskOnce) {
  constexpr int kRegions = 20000, kMaxTasks = 5;
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(kRegions * kMaxTasks));
  for (int r = 0; r < kRegions; ++r) {
    const int count = 1 + r % kMaxTasks;
    cpu::run_tasks(2 + r % 3, count, [&, r, count](std::int64_t i) {
      if (i >= count) throw std::logic_error("an index past the region's count");
      runs[static_cast<std::size_t>(r * kMaxTasks + i)].fetch_add(1);
    });
  }
  for (int r = 0; r < kRegions; ++r) {
    for (int i = 0; i < kMaxTasks; ++i) {
      ASSERT_EQ(runs[static_cast<std::size_t>(r * kMaxTasks + i)].load(),
                i < 1 + r % kMaxTasks ? 1 : 0)
          << "region " << r << " task " << i;
    }
  }
}

TEST(ThreadPool, NestedRegionsRunOnTheirTaskThread) {
  std::atomic<std::int64_t> sum{0};
  std::atomic<int> nested_outside{0};
  cpu::run_tasks(2, 4, [&](std::int64_t) {
    if (!cpu::in_parallel_region()) nested_outside.fetch_add(1);
    const auto caller = std::this_thread::get_id();
    cpu::parallel_for(1 << 16, 1, [&](std::int64_t begin, std::int64_t end) {
      if (std::this_thread::get_id() != caller) nested_outside.fetch_add(1);
      sum.fetch_add(end - begin);
    });
  });
  EXPECT_EQ(nested_outside.load(), 0);
  EXPECT_EQ(sum.load(), 4 * (std::int64_t{1} << 16));
  EXPECT_FALSE(cpu::in_parallel_region());
}

TEST(ThreadPool, RegionsFromSeveralThreadsAtOnceAreAllComplete) {
  // One region holds the workers at a time; the others run on their callers.
  constexpr int kCallers = 4, kRounds = 200;
  std::vector<std::int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int r = 0; r < kRounds; ++r) {
        std::atomic<std::int64_t> sum{0};
        cpu::run_tasks(3, 50, [&](std::int64_t i) { sum.fetch_add(i + c); });
        sums[static_cast<std::size_t>(c)] += sum.load();
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(sums[static_cast<std::size_t>(c)], kRounds * (1225 + 50 * c)) << "caller " << c;
  }
}

TEST(ThreadPool, AForkedChildStartsWorkersOfItsOwn) {
  ASSERT_TRUE(ran_together(3));  // the parent's workers exist
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's workers are not in this process: a region must not wait for them.
    const bool ok = ran_together(3);
    std::atomic<std::int64_t> sum{0};
    cpu::run_tasks(2, 10, [&](std::int64_t i) { sum.fetch_add(i); });
    _exit(ok && sum.load() == 45 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace kiln

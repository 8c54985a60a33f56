// Helpers for tests that use kiln from several threads at once: start the threads together, and
// collect what went wrong in each to report it on the test's own thread afterwards.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace kiln::test {

// Runs body(id) for id in [0, count), each on its own thread; the threads wait for one another
// before calling body, so first uses really happen at once. Joins them all.
template <class Body>
void run_together(int count, Body body) {
  std::atomic<int> waiting{count};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  for (int id = 0; id < count; ++id) {
    threads.emplace_back([&waiting, &body, id] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      body(id);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Failures seen on worker threads. Each thread records only under its own id, so no lock is
// needed; expect_none() turns them into test failures once the threads are joined.
class ThreadFailures {
 public:
  explicit ThreadFailures(int threads) : first_(static_cast<std::size_t>(threads)) {}

  // Counts a failure of thread id and keeps the first message of each thread.
  void add(int id, const std::string& what) {
    count_.fetch_add(1);
    std::string& first = first_[static_cast<std::size_t>(id)];
    if (first.empty()) first = "thread " + std::to_string(id) + ": " + what;
  }

  void expect_none() const {
    EXPECT_EQ(count_.load(), 0) << "failures on the worker threads";
    for (const std::string& message : first_) {
      if (!message.empty()) ADD_FAILURE() << message;
    }
  }

 private:
  std::atomic<int> count_{0};
  std::vector<std::string> first_;
};

}  // namespace kiln::test

// Ending a process that used the GPU (src/backends/cuda/shutdown.h) with launches still queued:
// main returns, a worker queued them and main returns, a worker calls exit(), a forked child
// calls exit(). Each child leaves 2001 launches (a fill, then 2000 dependent adds), most of them
// still queued, and is judged by its exit status and output.
//
// On a GPU the children run on the real driver, and under compute-sanitizer when
// `scripts/gpu-check gpu-compute-sanitizer` runs this suite. Everywhere they also run on the fake
// driver (tests/gpu/fake_driver), which costs each launch some microseconds so that the queue is
// long at exit, tears itself down as a driver and a driver-intercepting tool do, aborts on any call
// after that or from a forked child, and reports the launches it was handed: a queued launch lost
// at exit shows as a count short of 2001. Before the exit order each of the four failed on the
// fake driver (the main-thread case at every launch cost tried); the main-thread case is the one
// that died with SIGSEGV under compute-sanitizer on the H200.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

constexpr int kAdds = 2000;
constexpr int kLaunches = kAdds + 1;  // and the fill of zeros

bool child_scenario(const char* name) {
  const char* scenario = std::getenv("KILN_EXIT_CHILD");
  return scenario != nullptr && std::string(scenario) == name;
}

// Kept by a static, so the process ends holding a tensor whose launches may still be queued.
void queue_work(const Device& device) {
  static Tensor<1> kept = test::count_up(Tensor<1>::zeros({1 << 16}, device), kAdds);
}

struct Scenario {
  const char* name;  // KILN_EXIT_CHILD
  const char* test;  // the child test that ends its process this way
};

constexpr Scenario kMain{"main", "GpuDispatchChild.ExitWithQueuedWork"};
constexpr Scenario kWorker{"worker", "GpuExitChild.WorkerQueuedThenMainReturns"};
constexpr Scenario kExitFromWorker{"exit_from_worker", "GpuExitChild.WorkerCallsExit"};
constexpr Scenario kFork{"fork", "GpuExitChild.ForkedChildCallsExit"};

// Runs a scenario's child on the fake driver with `microseconds` a launch; expects a clean exit
// and every launch handed to the driver.
void expect_clean_exit_on_fake_driver(const Scenario& scenario, int microseconds,
                                      const std::filesystem::path& directory) {
  const std::string where =
      std::string(scenario.name) + ", " + std::to_string(microseconds) + " us a launch";
  const auto report = directory / (std::string(scenario.name) + std::to_string(microseconds));
  const char* library_path = std::getenv("LD_LIBRARY_PATH");
  const auto child = test::run_child(
      scenario.test,
      {std::string("KILN_EXIT_CHILD=") + scenario.name,
       "LD_LIBRARY_PATH=" + std::string(KILN_FAKE_CUDA_DIR) +
           (library_path != nullptr ? std::string(":") + library_path : std::string()),
       "KILN_FAKE_CUDA_LAUNCH_US=" + std::to_string(microseconds),
       "KILN_FAKE_CUDA_REPORT=" + report.string(),
       // Kernels compiled for the fake GPU (sm_90) stay apart from the user's cache.
       "XDG_CACHE_HOME=" + (directory / "cache").string(),
       // No leak check at these exits (sanitizer build): each child ends on purpose with a
       // static tensor and the driver's queue alive, and LeakSanitizer's exit-time scan of their
       // threads' storage crashed in its own tracer in two of them (without that scan it reports
       // glibc's thread-specific data instead). The children judge exits and launch counts;
       // the rest of the suite checks leaks. (LSAN_OPTIONS takes ASan's common flags too.)
       "LSAN_OPTIONS=detect_leaks=0"});
  EXPECT_EQ(child.status, 0) << where << ":\n" << child.output;
  EXPECT_EQ(child.output.find("[fake cuda]"), std::string::npos) << where << ":\n" << child.output;
  EXPECT_EQ(child.output.find("no CUDA device"), std::string::npos)
      << where << ": the child did not load the fake driver:\n"
      << child.output;
  std::ifstream in(report);
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "launches " + std::to_string(kLaunches) + "\n") << where;
}

// Each scenario at no launch cost, a small one, and one past the time the rest of exit takes.
void expect_clean_exits_on_fake_driver(const Scenario& scenario) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("kiln-exit-" + std::to_string(getpid()) + "-" + scenario.name);
  std::filesystem::create_directories(directory);
  for (const int microseconds : {0, 20, 200}) {
    expect_clean_exit_on_fake_driver(scenario, microseconds, directory);
  }
  std::filesystem::remove_all(directory);
}

void expect_clean_exit_on_gpu(const Scenario& scenario) {
  const auto child =
      test::run_child(scenario.test, {std::string("KILN_EXIT_CHILD=") + scenario.name});
  EXPECT_EQ(child.status, 0) << scenario.name << ":\n" << child.output;
}

}  // namespace

// ---- the children ----

TEST(GpuDispatchChild, ExitWithQueuedWork) {
  if (!child_scenario(kMain.name)) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  queue_work(device);  // and main returns
}

TEST(GpuExitChild, WorkerQueuedThenMainReturns) {
  if (!child_scenario(kWorker.name)) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  std::thread([&] { queue_work(device); }).join();
}

TEST(GpuExitChild, WorkerCallsExit) {
  if (!child_scenario(kExitFromWorker.name)) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  std::thread worker([&] {
    queue_work(device);
    std::exit(0);
  });
  worker.join();  // never returns: the worker ends the process
}

TEST(GpuExitChild, ForkedChildCallsExit) {
  if (!child_scenario(kFork.name)) GTEST_SKIP() << "runs only as a child process";
  KILN_REQUIRE_GPU();
  queue_work(device);
  int status = 0;  // the launcher thread is not in the forked child
  EXPECT_TRUE(kiln::test::forked_child_exits_cleanly(status)) << "wait status " << status;
}

// ---- on the GPU ----

TEST(GpuDispatch, ExitingWithQueuedLaunchesIsClean) {
  KILN_REQUIRE_GPU();
  expect_clean_exit_on_gpu(kMain);
}

TEST(GpuExit, WorkerQueuedThenMainReturnedIsClean) {
  KILN_REQUIRE_GPU();
  expect_clean_exit_on_gpu(kWorker);
}

TEST(GpuExit, ExitFromAWorkerWithQueuedLaunchesIsClean) {
  KILN_REQUIRE_GPU();
  expect_clean_exit_on_gpu(kExitFromWorker);
}

// ---- on the fake driver (no GPU needed) ----

TEST(GpuExitOnFakeDriver, MainReturns) { expect_clean_exits_on_fake_driver(kMain); }

TEST(GpuExitOnFakeDriver, WorkerQueuedThenMainReturns) {
  expect_clean_exits_on_fake_driver(kWorker);
}

TEST(GpuExitOnFakeDriver, WorkerCallsExit) { expect_clean_exits_on_fake_driver(kExitFromWorker); }

TEST(GpuExitOnFakeDriver, ForkedChildCallsExit) { expect_clean_exits_on_fake_driver(kFork); }

// The launcher thread (src/backends/cuda/dispatcher.h) and the plugin's exit order (shutdown.h)
// on the fake driver (fake_cuda.cpp), linked in directly: no GPU needed, and small enough to run
// many times under ThreadSanitizer and AddressSanitizer (scripts/fake-driver-check).
#include "backends/cuda/dispatcher.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "fake_driver/fake_cuda_control.h"
#include "kiln/error.h"

namespace {

using kiln::cuda::Dispatcher;
namespace fake = kiln::fake_cuda;

// The fake GPU's primary context (current on the calling thread), a stream and a kernel.
struct FakeGpu {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
};

// The start of a cubin: the fake driver checks the ELF magic only.
constexpr unsigned char kCubin[16] = {0x7f, 'E', 'L', 'F'};

const FakeGpu& gpu() {
  static const FakeGpu made = [] {
    FakeGpu g;
    CUdevice device = 0;
    const bool ready = cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
                       cuDevicePrimaryCtxRetain(&g.context, device) == CUDA_SUCCESS &&
                       cuCtxSetCurrent(g.context) == CUDA_SUCCESS &&
                       cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                       cuModuleLoadData(&g.module, kCubin) == CUDA_SUCCESS &&
                       cuModuleGetFunction(&g.kernel, g.module, "kernel") == CUDA_SUCCESS;
    if (!ready) std::abort();
    return g;
  }();
  return made;
}

// Queues a launch whose parameter block is the single word `word`.
void submit(Dispatcher& dispatcher, std::uint64_t word, const char* op = "count",
            unsigned blocks = 1) {
  dispatcher.submit(op, gpu().kernel, blocks, 32, 0, &word, sizeof word);
}

// Restores a launch cost of zero when a test ends.
struct LaunchCost {
  explicit LaunchCost(int microseconds) { fake::set_launch_microseconds(microseconds); }
  ~LaunchCost() { fake::set_launch_microseconds(0); }
  LaunchCost(const LaunchCost&) = delete;
  LaunchCost& operator=(const LaunchCost&) = delete;
};

}  // namespace

// A simulated capture of launches with footprints (KILN_GRAPH_BRANCHES=1, launch_footprint.h):
// which launches the dispatcher makes siblings, and what each comes after.
TEST(FakeDriverDispatch, CapturedLaunchesThatTouchDisjointMemoryBecomeSiblings) {
  setenv("KILN_GRAPH_BRANCHES", "1", 1);  // before the dispatcher first reads it
  ASSERT_TRUE(Dispatcher::branches());
  fake::simulate_captures(true);
  struct Simulation {
    ~Simulation() { fake::simulate_captures(false); }
  } simulation;
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  auto touching = [](std::uint64_t read, std::uint64_t write) {
    kiln::cuda::LaunchFootprint f;
    f.add(read, 64, false);
    f.add(write, 64, true);
    return f;
  };
  auto launch = [&](std::uint64_t word, const kiln::cuda::LaunchFootprint* footprint) {
    dispatcher.submit("op", gpu().kernel, 1, 32, 0, &word, sizeof word, footprint);
  };
  const CUstream stream = gpu().stream;
  for (int capture = 0; capture < 2; ++capture) {
    ASSERT_EQ(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    const auto a = touching(0x5000, 0x1000), b = touching(0x5000, 0x2000);
    const auto c = touching(0x6000, 0x3000), d = touching(0x1000 + 32, 0x4000);
    const auto f = touching(0x7000, 0x8000), g = touching(0x7000, 0x9000);
    launch(0, &a);       // a group of one
    launch(1, &b);       // reads what a reads, writes elsewhere: beside a
    launch(2, &c);       // beside both
    launch(3, &d);       // reads what a wrote: after the three
    launch(4, nullptr);  // no footprint: after d
    launch(5, &f);       // a new group after 4 (the stream no longer ends at d)
    launch(6, &g);       // beside 5
    launch(7, nullptr);  // after 5 and 6
    dispatcher.drain();
    CUgraph graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
    const std::vector<fake::CapturedNode> nodes = fake::captured_nodes();
    ASSERT_EQ(nodes.size(), 8u) << "capture " << capture;
    const std::vector<std::vector<std::size_t>> after = {{},  {},  {},  {0, 1, 2},
                                                         {3}, {4}, {4}, {5, 6}};
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_EQ(nodes[i].first_word, i) << "capture " << capture;
      std::vector<std::size_t> got = nodes[i].after;
      std::sort(got.begin(), got.end());
      // (The second capture's node handles are the first's again: the group must not carry over.)
      EXPECT_EQ(got, after[i]) << "capture " << capture << ", node " << i;
    }
  }
  // Outside a capture a footprint changes nothing: the launch is made.
  fake::record_launches();
  const auto a = touching(0x5000, 0x1000);
  launch(9, &a);
  dispatcher.drain();
  ASSERT_EQ(fake::launch_log().size(), 1u);
  EXPECT_EQ(fake::launch_log()[0].first_word, 9u);
}

// Which launches start early (programmatic dependent launch, dispatcher.h's LaunchOrder): an
// Overlapping one after any overlapping launch, a weight reader only after another weight reader,
// none after other work on the stream, and none where the device cannot.
TEST(FakeDriverDispatch, OverlappingLaunchesStartEarlyOnlyAfterTheLaunchesTheyMayFollow) {
  using kiln::cuda::LaunchOrder;
  for (const bool device_can : {true, false}) {
    Dispatcher dispatcher(gpu().context, gpu().stream, 0, device_can);
    fake::record_launches();
    auto submit_as = [&](std::uint64_t word, LaunchOrder order) {
      dispatcher.submit("order", gpu().kernel, 1, 32, 0, &word, sizeof word, nullptr, order);
    };
    submit_as(0, LaunchOrder::After);
    submit_as(1, LaunchOrder::Overlapping);              // after an After launch: waits
    submit_as(2, LaunchOrder::Overlapping);              // early
    submit_as(3, LaunchOrder::OverlappingWeightReader);  // after a kernel that may write a weight
    submit_as(4, LaunchOrder::OverlappingWeightReader);  // early
    submit_as(5, LaunchOrder::Overlapping);              // early: it reads nothing before its wait
    dispatcher.drain();
    dispatcher.note_other_work();  // a copy, say
    submit_as(6, LaunchOrder::Overlapping);
    submit_as(7, LaunchOrder::After);
    submit_as(8, LaunchOrder::OverlappingWeightReader);
    submit_as(9, LaunchOrder::OverlappingWeightReader);
    dispatcher.drain();
    const std::vector<bool> early = {false, false, true,  false, true,
                                     true,  false, false, false, true};
    const auto log = fake::launch_log();
    ASSERT_EQ(log.size(), early.size());
    for (std::size_t i = 0; i < log.size(); ++i) {
      EXPECT_EQ(log[i].first_word, i);
      EXPECT_EQ(log[i].programmatic, device_can && early[i]) << "launch " << i;
    }
    dispatcher.stop();
  }
}

TEST(FakeDriverDispatch, StopHandsEveryQueuedLaunchToTheDriverInOrder) {
  const LaunchCost cost(20);
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  fake::record_launches();
  constexpr std::uint64_t kLaunches = 3000;  // past the ring's 1024 slots: ~60 ms of launching
  for (std::uint64_t i = 0; i < kLaunches; ++i) submit(dispatcher, i);
  const std::size_t made_before_stop = fake::launch_log().size();
  ASSERT_LT(made_before_stop, kLaunches) << "nothing was left queued for stop";
  dispatcher.stop();
  auto log = fake::launch_log();
  ASSERT_EQ(log.size(), kLaunches) << "stop returned before every queued launch was made";
  for (std::uint64_t i = 0; i < kLaunches; ++i) {
    ASSERT_EQ(log[i].first_word, i) << "launch " << i << " out of order";
  }
  // The launcher made what was queued: a thread that stops it (exit, shutdown.h) calls no driver.
  for (std::size_t i = made_before_stop; i < log.size(); ++i) {
    ASSERT_NE(log[i].thread, std::this_thread::get_id()) << "launch " << i;
  }
  // From now on a launch is made at once, on the calling thread.
  submit(dispatcher, kLaunches);
  log = fake::launch_log();
  ASSERT_EQ(log.size(), kLaunches + 1);
  EXPECT_EQ(log.back().first_word, kLaunches);
  EXPECT_EQ(log.back().thread, std::this_thread::get_id());
  dispatcher.stop();  // again: nothing to do
  EXPECT_EQ(fake::launch_log().size(), kLaunches + 1);
}

TEST(FakeDriverDispatch, LaunchesDuringStopKeepEachThreadsOrder) {
  const LaunchCost cost(5);
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  fake::record_launches();
  constexpr std::uint64_t kThreads = 4, kEach = 2000;
  std::atomic<std::uint64_t> started{0};
  std::vector<std::thread> producers;
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      started.fetch_add(1);
      for (std::uint64_t i = 0; i < kEach; ++i) submit(dispatcher, t << 32 | i);
    });
  }
  while (started.load() < kThreads) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  dispatcher.stop();  // while the producers still submit: they switch to launching themselves
  for (auto& producer : producers) producer.join();
  const auto log = fake::launch_log();
  ASSERT_EQ(log.size(), kThreads * kEach);
  std::vector<std::uint64_t> next(kThreads, 0);
  for (const auto& launch : log) {
    const std::uint64_t t = launch.first_word >> 32, i = launch.first_word & 0xffffffffu;
    ASSERT_LT(t, kThreads);
    ASSERT_EQ(i, next[t]) << "thread " << t << "'s launches reached the stream out of order";
    ++next[t];
  }
}

TEST(FakeDriverDispatch, AThreadThatEndsWaitsUntilItsLaunchesAreWithTheDriver) {
  const LaunchCost cost(100);
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  const std::int64_t before = fake::launch_count();
  // 500 launches take the launcher ~50 ms; queuing them takes the worker far less.
  std::thread([&] {
    for (std::uint64_t i = 0; i < 500; ++i) submit(dispatcher, i);
  }).join();
  EXPECT_EQ(fake::launch_count() - before, 500);
}

TEST(FakeDriverDispatch, RefusedLaunchesAreThrownNamingTheOpBeforeAndAfterStop) {
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  submit(dispatcher, 0, "empty_grid", /*blocks=*/0);  // the driver refuses an empty grid
  dispatcher.drain();
  try {
    dispatcher.throw_refused("read");
    ADD_FAILURE() << "the refused launch was not reported";
  } catch (const kiln::ExecutionError& e) {
    EXPECT_NE(std::string(e.what()).find("[read] the launch of empty_grid on cuda:0 was refused"),
              std::string::npos)
        << e.what();
  }
  dispatcher.throw_refused("read");  // reported once
  dispatcher.stop();
  try {
    submit(dispatcher, 0, "empty_after_stop", 0);  // made at once, so refused at once
    ADD_FAILURE() << "the refused launch was not reported";
  } catch (const kiln::ExecutionError& e) {
    EXPECT_NE(std::string(e.what()).find("empty_after_stop"), std::string::npos) << e.what();
  }
}

TEST(FakeDriverDispatch, StopInAForkedChildReturnsAtOnce) {
  const LaunchCost cost(200);
  Dispatcher dispatcher(gpu().context, gpu().stream, 0);
  const std::int64_t before = fake::launch_count();
  for (std::uint64_t i = 0; i < 1000; ++i) submit(dispatcher, i);  // ~0.2 s of launching
  const pid_t pid = fork();
  if (pid == 0) {
    // The launcher thread was not copied, and the parent's queue is the parent's: stop makes no
    // driver call here (the fake driver aborts on any in a forked child).
    alarm(20);
    dispatcher.stop();
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the forked child's stop failed (status " << status << ")";
  dispatcher.stop();  // the parent's launcher still hands over all of its queue
  EXPECT_EQ(fake::launch_count() - before, 1000);
}

// ---- ending a process with launches queued ----
// Each child queues kQueued slow launches on a dispatcher that is never destroyed (as the
// plugin's are) and ends its process one way; the fake driver aborts on a call after its
// teardown or a launch in progress during it, and reports the launches it was handed.

namespace {

constexpr int kQueued = 2000;

bool child_scenario(const char* name) {
  const char* scenario = std::getenv("KILN_FAKE_EXIT_CHILD");
  return scenario != nullptr && std::string(scenario) == name;
}

Dispatcher& leaked_dispatcher() {
  static Dispatcher& dispatcher = *new Dispatcher(gpu().context, gpu().stream, 0);
  return dispatcher;
}

void queue_launches() {
  for (int i = 0; i < kQueued; ++i) submit(leaked_dispatcher(), static_cast<std::uint64_t>(i));
}

}  // namespace

TEST(FakeDriverExitChild, MainReturns) {
  if (!child_scenario("main")) GTEST_SKIP() << "runs only as a child process";
  queue_launches();
}

TEST(FakeDriverExitChild, WorkerQueuedThenMainReturns) {
  if (!child_scenario("worker")) GTEST_SKIP() << "runs only as a child process";
  std::thread(queue_launches).join();
}

TEST(FakeDriverExitChild, WorkerCallsExit) {
  if (!child_scenario("exit_from_worker")) GTEST_SKIP() << "runs only as a child process";
  std::thread worker([] {
    queue_launches();
    std::exit(0);
  });
  worker.join();  // never returns: the worker ends the process
}

TEST(FakeDriverExitChild, ForkedChildCallsExit) {
  if (!child_scenario("fork")) GTEST_SKIP() << "runs only as a child process";
  queue_launches();
  int status = 0;  // the launcher thread is not in the forked child
  EXPECT_TRUE(kiln::test::forked_child_exits_cleanly(status)) << "wait status " << status;
}

TEST(FakeDriverExit, QueuedLaunchesReachTheDriverBeforeAnyTeardown) {
  const auto directory =
      std::filesystem::temp_directory_path() / ("kiln-fake-exit-" + std::to_string(getpid()));
  std::filesystem::create_directories(directory);
  const struct {
    const char* scenario;
    const char* test;
  } kCases[] = {{"main", "MainReturns"},
                {"worker", "WorkerQueuedThenMainReturns"},
                {"exit_from_worker", "WorkerCallsExit"},
                {"fork", "ForkedChildCallsExit"}};
  for (const auto& c : kCases) {
    for (const char* microseconds : {"0", "20", "200"}) {
      const auto report = directory / (std::string(c.scenario) + "-" + microseconds);
      const auto child =
          kiln::test::run_child(std::string("FakeDriverExitChild.") + c.test,
                                {std::string("KILN_FAKE_EXIT_CHILD=") + c.scenario,
                                 std::string("KILN_FAKE_CUDA_LAUNCH_US=") + microseconds,
                                 "KILN_FAKE_CUDA_REPORT=" + report.string()});
      const std::string where = std::string(c.scenario) + ", " + microseconds + " us a launch";
      EXPECT_EQ(child.status, 0) << where << ":\n" << child.output;
      EXPECT_EQ(child.output.find("[fake cuda]"), std::string::npos) << where << ":\n"
                                                                     << child.output;
      std::ifstream in(report);
      std::ostringstream text;
      text << in.rdbuf();
      EXPECT_EQ(text.str(), "launches " + std::to_string(kQueued) + "\n") << where;
    }
  }
  std::filesystem::remove_all(directory);
}

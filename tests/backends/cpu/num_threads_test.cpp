// kiln::set_num_threads / num_threads (kiln/threads.h): the count every CPU op's parallel region
// uses, process-wide, with 0 restoring OpenMP's default.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/threads.h>

#include <atomic>
#include <thread>

#include "backends/cpu/parallel.h"

namespace kiln {
namespace {

// How many ranges a large parallel loop is split into: one per thread it ran on.
int threads_used() {
  std::atomic<int> ranges{0};
  cpu::parallel_for(1 << 20, 1, [&](std::int64_t, std::int64_t) { ranges.fetch_add(1); });
  return ranges.load();
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

}  // namespace
}  // namespace kiln

// The launcher thread (src/backends/cuda/dispatcher.h): launches reach the stream in program
// order past a full ring, around reads, library calls and copies, and from several threads at
// once; an op's deferred error still names it.
#include <thread>
#include <vector>

#include "gpu/gpu_test_support.h"

using namespace kiln;

using test::count_up;

namespace {

std::vector<double> as_f64(const Tensor<1>& t) { return t.into_data().to_f64_vec(); }

}  // namespace

TEST(GpuDispatch, LongChainsPastAFullRingStayInOrder) {
  KILN_REQUIRE_GPU();
  // 3000 dependent launches: the ring (1024 slots) fills and the caller launches the oldest.
  const auto start =
      Tensor<1>::from_data(TensorData::from_vec(std::vector<float>{0, 10, -5}), device);
  const auto got = as_f64(count_up(start, 3000));
  EXPECT_EQ(got, (std::vector<double>{3000, 3010, 2995}));
}

TEST(GpuDispatch, ReadsCopiesAndLibraryCallsSeeEveryEarlierLaunch) {
  KILN_REQUIRE_GPU();
  const std::int64_t n = 64;
  const Primitive host = test::host_random(Shape{n, n}, DType::F32, 11, -1, 1);
  const auto a = Tensor<2>::wrap(host).to_device(device);
  for (int round = 0; round < 20; ++round) {
    // Queued elementwise work, then a cuBLASLt matmul and a CUB sort on its result, a copy to
    // the host, and an async read: each must come after the launches before it.
    const auto shifted = a + static_cast<double>(round);
    const auto product = shifted.matmul(Tensor<2>::eye(n, device));
    const auto sorted = product.flatten<1>(0, 1).sort(0);
    const auto on_host = shifted.to_device(Device::cpu()).into_data().to_f64_vec();
    const auto product_values = product.into_data_async().get().to_f64_vec();
    const auto sorted_values = sorted.into_data().to_f64_vec();
    const auto base = detail::into_data(host).to_f64_vec();
    std::vector<double> want(base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
      want[i] = static_cast<double>(static_cast<float>(base[i] + round));
    }
    ASSERT_EQ(on_host, want) << "round " << round;
    ASSERT_EQ(product_values, want) << "round " << round;
    std::sort(want.begin(), want.end());
    ASSERT_EQ(sorted_values, want) << "round " << round;
  }
}

TEST(GpuDispatch, ThreadsLaunchingAtOnceEachSeeTheirOwnOrder) {
  KILN_REQUIRE_GPU();
  constexpr int kThreads = 4;
  std::vector<std::vector<double>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto start = Tensor<1>::full({5}, 100.0 * t, device);
      results[t] = as_f64(count_up(start, 1500 + 100 * t));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(results[t], std::vector<double>(5, 100.0 * t + 1500 + 100 * t)) << "thread " << t;
  }
}

TEST(GpuDispatch, DeferredErrorsStillNameTheOp) {
  KILN_REQUIRE_GPU();
  const auto a =
      Tensor<1, Int>::from_data(TensorData::from_vec(std::vector<std::int64_t>{4, 5}), device);
  const auto zero = Tensor<1, Int>::zeros({2}, device);
  const auto queued = count_up(Tensor<1>::zeros({2}, device), 50);  // launches before the fault
  const auto bad = a / zero;
  try {
    (void)bad.into_data();
    FAIL() << "integer division by zero was not reported";
  } catch (const ExecutionError& error) {
    EXPECT_NE(std::string(error.what()).find("div"), std::string::npos) << error.what();
  }
  // The device keeps working, and the work queued before the fault was done.
  EXPECT_EQ(as_f64(queued), (std::vector<double>{50, 50}));
  EXPECT_EQ(as_f64(count_up(Tensor<1>::zeros({1}, device), 3)), (std::vector<double>{3}));
}

// Ending a process with launches queued: backend_exit_test.cpp.

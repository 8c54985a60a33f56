// The collectives of cuda tensors over NCCL (src/backends/cuda/nccl_transport.h). A group of one
// rank on cuda:0 runs on any GPU machine with NCCL: the loader, the setup's exchanges and every
// collective with one rank. With two GPUs, two ranks of this process
// (ProcessGroup::threads({cuda:0, cuda:1})): every collective and dtype against float64
// references made on the host, also through the fusion and autodiff decorators and on 4M
// elements; send and recv; mismatched calls and ranks on a GPU and the CPU as DistributedError,
// never a hang; data-parallel training equal to one process on the global batch; and a call
// stalled past the group's timeout, aborted (in a child process). Two ranks on one GPU, and
// KILN_NCCL=0 (a child), take the host path. Every test skips without a GPU or NCCL, the
// multi-GPU ones with fewer than two GPUs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/data_parallel_checks.h"
#include "gpu/child_process.h"
#include "gpu/gpu_test_support.h"
#include "support/error_message.h"
#include "support/ranks.h"

namespace gpu_nccl {

using namespace kiln;
using namespace std::chrono_literals;
using distributed::detail::all_gather;
using distributed::detail::all_reduce;
using distributed::detail::broadcast;
using distributed::detail::reduce_scatter;

// Why a test of `ranks` ranks on `gpus` GPUs cannot run here (fewer GPUs, no NCCL, or several
// ranks in a kiln built without Gloo), or empty.
std::string missing(int gpus, int ranks) {
  if (ranks > 1 && !distributed::available()) {
    return "kiln was built without Gloo: no group of " + std::to_string(ranks) + " ranks";
  }
  std::string reason;
  const int count = cuda_device_count(&reason);
  if (count == 0) return "no CUDA device: " + reason;
  if (count < gpus) {
    return "this test needs " + std::to_string(gpus) + " GPUs, found " + std::to_string(count);
  }
  bool loaded = false;
  const std::string status = cuda_plugin(nullptr)->nccl_status(&loaded);
  return loaded ? "" : "no NCCL: " + status;
}

#define KILN_NCCL_REQUIRE(gpus, ranks)                                                          \
  if (const std::string kiln_missing = ::gpu_nccl::missing(gpus, ranks); !kiln_missing.empty()) \
  GTEST_SKIP() << kiln_missing

Kind kind_of(DType dtype) {
  if (is_float(dtype)) return Kind::Float;
  return dtype == DType::Bool ? Kind::Bool : Kind::Int;
}

// Rank r's value at position i: small integers (in [-5, 5], [0, 10] unsigned, 0 or 1 for bool),
// a quarter of them for floats, so every sum, mean, max and min over two ranks is exact in every
// dtype.
double value(DType dtype, int rank, std::int64_t i) {
  const std::int64_t k = (i * 7 + rank * 3 + static_cast<std::int64_t>(dtype)) % 11;
  if (dtype == DType::Bool) return static_cast<double>(k % 2);
  if (is_unsigned_int(dtype)) return static_cast<double>(k);
  return is_float(dtype) ? 0.25 * static_cast<double>(k - 5) : static_cast<double>(k - 5);
}

std::vector<double> values(DType dtype, int rank, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = value(dtype, rank, i);
  return out;
}

// Rank r's input [rows, 3] on device; f32 as a transposed view (the collective makes it
// contiguous first).
Primitive input(DType dtype, int rank, std::int64_t rows, const Device& device) {
  const std::vector<double> v = values(dtype, rank, rows * 3);
  if (dtype != DType::F32) {
    return detail::from_data(TensorData::from_vec(v, Shape{rows, 3}).convert(dtype), device,
                             kind_of(dtype), 2);
  }
  std::vector<double> columns(v.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < 3; ++c) {
      columns[static_cast<std::size_t>(c * rows + r)] = v[static_cast<std::size_t>(r * 3 + c)];
    }
  }
  const Primitive stored = detail::from_data(
      TensorData::from_vec(columns, Shape{3, rows}).convert(dtype), device, Kind::Float, 2);
  return detail::permute(stored, {1, 0});
}

// Every rank's values combined by operation, as the collective computes them (an integer mean
// rounded down).
std::vector<double> reduced(DType dtype, int size, std::int64_t n, ReduceOperation operation) {
  std::vector<double> out = values(dtype, 0, n);
  for (int r = 1; r < size; ++r) {
    const std::vector<double> v = values(dtype, r, n);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (operation == ReduceOperation::Max) {
        out[i] = std::max(out[i], v[i]);
      } else if (operation == ReduceOperation::Min) {
        out[i] = std::min(out[i], v[i]);
      } else {
        out[i] += v[i];
      }
    }
  }
  if (operation == ReduceOperation::Mean) {
    for (double& x : out) x = is_float(dtype) ? x / size : std::floor(x / size);
  }
  return out;
}

// got holds exactly want, of shape and dtype, on device.
void expect_values(const Primitive& got, const Shape& shape, DType dtype, const Device& device,
                   const std::vector<double>& want, const std::string& what) {
  EXPECT_EQ(got->device().without_autodiff().without_fusion(),
            device.without_autodiff().without_fusion())
      << what;
  const TensorData data = detail::into_data(got);
  ASSERT_EQ(data.shape(), shape) << what;
  ASSERT_EQ(data.dtype(), dtype) << what;
  const std::vector<double> v = data.to_f64_vec();
  ASSERT_EQ(v.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != want[i] && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected " << want[i];
    }
  }
}

constexpr DType kDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                             DType::I64, DType::I32, DType::I16, DType::I8,
                             DType::U8,  DType::U32, DType::U16, DType::Bool};

// Every collective and dtype on this rank of group (every rank calls it), compared exactly with
// the host's float64 results; i16 and u16 reduce on the host path, the others over NCCL.
void check_every_collective(const ProcessGroup& group) {
  const Device device = group.device();
  const int size = group.size();
  const int rank = group.rank();
  const std::int64_t rows = 2 * size;
  const Shape shape{rows, 3};
  for (DType dtype : kDTypes) {
    const std::string on = std::string(" of ") + std::string(dtype_name(dtype)) + " on rank " +
                           std::to_string(rank) + " (" + device.to_string() + ")";
    const Primitive x = input(dtype, rank, rows, device);
    if (dtype != DType::Bool) {
      for (ReduceOperation operation : {ReduceOperation::Sum, ReduceOperation::Mean,
                                        ReduceOperation::Max, ReduceOperation::Min}) {
        const std::string name = "(" + std::to_string(static_cast<int>(operation)) + ")" + on;
        const std::vector<double> all = reduced(dtype, size, rows * 3, operation);
        expect_values(all_reduce(x, group, operation), shape, dtype, device, all,
                      "all_reduce" + name);
        const auto chunk = all.begin() + rank * 6;
        expect_values(reduce_scatter(x, group, operation), Shape{2, 3}, dtype, device,
                      std::vector<double>(chunk, chunk + 6), "reduce_scatter" + name);
      }
    }
    const int root = size - 1;
    expect_values(broadcast(x, group, root), shape, dtype, device, values(dtype, root, rows * 3),
                  "broadcast" + on);
    std::vector<double> gathered;
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = values(dtype, r, rows * 3);
      gathered.insert(gathered.end(), v.begin(), v.end());
    }
    expect_values(all_gather(x, group), Shape{rows * size, 3}, dtype, device, gathered,
                  "all_gather" + on);
    // Ranks 0 and 1 swap their tensors, one direction after the other.
    if (size >= 2 && rank < 2) {
      const int peer = 1 - rank;
      for (int turn = 0; turn < 2; ++turn) {
        if (turn == rank) {
          distributed::detail::send(x, group, peer);
        } else {
          expect_values(distributed::detail::recv(shape, 2, kind_of(dtype), group, peer, dtype,
                                                  device.without_autodiff()),
                        shape, dtype, device, values(dtype, peer, rows * 3), "recv" + on);
        }
      }
    }
  }
}

// 4M f32 elements (16 MiB) summed: NCCL's larger pieces and all of its channels.
void check_large(const ProcessGroup& group) {
  const std::int64_t n = std::int64_t{1} << 22;
  const auto x = Tensor<1>::full({n}, group.rank() + 1.0, group.device().without_autodiff());
  const double want = group.size() * (group.size() + 1) / 2.0;
  const std::vector<float> sum = distributed::all_reduce(x, group).into_data().to_vec<float>();
  ASSERT_EQ(sum.size(), static_cast<std::size_t>(n));
  std::size_t wrong = 0;
  for (float v : sum) wrong += v != want;
  EXPECT_EQ(wrong, 0u) << "of " << n << " sums on rank " << group.rank();
}

std::vector<ProcessGroup> two_gpu_ranks(std::chrono::milliseconds timeout, bool decorated = false) {
  std::vector<Device> devices{Device::cuda(0), Device::cuda(1)};
  if (decorated) {
    for (Device& d : devices) d = d.fused().autodiff();
  }
  return ProcessGroup::threads(devices, DistributedOptions{.timeout = timeout});
}

TEST(GpuNccl, OneRankGroupRunsEveryCollectiveOverNccl) {
  KILN_NCCL_REQUIRE(1, 1);
  const ProcessGroup group = ProcessGroup::single(Device::cuda(0));
  EXPECT_EQ(group.backend_name(), "nccl");
  check_every_collective(group);
  check_large(group);
  EXPECT_EQ(group.backend_name(), "nccl");
  // Empty tensors move nothing, and still agree.
  const auto empty = Tensor<2>::zeros({0, 3}, Device::cuda(0));
  EXPECT_EQ(distributed::all_reduce(empty, group).shape(), (Shape{0, 3}));
  EXPECT_EQ(distributed::all_gather(empty, group).shape(), (Shape{0, 3}));
}

TEST(GpuNccl, EveryCollectiveAndDTypeOnTwoGpus) {
  KILN_NCCL_REQUIRE(2, 2);
  const std::vector<ProcessGroup> groups = two_gpu_ranks(60s);
  test::expect_no_errors(test::on_ranks(groups, [](const ProcessGroup& group) {
    check_every_collective(group);
    check_large(group);
    EXPECT_EQ(group.backend_name(), "nccl");
  }));
}

TEST(GpuNccl, EveryCollectiveAndDTypeOnTwoGpusThroughFusionAndAutodiff) {
  KILN_NCCL_REQUIRE(2, 2);
  const std::vector<ProcessGroup> groups = two_gpu_ranks(60s, true);
  test::expect_no_errors(
      test::on_ranks(groups, [](const ProcessGroup& group) { check_every_collective(group); }));
}

TEST(GpuNccl, MismatchedCallsAreADistributedErrorNotAHang) {
  KILN_NCCL_REQUIRE(2, 2);
  const std::vector<ProcessGroup> groups = two_gpu_ranks(20s);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = test::on_ranks(groups, [](const ProcessGroup& group) {
    const Device device = group.device();
    // The first call sets NCCL up and agrees; the second does not.
    distributed::all_reduce(Tensor<1>::ones({4}, device), group).into_data();
    distributed::all_reduce(Tensor<1>::ones({4 + group.rank()}, device), group);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 15s) << "a mismatch waits for no timeout";
  test::expect_rank_errors<DistributedError>(
      errors, {"[all_reduce] the ranks called different collectives",
               "all_reduce(sum) f32 [4] over nccl", "all_reduce(sum) f32 [5] over nccl"});
  for (const ProcessGroup& group : groups) {
    EXPECT_NE(test::message_of<DistributedError>([&] {
                distributed::all_reduce(Tensor<1>::ones({4}, group.device()), group);
              }).find("the process group is broken since"),
              std::string::npos);
  }
}

TEST(GpuNccl, ARankOnTheCpuAgainstRanksOverNcclIsADistributedError) {
  KILN_NCCL_REQUIRE(2, 2);
  const std::vector<ProcessGroup> groups = two_gpu_ranks(20s);
  const auto errors = test::on_ranks(groups, [](const ProcessGroup& group) {
    distributed::all_reduce(Tensor<1>::ones({4}, group.device()), group).into_data();
    const Device device = group.rank() == 1 ? Device::cpu() : group.device();
    distributed::all_reduce(Tensor<1>::ones({4}, device), group);
  });
  test::expect_rank_errors<DistributedError>(
      errors, {"all_reduce(sum) f32 [4] over nccl; rank 1: ", "all_reduce(sum) f32 [4]"});
}

TEST(GpuNccl, ARankOnTheCpuAtTheSetUpIsADistributedError) {
  KILN_NCCL_REQUIRE(1, 2);
  const std::vector<ProcessGroup> groups =
      ProcessGroup::threads({Device::cuda(0), Device::cpu()}, DistributedOptions{.timeout = 20s});
  const auto errors = test::on_ranks(groups, [](const ProcessGroup& group) {
    distributed::all_reduce(Tensor<1>::ones({4}, group.device()), group);
  });
  // Rank 0 tells the others about its NCCL first; rank 1 sums on the host.
  test::expect_rank_errors<DistributedError>(
      errors, {"rank 0: #0 all_gather u8 [24]; rank 1: #0 all_reduce(sum) f32 [4]"});
}

TEST(GpuNccl, TwoRanksOnOneGpuTakeTheHostPath) {
  KILN_NCCL_REQUIRE(1, 2);
  const std::vector<ProcessGroup> groups =
      ProcessGroup::threads(2, Device::cuda(0), DistributedOptions{.timeout = 30s});
  test::expect_no_errors(test::on_ranks(groups, [](const ProcessGroup& group) {
    const auto x = Tensor<1>::full({4}, group.rank() + 1.0, group.device());
    EXPECT_EQ(distributed::all_reduce(x, group).into_data().to_vec<float>(),
              std::vector<float>(4, 3.0f));
    // NCCL needs a GPU per rank: the ranks agreed on the host path.
    EXPECT_EQ(group.backend_name(), "gloo");
  }));
}

TEST(GpuNccl, DataParallelOnTwoGpusEqualsOneProcess) {
  KILN_NCCL_REQUIRE(2, 2);
  const Device gpu0 = Device::cuda(0).autodiff();
  const Tensor<2> x = test::batch_features(gpu0);
  const Tensor<1, Int> y = test::batch_labels(gpu0);
  const auto expected = test::one_process_parameters(test::data_parallel_net(1, gpu0), x, y);
  const std::vector<ProcessGroup> groups =
      ProcessGroup::threads({gpu0, Device::cuda(1).autodiff()}, DistributedOptions{.timeout = 60s});
  std::vector<test::DataParallelNet> nets;
  std::vector<Tensor<2>> features;
  std::vector<Tensor<1, Int>> labels;
  for (const ProcessGroup& group : groups) {
    nets.push_back(test::data_parallel_net(1 + group.rank(), group.device()));
    features.push_back(x.to_device(group.device().without_autodiff()));
    labels.push_back(y.to_device(group.device().without_autodiff()));
  }
  std::vector<std::vector<std::vector<float>>> results(groups.size());
  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
    const auto r = static_cast<std::size_t>(group.rank());
    // Small buckets: several all-reduces overlap the backward pass.
    const train::DataParallel ddp(group, {.bucket_bytes = 256});
    results[r] = test::data_parallel_parameters(ddp, nets[r], features[r], labels[r]);
  }));
  for (std::size_t r = 0; r < results.size(); ++r) {
    test::expect_same_parameters(results[r], expected, "rank " + std::to_string(r) + " on cuda");
  }
}

// ---- in child processes ----

bool child(const char* name) {
  const char* chosen = std::getenv("KILN_NCCL_CHILD");
  return chosen != nullptr && std::string(chosen) == name;
}

float read_one(const Tensor<2>& t) {
  return t.slice({{0, 1}, {0, 1}}).into_data().to_vec<float>()[0];
}

// Rank 0 queues products for about four timeouts (of 2 s) before its all_reduce, so rank 1's
// waits on the GPU past the timeout: both watchdogs abort, each rank's read of its sum throws,
// and the group is broken.
TEST(GpuNccl, StalledCallChild) {
  if (!child("stalled")) GTEST_SKIP() << "run by GpuNccl.AStalledCallIsAbortedAfterTheTimeout";
  const auto timeout = 2s;
  // The products' time, measured before the ranks start (their calls wait at most 2 s for
  // each other).
  const auto a = Tensor<2>::random({4096, 4096}, Distribution::uniform(0, 1), Device::cuda(0));
  read_one(a.matmul(a));
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) read_one(a.matmul(a));
  const double each =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 4;
  const auto count = static_cast<int>(std::min(4.0 * 2.0 / each, 100000.0));
  const std::vector<ProcessGroup> groups = two_gpu_ranks(timeout);
  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
    const Device device = group.device();
    distributed::all_reduce(Tensor<1>::ones({4}, device), group).into_data();  // sets NCCL up
    Tensor<2> busy = Tensor<2>::ones({1, 1}, device);
    if (group.rank() == 0) {
      for (int i = 0; i < count; ++i) busy = a.matmul(a);
      std::printf("rank 0 queued %d products of %.2f ms\n", count, each * 1e3);
    }
    const auto sum = distributed::all_reduce(Tensor<1>::ones({4}, device), group);
    const std::string read = test::message_of<ExecutionError>([&] { sum.into_data(); });
    std::printf("rank %d's read: %s\n", group.rank(), read.c_str());
    EXPECT_EQ(read.find("another error"), std::string::npos) << read;
    EXPECT_NE(read, "no error");
    const std::string next = test::message_of<DistributedError>(
        [&] { distributed::all_reduce(Tensor<1>::ones({4}, device), group); });
    std::printf("rank %d's next call: %s\n", group.rank(), next.c_str());
    EXPECT_NE(next.find("the process group is broken since"), std::string::npos) << next;
  }));
}

TEST(GpuNccl, AStalledCallIsAbortedAfterTheTimeout) {
  KILN_NCCL_REQUIRE(2, 2);
  const auto child = test::run_child("GpuNccl.StalledCallChild", {"KILN_NCCL_CHILD=stalled"}, 300);
  EXPECT_EQ(child.status, 0) << child.output;
  EXPECT_NE(child.output.find("[       OK ] GpuNccl.StalledCallChild"), std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("did not finish within the group's timeout of 2 s"),
            std::string::npos)
      << child.output;
}

// KILN_NCCL=0: NCCL is not loaded, and the collectives of cuda tensors go through the host.
TEST(GpuNccl, HostPathChild) {
  if (!child("host")) GTEST_SKIP() << "run by GpuNccl.WithoutNcclTheHostPathIsTaken";
  bool loaded = true;
  const std::string status = cuda_plugin(nullptr)->nccl_status(&loaded);
  EXPECT_FALSE(loaded);
  EXPECT_NE(status.find("KILN_NCCL=0"), std::string::npos) << status;
  const ProcessGroup group = ProcessGroup::single(Device::cuda(0));
  check_every_collective(group);
  EXPECT_EQ(group.backend_name(), "single");
}

TEST(GpuNccl, WithoutNcclTheHostPathIsTaken) {
  std::string reason;
  if (cuda_device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  const auto child =
      test::run_child("GpuNccl.HostPathChild", {"KILN_NCCL_CHILD=host", "KILN_NCCL=0"});
  EXPECT_EQ(child.status, 0) << child.output;
  EXPECT_NE(child.output.find("[       OK ] GpuNccl.HostPathChild"), std::string::npos)
      << child.output;
}

}  // namespace gpu_nccl

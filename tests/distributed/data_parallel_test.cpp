// Data-parallel training on the ranks of a thread group equals one process on the same global
// batch (tests/distributed/data_parallel_checks.h), with and without overlapping backward, with
// one bucket or one per parameter, on the plain and the fused CPU; the averaging of gradients
// after a backward pass of the caller's; parameters a rank did not use; and the options' checks.
#include <gtest/gtest.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>
#include <kiln/train/data_parallel.h>

#include <chrono>

#include "distributed/data_parallel_checks.h"
#include "support/error_message.h"
#include "support/ranks.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using test::DataParallelNet;

struct Case {
  int ranks;
  train::DataParallelOptions options;
  Device device;
  std::string name;
};

void expect_like_one_process(const Case& c) {
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo";
  const Device device = c.device.autodiff();
  const Tensor<2> x = test::batch_features(device);
  const Tensor<1, Int> y = test::batch_labels(device);
  const auto expected = test::one_process_parameters(test::data_parallel_net(1, device), x, y);
  std::vector<DataParallelNet> nets;
  for (int r = 0; r < c.ranks; ++r) nets.push_back(test::data_parallel_net(1 + r, device));
  const std::vector<ProcessGroup> groups =
      ProcessGroup::threads(c.ranks, device, DistributedOptions{.timeout = 30s});
  std::vector<std::vector<std::vector<float>>> results(groups.size());
  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
    const train::DataParallel ddp(group, c.options);
    const auto r = static_cast<std::size_t>(group.rank());
    results[r] = test::data_parallel_parameters(ddp, nets[r], x, y);
  }));
  for (std::size_t r = 0; r < results.size(); ++r) {
    test::expect_same_parameters(results[r], expected, c.name + ", rank " + std::to_string(r));
  }
}

TEST(DataParallel, TwoRanksOverlappingBackwardEqualOneProcess) {
  expect_like_one_process({2, {}, Device::cpu(), "2 ranks, one bucket, overlap"});
}

TEST(DataParallel, ThreeRanksAfterBackwardWithABucketPerParameterEqualOneProcess) {
  expect_like_one_process({3,
                           {.bucket_bytes = 16, .overlap = false},
                           Device::cpu(),
                           "3 ranks, a bucket per parameter, after backward"});
}

TEST(DataParallel, SmallBucketsOverlappingBackwardOnTheFusedCpuEqualOneProcess) {
  expect_like_one_process({2,
                           {.bucket_bytes = 100},
                           Device::cpu().fused(),
                           "2 ranks, buckets of 100 bytes, overlap, fused"});
}

TEST(DataParallel, AveragesTheGradientsOfABackwardPassOfTheCallers) {
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo";
  const Device device = Device::cpu().autodiff();
  const Tensor<2> x = test::batch_features(device);
  const Tensor<1, Int> y = test::batch_labels(device);
  const DataParallelNet net = test::data_parallel_net(1, device);
  const auto groups = ProcessGroup::threads(2, device, DistributedOptions{.timeout = 30s});
  std::vector<std::vector<float>> grads(2);
  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
    const train::DataParallel ddp(group);
    const std::int64_t from = 12 * group.rank();
    Gradients g =
        nn::cross_entropy(net.forward(x.slice({{from, from + 12}})), y.slice({{from, from + 12}}))
            .backward();
    ddp.all_reduce_gradients(net, g);
    grads[static_cast<std::size_t>(group.rank())] =
        net.hidden.weight.val().grad(g)->into_data().to_vec<float>();
  }));
  // The mean of the two halves' mean losses is the whole batch's mean loss.
  Gradients whole = nn::cross_entropy(net.forward(x), y).backward();
  const auto expected = net.hidden.weight.val().grad(whole)->into_data().to_vec<float>();
  for (const auto& rank_grads : grads) {
    ASSERT_EQ(rank_grads.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(rank_grads[i], expected[i], 1e-6);
  }
}

struct TwoHeads {
  nn::Linear body, left, right;
  KILN_MODULE(body, left, right)
};

TEST(DataParallel, AParameterARankDidNotUseCountsAsZerosThere) {
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo";
  const Device device = Device::cpu().autodiff();
  device.seed(5);
  const TwoHeads net =
      nn::train(TwoHeads{nn::LinearConfig{3, 4}.init(device), nn::LinearConfig{4, 2}.init(device),
                         nn::LinearConfig{4, 2}.init(device)});
  const auto x = Tensor<2>::ones({2, 3}, device.without_autodiff());
  const auto groups = ProcessGroup::threads(2, device, DistributedOptions{.timeout = 30s});
  std::vector<std::vector<float>> right(2);
  test::expect_no_errors(test::on_ranks(groups, [&](const ProcessGroup& group) {
    const train::DataParallel ddp(group, {.bucket_bytes = 32});
    const Tensor<2> hidden = net.body.forward(x);
    // Rank 0 uses the right head only, rank 1 the left head only.
    const Tensor<2> y = group.rank() == 0 ? net.right.forward(hidden) : net.left.forward(hidden);
    Gradients g = ddp.backward(net, y.sum());
    right[static_cast<std::size_t>(group.rank())] =
        net.right.weight.val().grad(g)->into_data().to_vec<float>();
  }));
  Gradients alone = net.right.forward(net.body.forward(x)).sum().backward();
  const auto full = net.right.weight.val().grad(alone)->into_data().to_vec<float>();
  for (const auto& grads : right) {
    ASSERT_EQ(grads.size(), full.size());
    for (std::size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(grads[i], full[i] / 2, 1e-6);
  }
}

TEST(DataParallel, OneProcessReducesNothing) {
  const Device device = Device::cpu().autodiff();
  const Tensor<2> x = test::batch_features(device);
  const Tensor<1, Int> y = test::batch_labels(device);
  const auto expected = test::one_process_parameters(test::data_parallel_net(1, device), x, y);
  const train::DataParallel ddp(ProcessGroup::single(device));
  EXPECT_EQ(ddp.world_size(), 1);
  test::expect_same_parameters(
      test::data_parallel_parameters(ddp, test::data_parallel_net(1, device), x, y), expected,
      "one process");
}

TEST(DataParallel, ShardsLoaderOptionsAndChecksItsOwn) {
  const ProcessGroup group = ProcessGroup::single();
  const train::DataParallel ddp(group);
  const data::DataLoaderOptions sharded = ddp.shard({.batch_size = 8, .shuffle = true});
  EXPECT_EQ(sharded.rank, 0u);
  EXPECT_EQ(sharded.world_size, 1u);
  EXPECT_EQ(sharded.batch_size, 8u);
  EXPECT_TRUE(sharded.shuffle);
  test::expect_error<InvalidArgument>([&] { train::DataParallel(group, {.bucket_bytes = 0}); },
                                      "DataParallel", {"bucket_bytes must be positive"});
}

}  // namespace
}  // namespace kiln

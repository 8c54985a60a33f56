// Collectives on the ranks of a thread group (ProcessGroup::threads, Gloo over loopback TCP)
// against float64 references, the group of one process, the checks of bad arguments, and the
// mismatch detector: mismatched calls and silent ranks become DistributedError, never a hang.
#include <gtest/gtest.h>
#include <kiln/distributed.h>
#include <kiln/kiln.h>

#include <chrono>

#include "distributed/collective_checks.h"
#include "support/error_message.h"
#include "support/ranks.h"
#include "support/scoped_env.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using test::expect_error;
using test::on_ranks;
using test::rank_error;

// A group of size ranks in this process, or a skip where kiln was built without Gloo.
#define KILN_THREAD_GROUP(name, size, wait)                                     \
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo"; \
  const std::vector<ProcessGroup> name =                                        \
      ProcessGroup::threads(size, Device::cpu(), DistributedOptions{.timeout = wait})

Tensor<1> iota(std::int64_t n, double scale) {
  return Tensor<1>::arange(0, n, Device::cpu()).float_() * scale;
}

TEST(Collectives, EveryCollectiveAndDtypeOnThreeRanks) {
  KILN_THREAD_GROUP(groups, 3, 30s);
  test::expect_no_errors(on_ranks(groups, [](const ProcessGroup& group) {
    test::check_every_collective(group, Device::cpu());
  }));
}

TEST(Collectives, EveryCollectiveAndDtypeOnTwoRanksThroughFusionAndAutodiff) {
  KILN_THREAD_GROUP(groups, 2, 30s);
  test::expect_no_errors(on_ranks(groups, [](const ProcessGroup& group) {
    test::check_every_collective(group, Device::cpu().fused().autodiff());
  }));
}

TEST(Collectives, TensorApiOnTwoRanks) {
  KILN_THREAD_GROUP(groups, 2, 30s);
  test::expect_no_errors(on_ranks(groups, [](const ProcessGroup& group) {
    const Device cpu = Device::cpu();
    const double mine = group.rank() + 1.0;
    const auto x = Tensor<1>::full({4}, mine, cpu);
    EXPECT_EQ(distributed::all_reduce(x, group).into_data().to_vec<float>(),
              std::vector<float>(4, 3.0f));
    EXPECT_EQ(distributed::all_reduce(x, group, ReduceOperation::Mean).into_data().to_vec<float>(),
              std::vector<float>(4, 1.5f));
    EXPECT_EQ(distributed::broadcast(x, group, 1).into_data().to_vec<float>(),
              std::vector<float>(4, 2.0f));
    EXPECT_EQ(distributed::all_gather(x, group).into_data().to_vec<float>(),
              (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}));
    const auto scattered = distributed::reduce_scatter(iota(4, mine), group);
    EXPECT_EQ(scattered.into_data().to_vec<float>(),
              group.rank() == 0 ? (std::vector<float>{0, 3}) : (std::vector<float>{6, 9}));
    const auto ints = Tensor<2, Int>::full({2, 2}, group.rank() * 5 - 3, cpu);
    EXPECT_EQ(distributed::all_reduce(ints, group, ReduceOperation::Mean)
                  .into_data()
                  .to_vec<std::int64_t>(),
              std::vector<std::int64_t>(4, -1));  // (-3 + 2) / 2 rounded down
    if (group.rank() == 0) {
      distributed::send(Tensor<2, Bool>::full({1, 3}, true, cpu), group, 1);
    } else {
      EXPECT_EQ((distributed::recv<2, Bool>({1, 3}, group, 0).into_data().to_vec<bool>()),
                std::vector<bool>(3, true));
    }
    group.barrier();
  }));
}

TEST(Collectives, GroupOfOneReturnsItsInput) {
  const ProcessGroup group = ProcessGroup::single();
  EXPECT_EQ(group.rank(), 0);
  EXPECT_EQ(group.size(), 1);
  EXPECT_EQ(group.backend_name(), "single");
  const auto x = iota(4, 1.5);
  for (ReduceOperation op : {ReduceOperation::Sum, ReduceOperation::Mean, ReduceOperation::Max}) {
    EXPECT_EQ(distributed::all_reduce(x, group, op).into_data().to_vec<float>(),
              x.into_data().to_vec<float>());
  }
  EXPECT_EQ(distributed::all_gather(x, group).into_data().to_vec<float>(),
            x.into_data().to_vec<float>());
  EXPECT_EQ(distributed::reduce_scatter(x, group).into_data().to_vec<float>(),
            x.into_data().to_vec<float>());
  EXPECT_EQ(distributed::broadcast(x, group).into_data().to_vec<float>(),
            x.into_data().to_vec<float>());
  group.barrier();
  expect_error<InvalidArgument>([&] { distributed::send(x, group, 0); }, "send",
                                {"destination 0 is this rank"});
}

TEST(Collectives, GroupsAreNumberedAndShareTheirNumberWithCopies) {
  const ProcessGroup a = ProcessGroup::single();
  const ProcessGroup b = ProcessGroup::single();
  const ProcessGroup copy = a;
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(copy, a);
  EXPECT_FALSE(a == b);
}

TEST(Collectives, BadArgumentsNameTheCollectiveAndTheValues) {
  // Every check happens on the calling rank before anything is sent, so one rank of a group of
  // two can be asked alone.
  KILN_THREAD_GROUP(groups, 2, 5s);
  const ProcessGroup& group = groups[0];
  const Device cpu = Device::cpu();
  const auto x = Tensor<2>::ones({5, 2}, cpu);
  expect_error<InvalidArgument>([&] { distributed::broadcast(x, group, 2); }, "broadcast",
                                {"root 2 is not a rank of a group of 2"});
  expect_error<InvalidArgument>([&] { distributed::broadcast(x, group, -1); }, "broadcast",
                                {"root -1"});
  expect_error<ShapeMismatch>([&] { distributed::reduce_scatter(x, group); }, "reduce_scatter",
                              {"dim 0 of [5, 2]", "2 equal chunks"});
  expect_error<InvalidArgument>([&] { distributed::send(x, group, 0); }, "send",
                                {"destination 0 is this rank"});
  expect_error<InvalidArgument>([&] { distributed::send(x, group, 7); }, "send",
                                {"destination 7 is not a rank of a group of 2"});
  expect_error<InvalidArgument>(
      [&] {
        distributed::recv<2>({5, 2}, group, 3);
      },
      "recv", {"source 3"});
  expect_error<ShapeMismatch>(
      [&] {
        distributed::recv<1>({5, 2}, group, 1);
      },
      "recv", {"rank 1 cannot hold a shape of rank 2"});
  expect_error<DTypeMismatch>([&] { distributed::recv<1>({5}, group, 1, DType::I32); }, "recv",
                              {"i32"});
  expect_error<InvalidArgument>(
      [&] { distributed::detail::all_reduce(x.primitive(), group, ReduceOperation(9)); },
      "all_reduce", {"unknown reduce operation 9"});
  expect_error<DTypeMismatch>(
      [&] {
        distributed::detail::all_reduce(Tensor<1, Bool>::full({2}, true, cpu).primitive(), group,
                                        ReduceOperation::Max);
      },
      "all_reduce", {"bool"});
  expect_error<UnsupportedDType>(
      [&] {
        distributed::recv<2>({1, 32}, group, 1, DType::QFloat);
      },
      "recv", {"dequantize"});
  const auto tracked = Tensor<1>::ones({2}, cpu.autodiff()).require_grad();
  expect_error<AutodiffError>([&] { distributed::all_reduce(tracked, group); }, "all_reduce",
                              {"no backward rule"});
  expect_error<InvalidArgument>([] { ProcessGroup::threads(0); }, "ProcessGroup::threads",
                                {"between 1 and 64, got 0"});
  expect_error<InvalidArgument>(
      [] { ProcessGroup::threads(2, Device::cpu(), DistributedOptions{.timeout = 0ms}); },
      "ProcessGroup::threads", {"timeout must be positive"});
}

TEST(Collectives, MismatchedShapesAreADistributedErrorOnEveryRank) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    distributed::all_reduce(Tensor<1>::ones({4 + group.rank()}, Device::cpu()), group);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "a mismatch waits for no timeout";
  test::expect_rank_errors<DistributedError>(
      errors, {"[all_reduce] the ranks called different collectives",
               "rank 0: #0 all_reduce(sum) f32 [4]", "rank 1: #0 all_reduce(sum) f32 [5]"});
  // The group is broken from then on, on every rank, at once.
  for (const ProcessGroup& group : groups) {
    expect_error<DistributedError>([&] { group.barrier(); }, "barrier",
                                   {"the process group is broken since", "all_reduce"});
  }
}

TEST(Collectives, DifferentCollectivesAndReductionsAreADistributedError) {
  KILN_THREAD_GROUP(groups, 3, 10s);
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    const auto x = Tensor<1>::ones({2}, Device::cpu());
    if (group.rank() == 2) {
      distributed::broadcast(x, group, 0);
    } else {
      distributed::all_reduce(x, group,
                              group.rank() == 0 ? ReduceOperation::Max : ReduceOperation::Min);
    }
  });
  test::expect_rank_errors<DistributedError>(
      errors, {"rank 0: #0 all_reduce(max) f32 [2]", "rank 1: #0 all_reduce(min)",
               "rank 2: #0 broadcast(root 0) f32 [2]"});
}

TEST(Collectives, ARankThatSkipsACollectiveMeetsTheNextOneAndBothAreCaught) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    const auto x = Tensor<1>::ones({3}, Device::cpu());
    if (group.rank() == 0) distributed::broadcast(x, group, 0);  // rank 1 skips this one
    distributed::all_reduce(x, group);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_NE(rank_error<DistributedError>(errors[0]).rfind("[broadcast] ", 0), std::string::npos);
  EXPECT_NE(rank_error<DistributedError>(errors[1]).rfind("[all_reduce] ", 0), std::string::npos);
  test::expect_rank_errors<DistributedError>(
      errors, {"rank 0: #0 broadcast(root 0) f32 [3]; rank 1: #0 all_reduce(sum)"});
}

TEST(Collectives, ASilentRankIsNamedWithinTheTimeout) {
  KILN_THREAD_GROUP(groups, 2, 400ms);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    if (group.rank() == 0) distributed::all_reduce(Tensor<1>::ones({3}, Device::cpu()), group);
  });
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 350ms);
  EXPECT_LT(waited, 10s);
  const std::string message = rank_error<DistributedError>(errors[0]);
  for (const char* part : {"[all_reduce] collective #0 all_reduce(sum) f32 [3] on rank 0",
                           "rank 1 did not answer (waited up to 0.4 s)"}) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  EXPECT_EQ(errors[1], nullptr);
}

TEST(Collectives, TwoRanksSendingToEachOtherAreADistributedErrorNotADeadlock) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    distributed::send(Tensor<1>::ones({3}, Device::cpu()), group, 1 - group.rank());
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  test::expect_rank_errors<DistributedError>(
      errors, {"[send] the ranks called different transfers", "rank 0: #0 send(to 1) f32 [3]",
               "rank 1: #0 send(to 0) f32 [3]"});
}

TEST(Collectives, SendAndRecvOfDifferentShapesAreADistributedError) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  const auto errors = on_ranks(groups, [](const ProcessGroup& group) {
    if (group.rank() == 0) {
      distributed::send(Tensor<1>::ones({3}, Device::cpu()), group, 1);
    } else {
      distributed::recv<1>({4}, group, 0);
    }
  });
  test::expect_rank_errors<DistributedError>(
      errors, {"rank 0: #0 send(to 1) f32 [3]; rank 1: #0 recv(from 0) f32 [4]"});
}

TEST(Collectives, ThreadsOnAListOfDevicesPutRankIOnDeviceI) {
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo";
  const Device plain = Device::cpu(), tracked = Device::cpu().autodiff();
  const std::vector<ProcessGroup> groups =
      ProcessGroup::threads({plain, tracked}, DistributedOptions{.timeout = 30s});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].device(), plain);
  EXPECT_EQ(groups[1].device(), tracked);
  EXPECT_EQ(groups[1].rank(), 1);
  EXPECT_EQ(groups[0].backend_name(), "gloo");
  test::expect_no_errors(on_ranks(groups, [](const ProcessGroup& group) {
    const auto x = Tensor<1>::full({2}, group.rank() + 1.0, group.device().without_autodiff());
    EXPECT_EQ(distributed::all_reduce(x, group).into_data().to_vec<float>(),
              std::vector<float>(2, 3.0f));
  }));
  const std::vector<ProcessGroup> one = ProcessGroup::threads({tracked});
  EXPECT_EQ(one.at(0).device(), tracked);
  EXPECT_EQ(one[0].size(), 1);
  expect_error<InvalidArgument>([] { ProcessGroup::threads(std::vector<Device>{}); },
                                "ProcessGroup::threads", {"between 1 and 64, got 0"});
}

// What a backend with a transport of its own uses (the CUDA backend over NCCL): the check of a
// call without its data, the group's timeout, breaking the group, and attachments.
TEST(Collectives, ACheckedCallAgreesLikeTheOthersAndItsTransportIsPartOfIt) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  using distributed::Collective;
  using distributed::CollectiveKind;
  using distributed::Transport;
  const Collective nccl{CollectiveKind::AllReduce, DType::BF16, Shape{4},
                        ReduceOperation::Mean,     0,           Transport::Nccl};
  test::expect_no_errors(
      on_ranks(groups, [&](const ProcessGroup& group) { group.communicator().check(nccl); }));
  // The next call is #1 on both ranks, and a host call does not match a call over NCCL.
  const auto errors = on_ranks(groups, [&](const ProcessGroup& group) {
    Collective mine = nccl;
    if (group.rank() == 1) mine.transport = Transport::Communicator;
    group.communicator().check(mine);
  });
  test::expect_rank_errors<DistributedError>(
      errors, {"rank 0: #1 all_reduce(mean) bf16 [4] over nccl; rank 1: #1 all_reduce(mean) bf16 "
               "[4]"});
}

TEST(Collectives, ACheckedSendMeetsACheckedRecv) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  using distributed::Collective;
  using distributed::CollectiveKind;
  test::expect_no_errors(on_ranks(groups, [](const ProcessGroup& group) {
    const bool sender = group.rank() == 0;
    group.communicator().check(Collective{sender ? CollectiveKind::Send : CollectiveKind::Recv,
                                          DType::I32, Shape{3}, ReduceOperation::Sum,
                                          sender ? 1 : 0, distributed::Transport::Nccl});
  }));
}

TEST(Collectives, AGroupBrokenFromOutsideThrowsTheReasonAtEveryLaterCall) {
  KILN_THREAD_GROUP(groups, 2, 10s);
  for (const ProcessGroup& group : groups) {
    group.communicator().set_broken("[all_reduce] NCCL gave up");
    group.communicator().set_broken("a later reason is not kept");
  }
  for (const ProcessGroup& group : groups) {
    expect_error<DistributedError>(
        [&] { group.barrier(); }, "barrier",
        {"the process group is broken since: [all_reduce] NCCL gave up"});
  }
  const ProcessGroup single = ProcessGroup::single();
  single.communicator().set_broken("[broadcast] NCCL gave up");
  expect_error<DistributedError>([&] { single.barrier(); }, "barrier", {"NCCL gave up"});
  expect_error<DistributedError>([&] { single.communicator().check(distributed::Collective{}); },
                                 "barrier", {"gave up"});
}

TEST(Collectives, TimeoutsAreTheGroupsOwn) {
  KILN_THREAD_GROUP(groups, 2, 7s);
  EXPECT_EQ(groups[1].communicator().timeout(), 7s);
  EXPECT_EQ(ProcessGroup::single().communicator().timeout(), DistributedOptions{}.timeout);
  EXPECT_EQ(ProcessGroup::threads(1, Device::cpu(), {.timeout = 3s})[0].communicator().timeout(),
            3s);
}

TEST(Collectives, AttachmentsAreMadeOnceAndLiveAsLongAsTheGroup) {
  std::weak_ptr<void> kept;
  {
    const ProcessGroup group = ProcessGroup::single();
    int made = 0;
    const auto make = [&] {
      ++made;
      return std::static_pointer_cast<void>(std::make_shared<int>(42));
    };
    EXPECT_EQ(group.communicator().attachment("nccl cuda:0", {}), nullptr);
    const std::shared_ptr<void> first = group.communicator().attachment("nccl cuda:0", make);
    const std::shared_ptr<void> again = group.communicator().attachment("nccl cuda:0", make);
    EXPECT_EQ(first, again);
    EXPECT_EQ(*static_cast<int*>(first.get()), 42);
    EXPECT_EQ(group.communicator().attachment("nccl cuda:0", {}), first);
    EXPECT_EQ(made, 1);
    (void)group.communicator().attachment("nccl cuda:1", make);
    EXPECT_EQ(made, 2);
    kept = first;
    // Copies share it.
    const ProcessGroup copy = group;
    EXPECT_EQ(copy.communicator().attachment("nccl cuda:0", {}), first);
  }
  EXPECT_TRUE(kept.expired());
}

TEST(ProcessGroup, FromAnEnvironmentWithoutAWorldIsOneProcess) {
  const test::ScopedEnv size("KILN_WORLD_SIZE", nullptr), rank("KILN_RANK", nullptr),
      mpi_size("OMPI_COMM_WORLD_SIZE", nullptr), mpi_rank("OMPI_COMM_WORLD_RANK", nullptr);
  const ProcessGroup group = ProcessGroup::from_env(Device::cpu());
  EXPECT_EQ(group.size(), 1);
  EXPECT_EQ(group.rank(), 0);
  EXPECT_EQ(group.device(), Device::cpu());
}

TEST(ProcessGroup, FromAnEnvironmentRefusesWhatItCannotUse) {
  constexpr const char* kOp = "ProcessGroup::from_env";
  const test::ScopedEnv mpi_size("OMPI_COMM_WORLD_SIZE", nullptr),
      mpi_rank("OMPI_COMM_WORLD_RANK", nullptr), store("KILN_STORE", nullptr);
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "two");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"KILN_RANK is 'two', not an integer"});
  }
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "2");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"rank 2 is not in [0, 2)"});
  }
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", nullptr);
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"KILN_RANK is not set for a world of 2"});
  }
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", nullptr), rank("KILN_RANK", "1");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"rank 1 is set without a world size"});
  }
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "0"),
        mpi("OMPI_COMM_WORLD_SIZE", "4");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"KILN_WORLD_SIZE=2 contradicts OMPI_COMM_WORLD_SIZE=4"});
  }
  {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "0"),
        timeout("KILN_DISTRIBUTED_TIMEOUT", "soon");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"KILN_DISTRIBUTED_TIMEOUT is 'soon'"});
  }
  if (distributed::available()) {
    // OpenMPI's variables stand for kiln's; the rendezvous directory is still needed.
    const test::ScopedEnv size("KILN_WORLD_SIZE", nullptr), rank("KILN_RANK", nullptr),
        mpi("OMPI_COMM_WORLD_SIZE", "2"), mpi_rank_set("OMPI_COMM_WORLD_RANK", "1");
    expect_error<InvalidArgument>([] { ProcessGroup::from_env(); }, kOp,
                                  {"KILN_STORE is not set", "mpirun"});
  } else {
    const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "0");
    expect_error<UnsupportedOperation>([] { ProcessGroup::from_env(); }, kOp,
                                       {"built without", "libgloo-dev"});
    expect_error<UnsupportedOperation>([] { ProcessGroup::threads(2); }, "ProcessGroup::threads",
                                       {"libgloo-dev"});
  }
}

TEST(ProcessGroup, ARendezvousThatNobodyJoinsEndsWithinTheTimeout) {
  if (!distributed::available()) GTEST_SKIP() << "kiln was built without Gloo";
  const std::string directory = ::testing::TempDir() + "kiln_store_" + std::to_string(::getpid());
  std::filesystem::create_directories(directory);
  const test::ScopedEnv size("KILN_WORLD_SIZE", "2"), rank("KILN_RANK", "0"),
      store("KILN_STORE", directory.c_str()), timeout("KILN_DISTRIBUTED_TIMEOUT", "0.5");
  const auto started = std::chrono::steady_clock::now();
  expect_error<DistributedError>([] { ProcessGroup::from_env(Device::cpu()); }, "ProcessGroup",
                                 {"rank 0 of 2 could not connect", "0.5 s"});
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace kiln

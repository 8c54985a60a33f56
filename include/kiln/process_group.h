// ProcessGroup: the ranks that take part in collectives (kiln/distributed.h) and the transport
// between them. One process per rank, started by `kiln launch --nproc N -- PROGRAM` on one host
// or by OpenMPI's mpirun; each makes its group from the environment:
//
//   ProcessGroup group = ProcessGroup::from_env();   // KILN_RANK, KILN_WORLD_SIZE, KILN_STORE
//   group.rank(); group.size(); group.device();       // 0..size-1, the number of ranks
//   auto total = distributed::all_reduce(x, group);   // the sum of every rank's x, on every rank
//   group.barrier();
//
// Outside a launcher, from_env() is a group of one process (rank 0 of 1), whose collectives
// return their input, so one program runs either way. ProcessGroup::threads(n) makes the n ranks
// of a group inside one process, one per thread (tests, experiments); ProcessGroup::threads({
// Device::cuda(0), Device::cuda(1)}) puts rank i on GPU i, several GPUs driven from one process.
//
// The transport is Gloo's TCP transport (the engine of PyTorch's CPU collectives), its
// rendezvous a directory of files (Gloo's FileStore) that every rank can reach; kiln is built
// with it when Debian's libgloo-dev is found (KILN_HAVE_GLOO), and without it a group of more
// than one rank throws UnsupportedOperation saying so. Tensors on any device take part: the
// backends' collective ops (ops.def's distributed group) move their values through the host,
// except where a backend has a transport of its own: the CUDA backend moves cuda tensors between
// GPUs with NCCL, loaded at run time (README.md, "NCCL on cuda"), and uses the group's communicator
// to agree on each call and to hand out NCCL's unique id.
//
// No silent hangs: every collective carries a sequence number and a signature (the collective,
// dtype, shape, reduction, root or peer, dim), which the ranks exchange and compare before any
// data moves. A mismatch, or a rank that does not answer within the timeout (60 s by default,
// DistributedOptions::timeout or KILN_DISTRIBUTED_TIMEOUT in seconds), throws DistributedError on
// every rank that waits, naming the collective, its number and the ranks. The group is broken
// afterwards: its later collectives throw DistributedError at once. The calls of one group are
// serialised; every rank must make them in the same order.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/options.h"
#include "kiln/shape.h"

namespace kiln {

struct DistributedOptions {
  // How long a collective waits for the other ranks (for their signatures, then for the data),
  // and a group's rendezvous for all ranks to arrive, before DistributedError.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

namespace distributed {

enum class CollectiveKind : std::uint8_t {
  AllReduce,
  Broadcast,
  AllGather,
  ReduceScatter,
  Send,
  Recv,
  Barrier
};

// How a call's data moves: through the Communicator itself (host bytes), or over NCCL between
// GPUs, which the CUDA backend drives after the communicator has checked the call
// (Communicator::check). Part of the call's signature: ranks that would move the data by
// different ways are a mismatch, not a hang.
enum class Transport : std::uint8_t { Communicator, Nccl };

// What one call is, as the ranks that take part must agree on it before data moves. all_gather
// and reduce_scatter join and split dim 0.
struct Collective {
  CollectiveKind kind = CollectiveKind::Barrier;
  DType dtype = DType::F32;  // the tensor's own dtype (f16 and bf16 travel as f32)
  Shape shape;
  ReduceOperation operation = ReduceOperation::Sum;  // AllReduce, ReduceScatter
  std::int64_t peer = 0;  // Broadcast: the root; Send: the destination; Recv: the source
  Transport transport = Transport::Communicator;
};

// "all_reduce", "broadcast", ...
std::string_view collective_name(CollectiveKind kind) noexcept;
// "all_reduce(sum) f32 [2, 3]", "send(to 1) i64 [4]", "all_reduce(mean) bf16 [8] over nccl".
std::string describe(const Collective& what);

// The transport of a ProcessGroup: the ranks' values as host bytes. kiln implements it with
// Gloo (ProcessGroup::from_env, threads) and for one process (ProcessGroup::single); the default
// collective ops of the backends call it. Each call is one collective or point-to-point transfer
// described by `what`, which the implementation checks across the ranks first (DistributedError).
// Element types are f64, f32 (f16 and bf16 widened), the integer dtypes and bool (moves only).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "single".
  virtual std::string name() const = 0;
  // data: elements of dtype, reduced in place over the ranks by operation (Sum, Max or Min;
  // Mean is Sum, divided by the caller).
  virtual void all_reduce(const Collective& what, std::span<std::byte> data, DType dtype,
                          ReduceOperation operation) = 0;
  // data: root's bytes afterwards on every rank.
  virtual void broadcast(const Collective& what, std::span<std::byte> data, int root) = 0;
  // out (size() times in's bytes): every rank's in, in rank order.
  virtual void all_gather(const Collective& what, std::span<const std::byte> in,
                          std::span<std::byte> out) = 0;
  // in: size() chunks of out's bytes; out: chunk rank() of every rank's in, reduced (Sum, Max,
  // Min).
  virtual void reduce_scatter(const Collective& what, std::span<const std::byte> in,
                              std::span<std::byte> out, DType dtype, ReduceOperation operation) = 0;
  virtual void send(const Collective& what, std::span<const std::byte> data, int destination) = 0;
  virtual void recv(const Collective& what, std::span<std::byte> data, int source) = 0;
  virtual void barrier() = 0;

  // ---- for a backend that moves the data over a transport of its own (NCCL on cuda) ----
  // The check of the other calls without their data: every rank that takes part makes the call
  // `what` (numbered like the others), else DistributedError; then the caller moves the data.
  virtual void check(const Collective& what) = 0;
  // How long a call waits for the other ranks (DistributedOptions::timeout).
  virtual std::chrono::milliseconds timeout() const = 0;
  // The group is broken by a failure outside the communicator (NCCL's error or timeout): every
  // later call throws DistributedError quoting reason (the first reason stays).
  virtual void set_broken(const std::string& reason) = 0;
  // What a transport keeps for this group under key (the CUDA backend: its NCCL communicator of
  // one GPU): made by make on the first call for key (the others wait), destroyed with the
  // communicator. With an empty make, the one kept or null.
  virtual std::shared_ptr<void> attachment(const std::string& key,
                                           const std::function<std::shared_ptr<void>()>& make) = 0;
};

}  // namespace distributed

class ProcessGroup {
 public:
  // A group over communicator whose ranks compute on device, numbered anew (id()).
  ProcessGroup(std::shared_ptr<distributed::Communicator> communicator, Device device);

  // The group this process belongs to, from the environment: KILN_RANK and KILN_WORLD_SIZE (or
  // OpenMPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE), KILN_STORE (the rendezvous
  // directory, which `kiln launch` makes), KILN_DISTRIBUTED_TIMEOUT (seconds, overriding
  // options.timeout) and KILN_GLOO_HOSTNAME (the address this rank listens on: 127.0.0.1 by
  // default, the host's name under mpirun). Without a world size, or with a world size of 1, a
  // group of one process. InvalidArgument for malformed or inconsistent values;
  // UnsupportedOperation when kiln was built without Gloo and the world has several ranks;
  // DistributedError when the ranks do not all arrive within the timeout.
  static ProcessGroup from_env(Device device = Device::default_device(),
                               DistributedOptions options = {});
  // The `size` ranks of one group inside this process (rank i is element i), connected over
  // loopback TCP; each rank's collectives are called from a thread of its own. Every rank
  // computes on device.
  static std::vector<ProcessGroup> threads(int size, Device device = Device::cpu(),
                                           DistributedOptions options = {});
  // One rank per device, rank i computing on devices[i]: several GPUs from one process,
  //   auto ranks = ProcessGroup::threads({Device::cuda(0), Device::cuda(1)});
  // (between 1 and 64 devices; InvalidArgument otherwise).
  static std::vector<ProcessGroup> threads(const std::vector<Device>& devices,
                                           DistributedOptions options = {});
  // A group of this process alone: every collective gives back its input's values (a mean
  // divides by 1; cuda tensors with NCCL come back as copies).
  static ProcessGroup single(Device device = Device::cpu());

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The device this rank computes on.
  const Device& device() const noexcept { return device_; }
  // How tensors on device() move: "nccl" on a cuda device where NCCL is used (the CUDA plugin
  // loads it, and the group has not chosen the host path for that GPU: README.md, "NCCL on cuda"),
  // else the communicator's "gloo" or "single".
  std::string backend_name() const;
  // A number unique in this process (the op IR names groups by it); copies share it.
  std::uint64_t id() const noexcept { return id_; }
  distributed::Communicator& communicator() const noexcept { return *communicator_; }
  // Returns when every rank has called it (DistributedError on a timeout or a mismatch).
  void barrier() const { communicator_->barrier(); }

  bool operator==(const ProcessGroup& other) const noexcept { return id_ == other.id_; }

 private:
  std::shared_ptr<distributed::Communicator> communicator_;
  Device device_;
  int rank_ = 0;
  int size_ = 1;
  std::uint64_t id_ = 0;
};

}  // namespace kiln

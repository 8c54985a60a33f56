// NCCL between the GPUs of a process group: the CUDA backend's collectives of cuda tensors
// (cuda_distributed.cpp) go through it, and through the host only where it cannot be used.
//
// NCCL is loaded at run time (library_search.h says where from), never linked. Each rank of a
// group makes its part of the group's NCCL communicator on a GPU at its first collective of
// tensors on that GPU, all ranks at once (a collective of the group's communicator, Gloo or
// single):
//   1. every rank tells the others its NCCL version (none where NCCL is missing) and its GPU's
//      UUID; where a rank has no NCCL, the ranks' versions differ, or two ranks share a GPU (NCCL
//      needs a GPU per rank), every rank keeps to the host path for that GPU, and says why;
//   2. rank 0 makes NCCL's unique id and broadcasts it over the communicator;
//   3. every rank calls ncclCommInitRank on its GPU.
// The communicator lives as long as the group (Communicator::attachment), and is aborted, not
// destroyed, at the end: ncclCommDestroy may wait for the other ranks, which in a group of
// threads are destroyed one after the other on one thread.
//
// A call first checks the collective through the group's communicator (a mismatch is a
// DistributedError on every rank, never a hang), then queues NCCL's kernel on the device's one
// stream, after everything queued before it, and returns. A watchdog thread per communicator
// follows the calls to their end: an error NCCL reports, or a call still unfinished after the
// group's timeout, aborts the communicator (its kernels end), makes the next read on the device
// an ExecutionError naming the call, and the group's next call a DistributedError.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/process_group.h"

namespace kiln::cuda {

struct Runtime;

class NcclTransport {
 public:
  virtual ~NcclTransport() = default;

  // Whether NCCL reduces dtype itself: every float dtype, i8, u8, i32, u32, i64 and u64 (the
  // others reduce on the host path; every dtype moves).
  static bool reduces(DType dtype) noexcept {
    switch (dtype) {
      case DType::F64:
      case DType::F32:
      case DType::F16:
      case DType::BF16:
      case DType::I64:
      case DType::I32:
      case DType::I8:
      case DType::U64:
      case DType::U32:
      case DType::U8:
        return true;
      default:
        return false;
    }
  }

  // what: the call as the ranks check it. Addresses are of contiguous device memory on the
  // transport's GPU. combine: Sum, Max, Min, or Mean for
  // float dtypes (NCCL's average).
  virtual void all_reduce(const ProcessGroup& group, const distributed::Collective& what,
                          CUdeviceptr in, CUdeviceptr out, std::int64_t count,
                          ReduceOperation combine) = 0;
  // Root's bytes into out on every rank (in is read on the root only).
  virtual void broadcast(const ProcessGroup& group, const distributed::Collective& what,
                         CUdeviceptr in, CUdeviceptr out, std::size_t bytes) = 0;
  // Every rank's bytes of in, in rank order, into out (size() times bytes).
  virtual void all_gather(const ProcessGroup& group, const distributed::Collective& what,
                          CUdeviceptr in, CUdeviceptr out, std::size_t bytes) = 0;
  // Chunk rank() (of count elements) of every rank's in, combined, into out.
  virtual void reduce_scatter(const ProcessGroup& group, const distributed::Collective& what,
                              CUdeviceptr in, CUdeviceptr out, std::int64_t count,
                              ReduceOperation combine) = 0;
  virtual void send(const ProcessGroup& group, const distributed::Collective& what, CUdeviceptr in,
                    std::size_t bytes, int destination) = 0;
  virtual void recv(const ProcessGroup& group, const distributed::Collective& what, CUdeviceptr out,
                    std::size_t bytes, int source) = 0;
};

// Group's NCCL transport on runtime's GPU, made at the first call (every rank of group calls
// this for the same GPU at the same point: it is a collective of the group); null where the
// group moves the tensors of that GPU through the host.
std::shared_ptr<NcclTransport> nccl_transport(Runtime& runtime, const ProcessGroup& group);

// The transport nccl_transport made for group on runtime's GPU, without making one: send and recv
// involve two ranks only, while the setup needs every rank (before it, they take the host path).
std::shared_ptr<NcclTransport> made_nccl_transport(Runtime& runtime, const ProcessGroup& group);

// "nccl" where group has chosen NCCL for GPU index, or NCCL loads and the group has not chosen
// yet; else empty (the group's own communicator moves the data).
std::string nccl_transport_name(distributed::Communicator& group, int index);

// NCCL as this process loads it: "NCCL 2.28.9 (/path/libnccl.so.2)", or why it is not used
// (*loaded false).
std::string nccl_status(bool* loaded);

}  // namespace kiln::cuda

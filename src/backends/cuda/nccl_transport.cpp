// NCCL loaded at run time and driven on the device's stream (nccl_transport.h). nccl.h gives the
// types of the functions only: every one is looked up in the loaded library.
#include "backends/cuda/nccl_transport.h"

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/library_search.h"
#include "backends/cuda/runtime.h"
#include "kiln/detail/format.h"

namespace kiln::cuda {
namespace {

using detail::concat;
using detail::fail;
using distributed::Collective;
using distributed::CollectiveKind;
using Clock = std::chrono::steady_clock;

// 2.13 is the oldest NCCL with everything kiln calls (ncclGetLastError; bf16 and ncclAvg are
// older).
constexpr int kOldestVersion = 21300;
// How often the watchdog looks at a call in flight.
constexpr auto kPoll = std::chrono::milliseconds(1);

// NCCL's functions as the library has them.
struct Library {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  int version = 0;
  std::string path;  // the file it came from
};

// Library's members in order, as NCCL names them.
constexpr const char* kSymbols[] = {
    "ncclGetVersion",   "ncclGetErrorString", "ncclGetLastError",      "ncclGetUniqueId",
    "ncclCommInitRank", "ncclCommAbort",      "ncclCommGetAsyncError", "ncclAllReduce",
    "ncclBroadcast",    "ncclAllGather",      "ncclReduceScatter",     "ncclSend",
    "ncclRecv"};

template <class Function>
void bind(Function& function, void* symbol) {
  function = reinterpret_cast<Function>(symbol);
}

// NCCL_VERSION's code as text: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z since 2.9.
std::string version_text(int code) {
  if (code >= 10000) return concat(code / 10000, ".", code / 100 % 100, ".", code % 100);
  return concat(code / 1000, ".", code / 100 % 10, ".", code % 100);
}

using Loaded = search::Loaded<Library>;

// NCCL, looked for once per process (library_search.h); never unloaded.
const Loaded& load() {
  static const Loaded& loaded = *new Loaded([] {
    Loaded result;
    int version = 0;
    const search::Found found = search::find_library(
        search::kNccl, search::System::real(), kSymbols,
        [&](const std::vector<void*>& symbols) -> std::string {
          decltype(&ncclGetVersion) get_version = nullptr;
          bind(get_version, symbols[0]);
          if (get_version(&version) != ncclSuccess) return "its ncclGetVersion failed";
          if (version < kOldestVersion) {
            return concat("NCCL ", version_text(version), " is older than ",
                          version_text(kOldestVersion), ", the oldest kiln uses");
          }
          return {};
        });
    if (found.library == nullptr) {
      result.reason = found.reason;
      return result;
    }
    Library& l = result.library;
    const std::vector<void*>& s = found.symbols;
    bind(l.get_version, s[0]);
    bind(l.error_string, s[1]);
    bind(l.last_error, s[2]);
    bind(l.get_unique_id, s[3]);
    bind(l.init_rank, s[4]);
    bind(l.abort, s[5]);
    bind(l.async_error, s[6]);
    bind(l.all_reduce, s[7]);
    bind(l.broadcast, s[8]);
    bind(l.all_gather, s[9]);
    bind(l.reduce_scatter, s[10]);
    bind(l.send, s[11]);
    bind(l.recv, s[12]);
    l.version = version;
    l.path = search::opened_path(found);
    result.ok = true;
    return result;
  }());
  return loaded;
}

// NCCL's words for status, and its last error message where it has one.
std::string nccl_error(const Library& nccl, ncclComm_t comm, ncclResult_t status) {
  std::string text = nccl.error_string(status);
  const char* last = nccl.last_error(comm);
  if (last != nullptr && *last != '\0') text += concat(" (", last, ")");
  return text;
}

std::string cuda_error(CUresult status) {
  const char* text = nullptr;
  if (cuGetErrorString(status, &text) != CUDA_SUCCESS || text == nullptr) return "unknown error";
  return text;
}

ncclDataType_t nccl_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F64:
      return ncclFloat64;
    case DType::F32:
      return ncclFloat32;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I64:
      return ncclInt64;
    case DType::I32:
      return ncclInt32;
    case DType::I8:
      return ncclInt8;
    case DType::U64:
      return ncclUint64;
    case DType::U32:
      return ncclUint32;
    case DType::U8:
      return ncclUint8;
    default:
      fail<UnsupportedDType>(op, "NCCL has no reduction of ", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_operation(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::Max:
      return ncclMax;
    case ReduceOperation::Min:
      return ncclMin;
    case ReduceOperation::Mean:
      return ncclAvg;
    default:
      return ncclSum;
  }
}

// A call's name and text as the messages give them: "all_reduce", and "all_reduce(sum) f32 [4]
// over nccl on rank 0 of 2 on cuda:0" (as distributed::describe has it, which lives in
// libkiln_dist: the plugin links libkiln alone).
const char* op_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::Send:
      return "send";
    case CollectiveKind::Recv:
      return "recv";
    default:
      return "barrier";
  }
}

std::string call_text(const Collective& what, const std::string& where) {
  constexpr const char* operations[] = {"sum", "mean", "max", "min"};
  std::string detail;
  switch (what.kind) {
    case CollectiveKind::AllReduce:
    case CollectiveKind::ReduceScatter:
      detail = concat("(", operations[static_cast<std::size_t>(what.operation) & 3], ")");
      break;
    case CollectiveKind::Broadcast:
      detail = concat("(root ", what.peer, ")");
      break;
    case CollectiveKind::Send:
      detail = concat("(to ", what.peer, ")");
      break;
    case CollectiveKind::Recv:
      detail = concat("(from ", what.peer, ")");
      break;
    default:
      break;
  }
  return concat(op_name(what.kind), detail, " ", dtype_name(what.dtype), " ",
                what.shape.to_string(), " over nccl on ", where);
}

void* address(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer));
}

// What each rank tells the others before NCCL is set up for a GPU.
struct SetupRecord {
  std::int32_t version = 0;  // NCCL's version code; 0 where this rank has no NCCL
  std::int32_t unused = 0;
  std::uint8_t gpu[16] = {};  // the GPU's UUID
};
static_assert(sizeof(SetupRecord) == 24);

// Rank 0's unique id, and whether making it worked.
struct IdMessage {
  std::int32_t status = ncclSuccess;
  std::int32_t unused = 0;
  ncclUniqueId id{};
};

// Why the ranks cannot use NCCL together (the same on every rank), or empty.
std::string host_path_reason(const std::vector<SetupRecord>& ranks) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].version == 0) return concat("rank ", r, " has no NCCL");
    if (ranks[r].version != ranks[0].version) {
      return concat("the ranks load different NCCLs (rank 0: ", version_text(ranks[0].version),
                    ", rank ", r, ": ", version_text(ranks[r].version), ")");
    }
  }
  for (std::size_t a = 0; a < ranks.size(); ++a) {
    for (std::size_t b = a + 1; b < ranks.size(); ++b) {
      if (std::memcmp(ranks[a].gpu, ranks[b].gpu, sizeof ranks[a].gpu) == 0) {
        return concat("ranks ", a, " and ", b, " compute on the same GPU");
      }
    }
  }
  return {};
}

class NcclGroup final : public NcclTransport {
 public:
  // Rank group.rank()'s part of the communicator whose unique id is id, on runtime's GPU.
  NcclGroup(const Library& nccl, Runtime& runtime, const ProcessGroup& group,
            const ncclUniqueId& id)
      : nccl_(nccl),
        runtime_(runtime),
        timeout_(group.communicator().timeout()),
        where_(concat("rank ", group.rank(), " of ", group.size(),
                      " on cuda:", runtime.context.index())) {
    runtime_.context.make_current();
    const ncclResult_t status = nccl_.init_rank(&comm_, group.size(), id, group.rank());
    if (status != ncclSuccess) {
      fail<DistributedError>("ProcessGroup", "ncclCommInitRank for ", where_,
                             " failed: ", nccl_error(nccl_, nullptr, status));
    }
    try {
      watchdog_ = std::thread([this] { watch(); });
    } catch (...) {
      nccl_.abort(comm_);
      throw;
    }
  }

  // Waits (at most the group's timeout) for the calls in flight, then frees NCCL's resources
  // with ncclCommAbort, which does not wait for the other ranks.
  ~NcclGroup() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    cuCtxSetCurrent(runtime_.context.context());
    std::lock_guard lock(mutex_);
    if (comm_ != nullptr) nccl_.abort(comm_);
    for (CUevent event : free_events_) cuEventDestroy(event);
  }

  void all_reduce(const ProcessGroup& group, const Collective& what, CUdeviceptr in,
                  CUdeviceptr out, std::int64_t count, ReduceOperation combine) override {
    const ncclDataType_t type = nccl_type(what.dtype, "all_reduce");
    run(group, what, count > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.all_reduce(address(in), address(out), static_cast<std::size_t>(count), type,
                              nccl_operation(combine), comm, stream);
    });
  }

  void broadcast(const ProcessGroup& group, const Collective& what, CUdeviceptr in, CUdeviceptr out,
                 std::size_t bytes) override {
    run(group, what, bytes > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.broadcast(address(in), address(out), bytes, ncclUint8,
                             static_cast<int>(what.peer), comm, stream);
    });
  }

  void all_gather(const ProcessGroup& group, const Collective& what, CUdeviceptr in,
                  CUdeviceptr out, std::size_t bytes) override {
    run(group, what, bytes > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.all_gather(address(in), address(out), bytes, ncclUint8, comm, stream);
    });
  }

  void reduce_scatter(const ProcessGroup& group, const Collective& what, CUdeviceptr in,
                      CUdeviceptr out, std::int64_t count, ReduceOperation combine) override {
    const ncclDataType_t type = nccl_type(what.dtype, "reduce_scatter");
    run(group, what, count > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.reduce_scatter(address(in), address(out), static_cast<std::size_t>(count), type,
                                  nccl_operation(combine), comm, stream);
    });
  }

  void send(const ProcessGroup& group, const Collective& what, CUdeviceptr in, std::size_t bytes,
            int destination) override {
    run(group, what, bytes > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.send(address(in), bytes, ncclUint8, destination, comm, stream);
    });
  }

  void recv(const ProcessGroup& group, const Collective& what, CUdeviceptr out, std::size_t bytes,
            int source) override {
    run(group, what, bytes > 0, [&](ncclComm_t comm, CUstream stream) {
      return nccl_.recv(address(out), bytes, ncclUint8, source, comm, stream);
    });
  }

 private:
  // A call queued on the stream, and when it must have finished.
  struct Pending {
    CUevent event;
    Clock::time_point deadline;
    std::string op;    // "all_reduce"
    std::string call;  // "all_reduce(sum) f32 [4] over nccl on rank 0 of 2 on cuda:0"
  };

  // The check of what through the group's communicator, then (where data moves) enqueue(comm,
  // stream), NCCL's call, on the device's stream after everything queued before, followed by an
  // event the watchdog watches. Calls are serialised: every rank queues them in the order the
  // ranks agreed on.
  template <class Enqueue>
  void run(const ProcessGroup& group, Collective what, bool moves_data, Enqueue&& enqueue) {
    const std::string op = op_name(what.kind);
    what.transport = distributed::Transport::Nccl;
    std::lock_guard call(call_mutex_);
    throw_if_broken(group, op);
    group.communicator().check(what);
    if (!moves_data) return;
    // Not inside a kernel capture (its operands have no memory), and after every launch queued.
    KernelCapture::refuse_if_active();
    runtime_.context.make_current();
    const CUstream stream = runtime_.context.stream();
    const std::string text = call_text(what, where_);
    std::unique_lock lock(mutex_);
    if (!failure_.empty()) {
      const std::string failure = failure_;  // the watchdog aborted since the check
      lock.unlock();
      broken(group, op, failure);
    }
    CUevent event = nullptr;
    if (free_events_.empty()) {
      const CUresult made = cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
      if (made != CUDA_SUCCESS) {
        fail<ExecutionError>(op, "cuEventCreate for ", text, " failed: ", cuda_error(made));
      }
    } else {
      event = free_events_.back();
      free_events_.pop_back();
    }
    const ncclResult_t status = enqueue(comm_, stream);
    const CUresult recorded = status == ncclSuccess ? cuEventRecord(event, stream) : CUDA_SUCCESS;
    if (status != ncclSuccess || recorded != CUDA_SUCCESS) {
      cuEventDestroy(event);
      abort_locked(op,
                   status != ncclSuccess
                       ? concat("NCCL refused ", text, ": ", nccl_error(nccl_, comm_, status))
                       : concat("cuEventRecord after ", text, " failed: ", cuda_error(recorded)));
      const std::string failure = failure_;
      lock.unlock();
      group.communicator().set_broken(failure);
      throw DistributedError(failure);
    }
    pending_.push_back(Pending{event, Clock::now() + timeout_, op, text});
    lock.unlock();
    wake_.notify_one();
  }

  // DistributedError where the watchdog (or a refused call) has aborted the communicator; the
  // group is broken too.
  void throw_if_broken(const ProcessGroup& group, const std::string& op) {
    std::string failure;
    {
      std::lock_guard lock(mutex_);
      failure = failure_;
    }
    if (!failure.empty()) broken(group, op, failure);
  }

  [[noreturn]] static void broken(const ProcessGroup& group, const std::string& op,
                                  const std::string& failure) {
    group.communicator().set_broken(failure);
    fail<DistributedError>(op, "the process group is broken since: ", failure);
  }

  // Ends the communicator after what went wrong in op: its kernels on the device stop, and the
  // next read on the device throws, as does the next call of the group (throw_if_broken).
  // mutex_ held.
  void abort_locked(const std::string& op, const std::string& what) noexcept {
    if (!failure_.empty()) return;
    if (comm_ != nullptr) nccl_.abort(comm_);
    comm_ = nullptr;
    for (const Pending& pending : pending_) cuEventDestroy(pending.event);
    pending_.clear();
    try {
      failure_ = concat("[", op, "] ", what);
      runtime_.context.report_failure(op.c_str(), what);
    } catch (...) {
      // Out of memory for a message: the communicator is gone all the same.
      if (failure_.empty()) failure_ = "NCCL's communicator was aborted";
    }
  }

  // The watchdog: follows the oldest call in flight until its event completes, aborting the
  // communicator on a device error, an error NCCL reports, or the group's timeout. Returns once
  // stopping and nothing is in flight.
  void watch() noexcept {
    cuCtxSetCurrent(runtime_.context.context());
    std::unique_lock lock(mutex_);
    for (;;) {
      if (pending_.empty()) {
        if (stopping_) return;
        wake_.wait(lock);
        continue;
      }
      const Pending& oldest = pending_.front();
      const CUresult done = cuEventQuery(oldest.event);
      if (done == CUDA_SUCCESS) {
        free_events_.push_back(oldest.event);
        pending_.pop_front();
        continue;
      }
      std::string failure;
      ncclResult_t reported = ncclSuccess;
      if (done != CUDA_ERROR_NOT_READY) {
        failure = concat(oldest.call, " failed on the device: ", cuda_error(done));
      } else if (const ncclResult_t asked = nccl_.async_error(comm_, &reported);
                 asked != ncclSuccess || (reported != ncclSuccess && reported != ncclInProgress)) {
        const ncclResult_t status = asked != ncclSuccess ? asked : reported;
        failure = concat(oldest.call, ": NCCL reported ", nccl_error(nccl_, comm_, status));
      } else if (Clock::now() > oldest.deadline) {
        failure = concat(oldest.call, " did not finish within the group's timeout of ",
                         static_cast<double>(timeout_.count()) / 1000.0,
                         " s (a rank stopped making collectives, or made others)");
      }
      if (failure.empty()) {
        wake_.wait_for(lock, kPoll);
        continue;
      }
      const std::string op = oldest.op;  // abort_locked empties pending_
      abort_locked(op, failure);
    }
  }

  const Library& nccl_;
  Runtime& runtime_;
  const std::chrono::milliseconds timeout_;
  const std::string where_;  // "rank 1 of 2 on cuda:1"
  std::thread watchdog_;
  std::mutex call_mutex_;  // one call at a time, from check to enqueue
  // The communicator's calls, and everything below.
  std::mutex mutex_;
  std::condition_variable wake_;
  ncclComm_t comm_ = nullptr;  // null once aborted
  std::deque<Pending> pending_;
  std::vector<CUevent> free_events_;
  std::string failure_;  // "[op] why the communicator was aborted"
  bool stopping_ = false;
};

// What a group keeps per GPU: NCCL, or null for the host path.
struct Choice {
  std::shared_ptr<NcclGroup> nccl;
};

std::string key_of(int index) { return "nccl cuda:" + std::to_string(index); }

// The group's setup for runtime's GPU (nccl_transport.h, steps 1-3), on every rank at once.
std::shared_ptr<void> choose(Runtime& runtime, const ProcessGroup& group) {
  const Loaded& loaded = load();
  SetupRecord mine;
  mine.version = loaded.ok ? loaded.library.version : 0;
  CUuuid uuid{};
  KILN_CUDA_CHECK("ProcessGroup", cuDeviceGetUuid(&uuid, runtime.context.device()));
  static_assert(sizeof uuid.bytes == sizeof mine.gpu);
  std::memcpy(mine.gpu, uuid.bytes, sizeof mine.gpu);
  std::vector<SetupRecord> ranks(static_cast<std::size_t>(group.size()));
  group.communicator().all_gather(Collective{CollectiveKind::AllGather, DType::U8,
                                             Shape{static_cast<std::int64_t>(sizeof(SetupRecord))}},
                                  std::as_bytes(std::span(&mine, 1)),
                                  std::as_writable_bytes(std::span(ranks)));
  auto choice = std::make_shared<Choice>();
  if (!host_path_reason(ranks).empty()) return choice;
  IdMessage message;
  if (group.rank() == 0) message.status = loaded.library.get_unique_id(&message.id);
  group.communicator().broadcast(
      Collective{CollectiveKind::Broadcast, DType::U8,
                 Shape{static_cast<std::int64_t>(sizeof(IdMessage))}, ReduceOperation::Sum, 0},
      std::as_writable_bytes(std::span(&message, 1)), 0);
  if (message.status != ncclSuccess) {
    fail<DistributedError>("ProcessGroup", "rank 0 could not make NCCL's unique id: ",
                           loaded.library.error_string(static_cast<ncclResult_t>(message.status)));
  }
  choice->nccl = std::make_shared<NcclGroup>(loaded.library, runtime, group, message.id);
  return choice;
}

}  // namespace

std::shared_ptr<NcclTransport> nccl_transport(Runtime& runtime, const ProcessGroup& group) {
  const std::shared_ptr<void> kept = group.communicator().attachment(
      key_of(runtime.context.index()), [&] { return choose(runtime, group); });
  return static_cast<Choice*>(kept.get())->nccl;
}

std::shared_ptr<NcclTransport> made_nccl_transport(Runtime& runtime, const ProcessGroup& group) {
  const std::shared_ptr<void> kept =
      group.communicator().attachment(key_of(runtime.context.index()), {});
  return kept ? static_cast<Choice*>(kept.get())->nccl : nullptr;
}

std::string nccl_transport_name(distributed::Communicator& group, int index) {
  const std::shared_ptr<void> kept = group.attachment(key_of(index), {});
  const bool nccl = kept ? static_cast<Choice*>(kept.get())->nccl != nullptr : load().ok;
  return nccl ? "nccl" : "";
}

std::string nccl_status(bool* loaded) {
  const Loaded& nccl = load();
  *loaded = nccl.ok;
  if (!nccl.ok) return nccl.reason;
  return concat("NCCL ", version_text(nccl.library.version), " (", nccl.library.path, ")");
}

}  // namespace kiln::cuda

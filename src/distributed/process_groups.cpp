// The ProcessGroup factories: a single process, the ranks of one process (threads), and the
// environment's world (from_env), with Gloo when kiln was built with it.
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <exception>
#include <thread>

#include "distributed/attachments.h"
#include "kiln/detail/format.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "runtime/cuda_plugin.h"

#ifdef KILN_HAVE_GLOO
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include "distributed/gloo_communicator.h"
#endif

namespace kiln {

using kiln::detail::concat;
using kiln::detail::fail;

namespace distributed {

bool available() noexcept {
#ifdef KILN_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

std::string_view collective_name(CollectiveKind kind) noexcept {
  constexpr std::string_view names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                        "send",       "recv",      "barrier"};
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(names) ? names[i] : "collective";
}

std::string describe(const Collective& what) {
  constexpr std::string_view operations[] = {"sum", "mean", "max", "min"};
  std::string text(collective_name(what.kind));
  switch (what.kind) {
    case CollectiveKind::AllReduce:
    case CollectiveKind::ReduceScatter:
      text += concat("(", operations[static_cast<std::size_t>(what.operation) & 3], ")");
      break;
    case CollectiveKind::Broadcast:
      text += concat("(root ", what.peer, ")");
      break;
    case CollectiveKind::Send:
      text += concat("(to ", what.peer, ")");
      break;
    case CollectiveKind::Recv:
      text += concat("(from ", what.peer, ")");
      break;
    default:
      break;
  }
  if (what.kind == CollectiveKind::Barrier) return text;
  text = concat(text, " ", dtype_name(what.dtype), " ", what.shape.to_string());
  return what.transport == Transport::Nccl ? text + " over nccl" : text;
}

namespace {

// One rank alone: nothing to exchange, nobody to disagree with; broken only by a failure of a
// device's transport (set_broken).
class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce(const Collective& what, std::span<std::byte>, DType, ReduceOperation) override {
    check(what);
  }
  void broadcast(const Collective& what, std::span<std::byte>, int) override { check(what); }
  void all_gather(const Collective& what, std::span<const std::byte> in,
                  std::span<std::byte> out) override {
    check(what);
    std::copy(in.begin(), in.end(), out.begin());
  }
  void reduce_scatter(const Collective& what, std::span<const std::byte> in,
                      std::span<std::byte> out, DType, ReduceOperation) override {
    check(what);
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(out.size()), out.begin());
  }
  void send(const Collective& what, std::span<const std::byte>, int) override { check(what); }
  void recv(const Collective& what, std::span<std::byte>, int) override { check(what); }
  void barrier() override { check(Collective{}); }
  void check(const Collective& what) override {
    {
      std::lock_guard lock(mutex_);
      if (!broken_.empty()) {
        fail<DistributedError>(collective_name(what.kind),
                               "the process group is broken since: ", broken_);
      }
    }
    if (what.kind == CollectiveKind::Send || what.kind == CollectiveKind::Recv) {
      fail<InvalidArgument>(collective_name(what.kind), "a group of one process has no other rank");
    }
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void set_broken(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  std::shared_ptr<void> attachment(const std::string& key,
                                   const std::function<std::shared_ptr<void>()>& make) override {
    return attachments_.get(key, make);
  }

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::string broken_;
  Attachments attachments_;
};

constexpr const char* kFromEnv = "ProcessGroup::from_env";

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// The integer in variable name, when set; InvalidArgument when it is not one.
std::optional<long long> integer_variable(const char* name) {
  const char* text = variable(name);
  if (text == nullptr) return std::nullopt;
  long long value = 0;
  const char* end = text + std::strlen(text);
  const auto [at, error] = std::from_chars(text, end, value);
  if (error != std::errc() || at != end) {
    fail<InvalidArgument>(kFromEnv, name, " is '", text, "', not an integer");
  }
  return value;
}

// KILN_name, or OpenMPI's OMPI_COMM_WORLD_name; both set and different is an error.
std::optional<long long> world_variable(const char* kiln_name, const char* mpi_name) {
  const auto ours = integer_variable(kiln_name);
  const auto mpi = integer_variable(mpi_name);
  if (ours && mpi && *ours != *mpi) {
    fail<InvalidArgument>(kFromEnv, kiln_name, "=", *ours, " contradicts ", mpi_name, "=", *mpi);
  }
  return ours ? ours : mpi;
}

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  const char* text = variable("KILN_DISTRIBUTED_TIMEOUT");
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0) || seconds > 1e9) {
    fail<InvalidArgument>(kFromEnv, "KILN_DISTRIBUTED_TIMEOUT is '", text,
                          "', not a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0 + 0.5));
}

void check_timeout(const DistributedOptions& options, const char* op) {
  if (options.timeout.count() <= 0) {
    fail<InvalidArgument>(op, "the timeout must be positive, got ", options.timeout.count(), " ms");
  }
}

#ifndef KILN_HAVE_GLOO
[[noreturn]] void no_gloo(const char* op, long long size) {
  fail<UnsupportedOperation>(op, "a group of ", size,
                             " ranks needs Gloo, and kiln was built without it (Debian: "
                             "apt-get install libgloo-dev, then configure kiln again)");
}
#endif

// The groups of `size` ranks in this process, rank r computing on device_of(r).
std::vector<ProcessGroup> thread_groups(int size, const std::function<Device(int)>& device_of,
                                        const DistributedOptions& options, const char* op) {
  if (size < 1 || size > 64) {
    fail<InvalidArgument>(op, "the number of ranks must be between 1 and 64, got ", size);
  }
  check_timeout(options, op);
  if (size == 1) {
    return {ProcessGroup(std::make_shared<SingleCommunicator>(options.timeout), device_of(0))};
  }
#ifdef KILN_HAVE_GLOO
  // The ranks connect to one another at once: each waits in connect for the others.
  gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<Communicator>> communicators(static_cast<std::size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      try {
        communicators[static_cast<std::size_t>(r)] =
            connect_gloo(store, r, size, "127.0.0.1", options.timeout);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  std::vector<ProcessGroup> groups;
  for (int r = 0; r < size; ++r) {
    groups.emplace_back(std::move(communicators[static_cast<std::size_t>(r)]), device_of(r));
  }
  return groups;
#else
  (void)device_of;
  no_gloo(op, size);
#endif
}

}  // namespace
}  // namespace distributed

ProcessGroup ProcessGroup::single(Device device) {
  return ProcessGroup(
      std::make_shared<distributed::SingleCommunicator>(DistributedOptions{}.timeout), device);
}

std::string ProcessGroup::backend_name() const {
  // A cuda device's collectives may go over NCCL, which the plugin knows about.
  if (device_.kind() == DeviceKind::Cuda) {
    if (const CudaPluginApi* api = cuda_plugin(nullptr)) {
      std::string transport = api->collective_transport(*communicator_, device_.index());
      if (!transport.empty()) return transport;
    }
  }
  return communicator_->name();
}

ProcessGroup ProcessGroup::from_env(Device device, DistributedOptions options) {
  using namespace distributed;
  const auto size = world_variable("KILN_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  const auto rank = world_variable("KILN_RANK", "OMPI_COMM_WORLD_RANK");
  if (!size || *size == 1) {
    if (rank && *rank != 0) {
      fail<InvalidArgument>(kFromEnv, "rank ", *rank,
                            " is set without a world size above 1 "
                            "(KILN_WORLD_SIZE or OMPI_COMM_WORLD_SIZE)");
    }
    options.timeout = timeout_from_env(options.timeout);
    check_timeout(options, kFromEnv);
    return ProcessGroup(std::make_shared<SingleCommunicator>(options.timeout), device);
  }
  if (*size < 1 || *size > (1 << 20)) {
    fail<InvalidArgument>(kFromEnv, "the world size ", *size, " is not between 1 and 2^20");
  }
  if (!rank) fail<InvalidArgument>(kFromEnv, "KILN_RANK is not set for a world of ", *size);
  if (*rank < 0 || *rank >= *size) {
    fail<InvalidArgument>(kFromEnv, "rank ", *rank, " is not in [0, ", *size, ")");
  }
  options.timeout = timeout_from_env(options.timeout);
  check_timeout(options, kFromEnv);
#ifdef KILN_HAVE_GLOO
  const char* store_path = variable("KILN_STORE");
  if (store_path == nullptr) {
    fail<InvalidArgument>(kFromEnv, "KILN_STORE is not set: the ", *size,
                          " ranks meet in a directory they can all reach (`kiln launch` makes "
                          "one; with mpirun pass -x KILN_STORE=DIR)");
  }
  // Under mpirun the ranks may be on several hosts: each listens on its host's name.
  std::string hostname = "127.0.0.1";
  if (const char* chosen = variable("KILN_GLOO_HOSTNAME")) {
    hostname = chosen;
  } else if (!integer_variable("KILN_WORLD_SIZE")) {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') hostname = name;
  }
  // Each group a process makes from the environment meets under a prefix of its own; every
  // rank makes its groups in the same order.
  static std::atomic<int> groups_made{0};
  const std::string prefix = "kiln-group-" + std::to_string(groups_made.fetch_add(1));
  gloo::rendezvous::FileStore files(store_path);
  gloo::rendezvous::PrefixStore store(prefix, files);
  return ProcessGroup(connect_gloo(store, static_cast<int>(*rank), static_cast<int>(*size),
                                   hostname, options.timeout),
                      device);
#else
  (void)device;
  no_gloo(kFromEnv, *size);
#endif
}

std::vector<ProcessGroup> ProcessGroup::threads(int size, Device device,
                                                DistributedOptions options) {
  return distributed::thread_groups(
      size, [&](int) { return device; }, options, "ProcessGroup::threads");
}

std::vector<ProcessGroup> ProcessGroup::threads(const std::vector<Device>& devices,
                                                DistributedOptions options) {
  return distributed::thread_groups(
      static_cast<int>(std::min<std::size_t>(devices.size(), 1 << 20)),
      [&](int r) { return devices[static_cast<std::size_t>(r)]; }, options,
      "ProcessGroup::threads");
}

}  // namespace kiln

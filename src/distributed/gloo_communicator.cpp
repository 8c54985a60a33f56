// Gloo's TCP transport behind a ProcessGroup. Before each call the ranks that take part exchange
// a fixed-size signature (sequence number, collective, dtype, shape, reduction, root or peer,
// transport) over one slot of each pair, in order, and compare them: a mismatch is a
// DistributedError on every rank that sees it, and a rank that sends nothing within the timeout
// is named. Only then do Gloo's algorithms move the data (allreduce, broadcast, allgather; a ring
// over Gloo's unbound buffers for reduce-scatter, which this Gloo lacks; unbound buffers for send
// and recv), or, for check, the caller (the CUDA backend over NCCL).
#include "distributed/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "distributed/attachments.h"
#include "distributed/reduction.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::distributed {
namespace {

using kiln::detail::concat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slots of kiln's own messages: prefix 'k', above every prefix Gloo's algorithms use.
constexpr std::uint64_t kSignatureSlot = 0x6b00000000000001;
constexpr std::uint64_t kTransferSlot = 0x6b00000000000002;
constexpr std::uint64_t kScatterSlot = 0x6b00000000000003;

constexpr std::size_t kSignatureDims = 12;

// What one rank says it is calling; compared field by field.
struct Signature {
  std::uint64_t sequence = 0;
  std::int64_t peer = 0;
  std::uint64_t shape_hash = 0;
  std::int64_t dims[kSignatureDims] = {};
  std::uint32_t sender = 0;
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::uint8_t operation = 0;
  std::uint8_t rank = 0;  // of the shape (at most 255 dims are told apart; more hash the same)
  std::uint8_t transport = 0;
  std::uint8_t unused[7] = {};
};
static_assert(sizeof(Signature) == 136);

std::uint64_t hash_dims(const Shape& shape) {
  std::uint64_t hash = 14695981039346656037ull;
  for (std::int64_t d : shape.dims()) {
    hash ^= static_cast<std::uint64_t>(d);
    hash *= 1099511628211ull;
  }
  return hash;
}

Signature signature_of(const Collective& what, std::uint64_t sequence, int sender) {
  Signature s;
  s.sequence = sequence;
  s.peer = what.peer;
  s.shape_hash = hash_dims(what.shape);
  for (std::size_t d = 0; d < std::min(kSignatureDims, what.shape.rank()); ++d) {
    s.dims[d] = what.shape[d];
  }
  s.sender = static_cast<std::uint32_t>(sender);
  s.kind = static_cast<std::uint8_t>(what.kind);
  s.dtype = static_cast<std::uint8_t>(what.dtype);
  s.operation = static_cast<std::uint8_t>(what.operation);
  s.rank = static_cast<std::uint8_t>(std::min<std::size_t>(what.shape.rank(), 255));
  s.transport = static_cast<std::uint8_t>(what.transport);
  return s;
}

// A signature as text: "#7 all_reduce(sum) f32 [4]" (valid enums only: a peer's bytes are
// checked before they are printed).
std::string text_of(const Signature& s) {
  const bool valid = s.kind <= static_cast<std::uint8_t>(CollectiveKind::Barrier) &&
                     s.dtype <= static_cast<std::uint8_t>(DType::QFloat) &&
                     s.operation <= static_cast<std::uint8_t>(ReduceOperation::Min) &&
                     s.transport <= static_cast<std::uint8_t>(Transport::Nccl);
  if (!valid) return concat("#", s.sequence, " (an unreadable signature)");
  Collective what;
  what.kind = static_cast<CollectiveKind>(s.kind);
  what.dtype = static_cast<DType>(s.dtype);
  what.operation = static_cast<ReduceOperation>(s.operation);
  what.peer = s.peer;
  what.transport = static_cast<Transport>(s.transport);
  const std::size_t shown = std::min<std::size_t>(s.rank, kSignatureDims);
  what.shape = Shape(std::span<const std::int64_t>(s.dims, shown));
  std::string text = concat("#", s.sequence, " ", describe(what));
  if (s.rank > kSignatureDims) text += concat(" (the first ", shown, " of ", +s.rank, " dims)");
  return text;
}

bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter;
}

// Whether theirs (from rank `from`) is the call that matches mine (made on rank `me`).
bool matches(const Signature& mine, const Signature& theirs, int me, int from) {
  if (theirs.sender != static_cast<std::uint32_t>(from) || theirs.sequence != mine.sequence ||
      theirs.dtype != mine.dtype || theirs.rank != mine.rank ||
      theirs.transport != mine.transport || theirs.shape_hash != mine.shape_hash ||
      std::memcmp(theirs.dims, mine.dims, sizeof mine.dims) != 0) {
    return false;
  }
  const auto kind = static_cast<CollectiveKind>(mine.kind);
  if (kind == CollectiveKind::Send || kind == CollectiveKind::Recv) {
    const auto other = kind == CollectiveKind::Send ? CollectiveKind::Recv : CollectiveKind::Send;
    return theirs.kind == static_cast<std::uint8_t>(other) && theirs.peer == me;
  }
  return theirs.kind == mine.kind && theirs.peer == mine.peer &&
         (!reduces(kind) || theirs.operation == mine.operation);
}

milliseconds remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(1));
}

std::string seconds_text(milliseconds timeout) {
  return concat(static_cast<double>(timeout.count()) / 1000.0, " s");
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return text;
}

template <class T>
T* writable(const T* p) {
  return const_cast<T*>(p);  // Gloo's buffers are not const; a send only reads them
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, milliseconds timeout)
      : context_(std::move(context)),
        timeout_(timeout),
        transfers_(static_cast<std::size_t>(context_->size), 0) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string name() const override { return "gloo"; }

  void all_reduce(const Collective& what, std::span<std::byte> data, DType dtype,
                  ReduceOperation operation) override {
    const ReduceFunction reduce = reduce_function(dtype, operation, "all_reduce");
    const std::size_t element = dtype_size(dtype);
    collective(what, [&] {
      if (data.empty()) return;
      gloo::AllreduceOptions options(context_);
      set_output(options, data.data(), data.size(), element);
      options.setReduceFunction(reduce);
      options.setTimeout(timeout_);
      gloo::allreduce(options);
    });
  }

  void broadcast(const Collective& what, std::span<std::byte> data, int root) override {
    collective(what, [&] {
      if (data.empty()) return;
      gloo::BroadcastOptions options(context_);
      options.setOutput(reinterpret_cast<std::uint8_t*>(data.data()), data.size());
      options.setRoot(root);
      options.setTimeout(timeout_);
      gloo::broadcast(options);
    });
  }

  void all_gather(const Collective& what, std::span<const std::byte> in,
                  std::span<std::byte> out) override {
    collective(what, [&] {
      if (in.empty()) return;
      gloo::AllgatherOptions options(context_);
      options.setInput(writable(reinterpret_cast<const std::uint8_t*>(in.data())), in.size());
      options.setOutput(reinterpret_cast<std::uint8_t*>(out.data()), out.size());
      options.setTimeout(timeout_);
      gloo::allgather(options);
    });
  }

  void reduce_scatter(const Collective& what, std::span<const std::byte> in,
                      std::span<std::byte> out, DType dtype, ReduceOperation operation) override {
    const ReduceFunction reduce = reduce_function(dtype, operation, "reduce_scatter");
    collective(what, [&] {
      if (!out.empty()) ring_reduce_scatter(in, out, reduce, dtype_size(dtype));
    });
  }

  void send(const Collective& what, std::span<const std::byte> data, int destination) override {
    transfer(what, destination, [&] {
      if (data.empty()) return;
      auto buffer = context_->createUnboundBuffer(writable(data.data()), data.size());
      buffer->send(destination, kTransferSlot);
      buffer->waitSend(timeout_);
    });
  }

  void recv(const Collective& what, std::span<std::byte> data, int source) override {
    transfer(what, source, [&] {
      if (data.empty()) return;
      auto buffer = context_->createUnboundBuffer(data.data(), data.size());
      buffer->recv(source, kTransferSlot);
      buffer->waitRecv(timeout_);
    });
  }

  void barrier() override {
    // The signatures' exchange is itself a barrier: each rank waits for every other's.
    collective(Collective{}, [] {});
  }

  void check(const Collective& what) override {
    if (what.kind == CollectiveKind::Send || what.kind == CollectiveKind::Recv) {
      transfer(what, static_cast<int>(what.peer), [] {});
    } else {
      collective(what, [] {});
    }
  }

  milliseconds timeout() const override { return timeout_; }

  void set_broken(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = reason;
  }

  std::shared_ptr<void> attachment(const std::string& key,
                                   const std::function<std::shared_ptr<void>()>& make) override {
    return attachments_.get(key, make);
  }

 private:
  // The all-reduce over byte buffers: Gloo only needs the element size (for its segments) and
  // the reduce function.
  static void set_output(gloo::AllreduceOptions& options, std::byte* data, std::size_t bytes,
                         std::size_t element) {
    const std::size_t count = bytes / element;
    switch (element) {
      case 8:
        options.setOutput(reinterpret_cast<std::uint64_t*>(data), count);
        break;
      case 4:
        options.setOutput(reinterpret_cast<std::uint32_t*>(data), count);
        break;
      case 2:
        options.setOutput(reinterpret_cast<std::uint16_t*>(data), count);
        break;
      default:
        options.setOutput(reinterpret_cast<std::uint8_t*>(data), count);
    }
  }

  // Ring reduce-scatter: in step s, rank r passes its running sum of chunk (r - s - 1) to rank
  // r + 1 and adds what rank r - 1 passes it to chunk (r - s - 2); after size - 1 steps chunk r
  // holds every rank's contribution.
  void ring_reduce_scatter(std::span<const std::byte> in, std::span<std::byte> out,
                           ReduceFunction reduce, std::size_t element) {
    const int n = size();
    const int r = rank();
    const std::size_t chunk = out.size();
    std::vector<std::byte> sums(in.begin(), in.end());
    std::vector<std::byte> incoming(chunk);
    auto sums_buffer = context_->createUnboundBuffer(sums.data(), sums.size());
    auto incoming_buffer = context_->createUnboundBuffer(incoming.data(), incoming.size());
    const int right = (r + 1) % n;
    const int left = (r + n - 1) % n;
    auto chunk_at = [&](int back) { return static_cast<std::size_t>(((r - back) % n + n) % n); };
    for (int s = 0; s + 1 < n; ++s) {
      incoming_buffer->recv(left, kScatterSlot);
      sums_buffer->send(right, kScatterSlot, chunk_at(s + 1) * chunk, chunk);
      incoming_buffer->waitRecv(timeout_);
      sums_buffer->waitSend(timeout_);
      std::byte* target = sums.data() + chunk_at(s + 2) * chunk;
      reduce(target, target, incoming.data(), chunk / element);
    }
    std::memcpy(out.data(), sums.data() + static_cast<std::size_t>(r) * chunk, chunk);
  }

  // A collective of every rank, numbered by the group's count of collectives.
  template <class Body>
  void collective(const Collective& what, Body&& body) {
    std::vector<int> peers;
    for (int p = 0; p < size(); ++p) {
      if (p != rank()) peers.push_back(p);
    }
    call(what, peers, "collective", collectives_, body);
  }

  // A send or recv between this rank and peer, numbered by the pair's count of transfers.
  template <class Body>
  void transfer(const Collective& what, int peer, Body&& body) {
    call(what, {peer}, "transfer", transfers_[static_cast<std::size_t>(peer)], body);
  }

  template <class Body>
  void call(const Collective& what, const std::vector<int>& peers, const char* counted,
            std::uint64_t& counter, Body& body) {
    const std::string op(collective_name(what.kind));
    std::lock_guard lock(mutex_);
    if (!broken_.empty()) {
      kiln::detail::fail<DistributedError>(op, "the process group is broken since: ", broken_);
    }
    const std::uint64_t sequence = counter++;
    try {
      agree(op, signature_of(what, sequence, rank()), peers, counted);
      if (what.kind != CollectiveKind::Barrier) body();
    } catch (const DistributedError& e) {
      broken_ = e.what();
      throw;
    } catch (const std::exception& e) {  // Gloo's: a timeout or a lost connection mid-transfer
      broken_ = concat("[", op, "] ", counted, " #", sequence, " (", describe(what),
                       ") failed on rank ", rank(), ": ", e.what());
      throw DistributedError(broken_);
    }
  }

  // Exchanges signatures with peers and compares them (DistributedError naming the ranks).
  void agree(const std::string& op, const Signature& mine, const std::vector<int>& peers,
             const char* counted) {
    std::vector<Signature> theirs(peers.size());
    auto out = context_->createUnboundBuffer(writable(&mine), sizeof mine);
    auto in = context_->createUnboundBuffer(theirs.data(), theirs.size() * sizeof(Signature));
    std::vector<bool> answered(peers.size(), false);
    int lost = -1;  // a peer whose connection failed as the exchange was set up
    const auto deadline = Clock::now() + timeout_;
    try {
      for (std::size_t i = 0; i < peers.size(); ++i) {
        lost = peers[i];
        in->recv(peers[i], kSignatureSlot, i * sizeof(Signature), sizeof(Signature));
        out->send(peers[i], kSignatureSlot);
      }
      lost = -1;
      for (std::size_t k = 0; k < peers.size(); ++k) {
        int source = -1;
        in->waitRecv(&source, remaining(deadline));
        const auto at = std::find(peers.begin(), peers.end(), source);
        if (at != peers.end()) answered[static_cast<std::size_t>(at - peers.begin())] = true;
      }
      for (std::size_t k = 0; k < peers.size(); ++k) out->waitSend(remaining(deadline));
    } catch (const std::exception& e) {
      std::vector<int> silent;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (lost < 0 ? !answered[i] : peers[i] == lost) silent.push_back(peers[i]);
      }
      const std::string who = silent.empty() ? std::string("a rank") : rank_list(silent);
      kiln::detail::fail<DistributedError>(op, counted, " ", text_of(mine), " on rank ", rank(),
                                           ": ", who, " did not answer (waited up to ",
                                           seconds_text(timeout_), "): ", e.what());
    }
    bool agreed = true;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      agreed = agreed && matches(mine, theirs[i], rank(), peers[i]);
    }
    if (agreed) return;
    // Every rank lists the same calls in rank order, so each tells the same story.
    std::vector<std::pair<int, const Signature*>> calls{{rank(), &mine}};
    for (std::size_t i = 0; i < peers.size(); ++i) calls.emplace_back(peers[i], &theirs[i]);
    std::sort(calls.begin(), calls.end());
    std::string list;
    for (const auto& [who, s] : calls) {
      list += concat(list.empty() ? "" : "; ", "rank ", who, ": ", text_of(*s));
    }
    kiln::detail::fail<DistributedError>(op, "the ranks called different ", counted, "s: ", list);
  }

  std::mutex mutex_;
  std::shared_ptr<gloo::Context> context_;
  milliseconds timeout_;
  std::uint64_t collectives_ = 0;
  std::vector<std::uint64_t> transfers_;  // per peer
  std::string broken_;                    // why the group is unusable, once it is
  // Last: destroyed first, while the connections still stand.
  Attachments attachments_;
};

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that has exited would end this rank
// with SIGPIPE instead of the DistributedError the write's EPIPE becomes. Ignore the signal, as
// Python (and so torch.distributed) does, unless the program installed a handler of its own.
void ignore_broken_pipes() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

}  // namespace

std::shared_ptr<Communicator> connect_gloo(gloo::rendezvous::Store& store, int rank, int size,
                                           const std::string& hostname, milliseconds timeout) {
  ignore_broken_pipes();
  try {
    gloo::transport::tcp::attr attr(hostname.c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    return std::make_shared<GlooCommunicator>(std::move(context), timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    kiln::detail::fail<DistributedError>("ProcessGroup", "rank ", rank, " of ", size,
                                         " could not connect to the others (listening on ",
                                         hostname, ", waiting up to ", seconds_text(timeout),
                                         "): ", e.what());
  }
}

}  // namespace kiln::distributed

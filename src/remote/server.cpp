#include "remote/server.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <mutex>
#include <thread>

#include "contract/contract.h"
#include "remote/connection.h"
#include "remote/session.h"
#include "runtime/registry.h"

namespace kiln::remote {

struct Server::State {
  ServerOptions options;
  Backend* backend = nullptr;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  int listening = -1;  // the acceptor's descriptor, for stop() on another thread
  std::uint16_t port = 0;

  // The connections of the sessions running now, for stop() to end them. A session's thread is
  // detached and holds the State: stop() waits for `open` to reach 0 instead of joining, so a
  // session that ends while the server keeps serving leaves no thread to join.
  std::mutex mutex;
  std::condition_variable all_ended;
  std::list<std::shared_ptr<Connection>> sessions;  // guarded by mutex
  std::atomic<int> open{0};
  std::atomic<std::uint64_t> ended{0};
  std::atomic<std::uint64_t> next_session{1};
  std::atomic<bool> stopping{false};
  bool stop_requested = false;  // guarded by mutex
  std::thread runner;

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  void serve(Connection& connection, std::uint64_t number);
};

namespace {

std::string describe_totals(const SessionTotals& t) {
  return kiln::detail::concat(t.ops, " ops (", t.failed_ops, " failed), ", t.blocks_run,
                              " blocks run, ", t.uploads, " uploads (", t.upload_bytes, " bytes, ",
                              t.cache_hits, " cache hits), ", t.reads, " reads (", t.read_bytes,
                              " bytes)");
}

// Sends a Refused frame and gives up quietly if the peer is gone already.
void refuse(Connection& connection, ErrorCode code, const std::string& message) {
  try {
    connection.send(encode_frame(
        FrameKind::Refused, [&](ir::wire::Writer& out) { write_refused(out, code, message); }));
  } catch (const std::exception&) {
  }
}

}  // namespace

void Server::State::serve(Connection& connection, std::uint64_t number) {
  const auto began = std::chrono::steady_clock::now();
  const std::string peer = connection.peer();
  std::string ending = "client closed";
  FrameBody body;
  std::unique_ptr<Session> session;
  try {
    // The handshake: the only frame read before the token is checked, and a small one.
    const FrameHeader header = connection.receive(
        body, kMaxHelloBytes, std::chrono::steady_clock::now() + options.handshake_timeout);
    if (header.kind != FrameKind::Hello)
      throw ProtocolError("[remote] the first frame is not a hello");
    const Hello hello = read_hello(body);
    if (hello.version != kProtocolVersion) {
      throw ProtocolError(kiln::detail::concat("[remote] the client speaks protocol version ",
                                               hello.version, ", this server ", kProtocolVersion));
    }
    if (hello.contract != kBackendContractHash) {
      throw ProtocolError("[remote] the client was built against op contract " +
                          contract_name(hello.contract) + ", this server has " +
                          contract_name(kBackendContractHash));
    }
    if (!same_token(options.token, hello.token)) {
      refuse(connection, ErrorCode::AuthenticationFailed,
             "[remote] the server refused the token (wrong or missing)");
      ending = "refused: wrong token";
      throw SessionEnded("");
    }
    Welcome welcome;
    welcome.backend_name = backend->name();
    welcome.settings = backend->default_settings();
    for (std::size_t d = 0; d < kDTypeCount; ++d) {
      const DTypeUsageSet usage = backend->dtype_usage(static_cast<DType>(d));
      std::uint8_t bits = 0;
      for (DTypeUsage u : {DTypeUsage::Storage, DTypeUsage::Arithmetic, DTypeUsage::Accelerated})
        if (usage.contains(u)) bits |= static_cast<std::uint8_t>(u);
      welcome.usage[d] = bits;
    }
    welcome.limits = options.limits;
    connection.send(encode_frame(FrameKind::Welcome,
                                 [&](ir::wire::Writer& out) { write_welcome(out, welcome); }));

    session = std::make_unique<Session>(*backend, options.limits, connection);
    for (;;) {
      const FrameHeader frame = connection.receive(body, options.limits.max_frame_bytes);
      session->handle(frame.kind, body);
    }
  } catch (const SessionEnded& e) {
    if (e.what()[0] != '\0') {
      ending = std::string("ended: ") + e.what();
      refuse(connection, ErrorCode::ProtocolError, e.what());
    }
  } catch (const ProtocolError& e) {
    ending = std::string("bad frame: ") + e.what();
    refuse(connection, ErrorCode::ProtocolError, e.what());
  } catch (const asio::system_error& e) {
    if (e.code() == asio::error::timed_out) {
      ending = "no hello within the handshake timeout";
      refuse(connection, ErrorCode::ProtocolError,
             "[remote] no hello within the handshake timeout");
    } else if (e.code() != asio::error::eof) {
      ending = std::string("connection lost: ") + e.what();
    }
    if (stopping) ending = "server stopping";
  } catch (const std::exception& e) {
    ending = std::string("error: ") + e.what();
    refuse(connection, ErrorCode::Error, e.what());
  }
  const SessionTotals totals = session ? session->totals() : SessionTotals{};
  session.reset();  // its values are freed before the line says so
  connection.shutdown();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  char duration[32];
  std::snprintf(duration, sizeof(duration), "%.3f s", seconds);
  log(kiln::detail::concat("kiln serve: session ", number, " from ", peer, ", ", duration, ": ",
                           describe_totals(totals), "; ", ending));
}

Server::Server(ServerOptions options) : state_(std::make_shared<State>()) {
  if (options.token.empty()) {
    detail::fail<InvalidArgument>("kiln serve",
                                  "an empty token: the server needs one (--token-file)");
  }
  State& s = *state_;
  s.options = std::move(options);
  s.backend = &hardware_backend_for(s.options.device.without_autodiff().without_fusion());
  try {
    const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(s.options.host), s.options.port);
    s.acceptor.open(endpoint.protocol());
    s.acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    s.acceptor.bind(endpoint);
    s.acceptor.listen();
    s.port = s.acceptor.local_endpoint().port();
    s.listening = s.acceptor.native_handle();
  } catch (const asio::system_error& e) {
    detail::fail<BackendUnavailable>("kiln serve", "cannot listen on ", s.options.host, ":",
                                     s.options.port, ": ", e.what());
  }
  s.log(kiln::detail::concat("kiln serve: listening on ", s.options.host, ":", s.port, ", device ",
                             s.backend->name()));
}

Server::~Server() { stop(); }

std::uint16_t Server::port() const noexcept { return state_->port; }
int Server::open_sessions() const noexcept { return state_->open.load(); }
std::uint64_t Server::ended_sessions() const noexcept { return state_->ended.load(); }

void Server::run() {
  State& s = *state_;
  while (!s.stopping) {
    asio::ip::tcp::socket socket(s.io);
    asio::error_code error;
    s.acceptor.accept(socket, error);
    if (s.stopping) break;
    if (error) continue;  // a connection that failed while it was accepted
    auto connection = std::make_shared<Connection>(std::move(socket));
    std::list<std::shared_ptr<Connection>>::iterator entry;
    {
      std::lock_guard lock(s.mutex);
      entry = s.sessions.insert(s.sessions.end(), connection);
      ++s.open;
    }
    const std::uint64_t number = s.next_session++;
    std::thread([state = state_, entry, connection, number] {
      state->serve(*connection, number);
      std::lock_guard lock(state->mutex);
      state->sessions.erase(entry);
      ++state->ended;
      if (--state->open == 0) state->all_ended.notify_all();
    }).detach();
  }
  // Closed by the thread that used it (stop() only shuts it down, which ends a blocked accept).
  asio::error_code ignored;
  s.acceptor.close(ignored);
}

void Server::start() {
  state_->runner = std::thread([this] { run(); });
}

void Server::stop() {
  State& s = *state_;
  // Shut down first, then say so: run() closes the acceptor only once it sees stopping, so the
  // descriptor is still the acceptor's here.
  {
    std::lock_guard lock(s.mutex);
    if (s.stop_requested) return;
    s.stop_requested = true;
  }
  ::shutdown(s.listening, SHUT_RDWR);
  s.stopping = true;
  if (s.runner.joinable()) s.runner.join();
  std::unique_lock lock(s.mutex);
  for (const std::shared_ptr<Connection>& connection : s.sessions) connection->shutdown();
  s.all_ended.wait(lock, [&] { return s.open == 0; });
}

}  // namespace kiln::remote

// A remote device against `kiln serve` in the test process (support/remote_server.h, or servers
// a test starts and stops itself): what a user sees through Tensor and Device (names, settings,
// values, autodiff, fusion, value-shaped ops, errors named by address and op), what the server
// does with raw connections that misbehave (the session ends, the others go on), the upload
// cache, block replay, and memory freed when a client goes.
#ifdef KILN_HAVE_REMOTE_SERVER

#include "remote/server.h"

#include <gtest/gtest.h>
#include <kiln/activation.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "contract/contract.h"
#include "remote/protocol.h"
#include "remote/remote_backend.h"
#include "runtime/registry.h"
#include "support/error_message.h"
#include "support/polling.h"
#include "support/remote_frames.h"
#include "support/remote_server.h"

namespace kiln::remote::server_test {
namespace {

using Bytes = std::vector<std::byte>;
using ir::wire::Writer;
using test::commands_frame;
using test::expect_error;
using test::expect_error_containing;
using test::hello_frame;
using test::kRemoteToken;

using test::cpu_bytes_in_use;
using test::kPatience;
using test::wait_until;

// ---- helpers -----------------------------------------------------------------------------------

// An Upload frame of one chunk: bytes at offset of an F32 tensor of shape [elements] (by
// default, bytes are the whole tensor), cached under hash unless it is 0.
Bytes upload_frame(std::uint32_t id, std::span<const std::byte> bytes, std::uint64_t offset = 0,
                   std::int64_t elements = -1, std::uint64_t hash = 0) {
  return encode_frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(id);
    out.u64(hash);
    out.u8(static_cast<std::uint8_t>(DType::F32));
    out.ints(std::vector<std::int64_t>{
        elements >= 0 ? elements : static_cast<std::int64_t>(bytes.size() / 4)});
    out.u64(offset);
    out.u64(bytes.size());
    out.raw(bytes);
  });
}

// An Upload frame of one chunk of n zero bytes at offset, QFloat blocks of scheme and shape.
Bytes blocks_frame(std::uint32_t id, const QuantScheme& scheme, std::vector<std::int64_t> shape,
                   std::size_t n, std::uint64_t offset = 0) {
  return encode_frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(id);
    out.u64(0);
    out.u8(static_cast<std::uint8_t>(DType::QFloat));
    ir::wire::write_scheme(out, scheme);
    out.ints(shape);
    out.u64(offset);
    out.u64(n);
    out.raw(std::vector<std::byte>(n));
  });
}

Command request(CommandKind kind, std::uint64_t number, std::uint32_t id = 0) {
  Command c;
  c.kind = kind;
  c.value = number;
  c.id = id;
  return c;
}

// `full` of F32 [elements] into id, as RemoteBackend sends it.
Command full_command(std::uint32_t id, std::int64_t elements, double value) {
  Command c;
  c.kind = CommandKind::Op;
  c.op.code = OpCode::full;
  c.op.attributes = {Shape{elements}, Scalar(value), DType::F32, ir::DeviceAttr::of(Device::cpu())};
  c.op.outputs = {{id}};
  c.op.output_types = {{DType::F32, Shape{elements}}};
  return c;
}

// A connection that speaks the protocol by hand. Reads give up after kPatience (a failure), so a
// server that never answers fails the test instead of hanging it.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port) : socket_(io_) {
    socket_.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  void send(std::span<const std::byte> bytes) {
    asio::write(socket_, asio::buffer(bytes.data(), bytes.size()));
  }
  // The next frame; nullopt once the server has closed the connection.
  std::optional<std::pair<FrameHeader, Bytes>> receive() {
    std::array<std::byte, kFrameHeaderBytes> head;
    if (!read_exact(head.data(), head.size())) return std::nullopt;
    const FrameHeader header = read_frame_header(head, std::uint64_t{1} << 32);
    Bytes body(header.length);
    if (!read_exact(body.data(), body.size())) return std::nullopt;
    return std::pair{header, std::move(body)};
  }
  // Hello, and the server's answer: a Welcome or a Refused frame.
  std::optional<std::pair<FrameHeader, Bytes>> hello(
      const std::string& token, std::uint32_t version = kProtocolVersion,
      std::uint64_t contract = kBackendContractHash) {
    send(hello_frame(token, version, contract));
    return receive();
  }
  void handshake(const std::string& token = kRemoteToken) {
    const auto answer = hello(token);
    ASSERT_TRUE(answer.has_value());
    ASSERT_EQ(answer->first.kind, FrameKind::Welcome);
  }
  // The code and message of the Refused frame that comes next (Error, "..." for anything else).
  std::pair<ErrorCode, std::string> refusal() {
    const auto got = receive();
    if (!got) return {ErrorCode::Error, "the connection closed without a refusal"};
    if (got->first.kind != FrameKind::Refused)
      return {ErrorCode::Error, "frame kind " + std::to_string(static_cast<int>(got->first.kind))};
    return read_refused(got->second);
  }
  // Whether the server has closed the connection (nothing more arrives).
  bool closed_by_server() { return !receive().has_value(); }
  void close() {
    asio::error_code ignored;
    socket_.close(ignored);
  }

 private:
  bool read_exact(std::byte* data, std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (n > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd poll_fd{socket_.native_handle(), POLLIN, 0};
      if (left.count() <= 0 || ::poll(&poll_fd, 1, static_cast<int>(left.count())) <= 0) {
        ADD_FAILURE() << "the server sent nothing for " << kPatience.count() << " s";
        return false;
      }
      const ssize_t got = ::recv(socket_.native_handle(), data, n, 0);
      if (got <= 0) return false;
      data += got;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  }

  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

// A server of the test's own, with a token no other server had: a device is interned by
// address and token, so a port that an earlier server used never brings back its device.
class OwnServer {
 public:
  explicit OwnServer(Limits limits = {})
      : token_("own-server-" + std::to_string(next_number())),
        lines_(std::make_shared<Lines>()),
        server_(options(limits)) {
    server_.start();
  }

  remote::Server& server() { return server_; }
  std::uint16_t port() const { return server_.port(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port()); }
  const std::string& token() const { return token_; }
  Device device() const { return Device::remote("remote://" + address(), token_); }
  void stop() { server_.stop(); }
  // The log lines so far (a session's line is written when it ends).
  std::vector<std::string> log() const {
    std::lock_guard lock(lines_->mutex);
    return lines_->lines;
  }

 private:
  struct Lines {
    std::mutex mutex;
    std::vector<std::string> lines;
  };
  static int next_number() {
    static std::atomic<int> number{0};
    return ++number;
  }
  ServerOptions options(const Limits& limits) const {
    ServerOptions o;
    o.port = 0;
    o.token = token_;
    o.limits = limits;
    o.log = [lines = lines_](const std::string& line) {
      std::lock_guard lock(lines->mutex);
      lines->lines.push_back(line);
    };
    return o;
  }

  std::string token_;
  std::shared_ptr<Lines> lines_;
  remote::Server server_;
};

RemoteBackend& remote_backend(const Device& device) {
  return dynamic_cast<RemoteBackend&>(hardware_backend_for(device));
}

TensorData floats(std::vector<float> values, Shape shape) {
  return TensorData::from_vec(values, std::move(shape));
}

std::vector<float> values_of(const Tensor<2>& t) { return t.into_data().to_vec<float>(); }

// ---- behaviour through the public API -----------------------------------------------------------

TEST(RemoteServer, NamesTheServerAndItsDevice) {
  const Device dev = test::remote_device();
  const std::string address = "127.0.0.1:" + std::to_string(test::remote_server().port());
  EXPECT_EQ(dev.kind(), DeviceKind::Remote);
  EXPECT_EQ(dev.backend_name(), "remote<" + address + " cpu>");
  EXPECT_EQ(dev.url(), "remote://" + address);
  EXPECT_EQ(dev.to_string(), "remote://" + address);
  EXPECT_EQ(dev.autodiff().to_string(), "remote://" + address + " (autodiff)");
  EXPECT_EQ(dev.autodiff().backend_name(), "autodiff<remote<" + address + " cpu>>");
  EXPECT_EQ(dev.fused().backend_name(), "fusion<remote<" + address + " cpu>>");
  // The other spellings of the address, with the same token, are the same device.
  EXPECT_EQ(Device::remote("tcp://" + address, kRemoteToken), dev);
  EXPECT_EQ(Device::remote(address, kRemoteToken), dev);
  EXPECT_TRUE(Device::cpu().url().empty());
  expect_error<InvalidArgument>([] { Device::remote("remote://127.0.0.1", kRemoteToken); },
                                "Device::remote", {"remote://HOST:PORT"});
  expect_error<InvalidArgument>([] { Device::remote("remote://127.0.0.1:70000", kRemoteToken); },
                                "Device::remote");
}

TEST(RemoteServer, SettingsAndDTypeUsageAreTheServersCpu) {
  const Device dev = test::remote_device();
  EXPECT_EQ(dev.settings(), Device::cpu().settings());
  for (std::size_t d = 0; d < kDTypeCount; ++d) {
    const auto dtype = static_cast<DType>(d);
    EXPECT_EQ(dev.dtype_usage(dtype), Device::cpu().dtype_usage(dtype)) << dtype_name(dtype);
    EXPECT_EQ(dev.supports_dtype(dtype), Device::cpu().supports_dtype(dtype)) << dtype_name(dtype);
  }
  // A tensor made without a dtype gets the server's defaults.
  EXPECT_EQ(Tensor<1>::zeros({2}, dev).dtype(), Device::cpu().settings().float_dtype);
  EXPECT_EQ((Tensor<1, Int>::zeros({2}, dev)).dtype(), Device::cpu().settings().int_dtype);
}

TEST(RemoteServer, MemoryStatsAreTheServersDevice) {
  const Device dev = test::remote_device();
  dev.sync();
  // The server runs in this process on the same CPU backend: its stats are this process's.
  const MemoryStats before = dev.memory_stats();
  EXPECT_EQ(before.bytes_in_use, cpu_bytes_in_use());
  EXPECT_GE(before.peak_bytes_in_use, before.bytes_in_use);
  EXPECT_GE(before.bytes_reserved, before.bytes_in_use);
  {
    const auto big = Tensor<1>::full({1 << 20}, 3.0, dev);  // 4 MiB on the server
    const MemoryStats during = dev.memory_stats();
    EXPECT_GE(during.bytes_in_use - before.bytes_in_use, std::int64_t{4} << 20);
    dev.reset_peak_memory();
    const MemoryStats reset = dev.memory_stats();
    EXPECT_EQ(reset.peak_bytes_in_use, reset.bytes_in_use);
  }
  dev.memory_cleanup();
  EXPECT_EQ(dev.memory_stats().bytes_in_use, before.bytes_in_use);
}

TEST(RemoteServer, ToDeviceRoundTripsEveryKind) {
  const Device dev = test::remote_device();
  const std::vector<float> f = {1.5f, -2.25f, 0.f, 3e-8f, -1e20f, 7.f};
  const auto local = Tensor<2>::from_data(floats(f, {2, 3}), Device::cpu());
  const auto there = local.to_device(dev);
  EXPECT_EQ(there.device(), dev);
  EXPECT_EQ(there.shape(), (Shape{2, 3}));
  const auto back = there.to_device(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(values_of(back), f);

  const std::vector<std::int64_t> i = {-5, 0, std::int64_t{1} << 40};
  const auto ints =
      Tensor<1, Int>::from_data(TensorData::from_vec(i), Device::cpu()).to_device(dev);
  EXPECT_EQ(ints.to_device(Device::cpu()).into_data().to_vec<std::int64_t>(), i);
  const std::vector<bool> b = {true, false, true, true};
  const auto bools =
      Tensor<1, Bool>::from_data(TensorData::from_vec(b), Device::cpu()).to_device(dev);
  EXPECT_EQ(bools.into_data().to_vec<bool>(), b);
  // An empty tensor travels too.
  const auto empty = Tensor<2>::zeros({0, 3}, Device::cpu()).to_device(dev);
  EXPECT_EQ(empty.to_device(Device::cpu()).shape(), (Shape{0, 3}));

  // From one server to another.
  OwnServer other;
  const auto moved = there.to_device(other.device());
  EXPECT_EQ(moved.device(), other.device());
  EXPECT_EQ(values_of(moved * 2.0), values_of(local * 2.0));
}

TEST(RemoteServer, OpsEqualTheLocalCpu) {
  const Device dev = test::remote_device();
  auto run = [](Device device) {
    std::vector<float> a(12), b(20);
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = 0.25f * static_cast<float>(k) - 1.f;
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = 0.5f - 0.1f * static_cast<float>(k);
    const auto x = Tensor<2>::from_data(floats(a, {3, 4}), device);
    const auto w = Tensor<2>::from_data(floats(b, {4, 5}), device);
    const auto y = activation::softmax((x.matmul(w) + 0.5).exp().sqrt(), 1);
    return std::pair{values_of(y), values_of(y.sum_dim(0))};
  };
  EXPECT_EQ(run(dev), run(Device::cpu()));
}

struct Trained {
  std::vector<float> losses;
  std::vector<float> w1, w2;
};

// A two-layer regression trained with autodiff and plain SGD steps written with assign; every
// step ends with a read of its loss (one batch per step on a remote device).
Trained train(Device device, int steps) {
  const Device dev = device.autodiff();
  std::vector<float> x(16 * 4), t(16), w1(4 * 8), w2(8);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>((k * 37) % 11) / 11.f - 0.5f;
  for (std::size_t k = 0; k < t.size(); ++k) t[k] = static_cast<float>(k % 3) - 1.f;
  for (std::size_t k = 0; k < w1.size(); ++k) w1[k] = static_cast<float>((k * 5) % 7) / 7.f - 0.4f;
  for (std::size_t k = 0; k < w2.size(); ++k) w2[k] = 0.3f - static_cast<float>(k) / 16.f;
  const auto input = Tensor<2>::from_data(floats(x, {16, 4}), dev);
  const auto target = Tensor<2>::from_data(floats(t, {16, 1}), dev);
  auto first = Tensor<2>::from_data(floats(w1, {4, 8}), dev).require_grad();
  auto second = Tensor<2>::from_data(floats(w2, {8, 1}), dev).require_grad();
  Trained out;
  for (int step = 0; step < steps; ++step) {
    const auto hidden = activation::relu(input.matmul(first));
    const auto diff = hidden.matmul(second) - target;
    const auto loss = (diff * diff).mean();
    const Gradients grads = loss.backward();
    first.inner().assign(first.inner() - first.grad(grads)->inner() * 0.1);
    second.inner().assign(second.inner() - second.grad(grads)->inner() * 0.1);
    out.losses.push_back(loss.into_scalar<float>());
  }
  out.w1 = values_of(first);
  out.w2 = values_of(second);
  return out;
}

TEST(RemoteServer, AutodiffGradientsEqualTheLocalCpu) {
  auto grads = [](Device device) {
    const Device dev = device.autodiff();
    const auto x =
        Tensor<2>::from_data(floats({1, -2, 3, 0.5f, -1, 2}, {2, 3}), dev).require_grad();
    const auto w = Tensor<2>::from_data(floats({0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f}, {3, 2}), dev)
                       .require_grad();
    const auto b = Tensor<2>::from_data(floats({0.05f, -0.05f}, {1, 2}), dev).require_grad();
    const auto y = activation::relu(x.matmul(w) + b);
    const auto loss = (y * y).mean() + x.exp().sum() * 0.01;
    const Gradients g = loss.backward();
    EXPECT_EQ(g.size(), 3u);
    return std::vector{loss.into_data().to_vec<float>(), values_of(*x.grad(g)),
                       values_of(*w.grad(g)), values_of(*b.grad(g))};
  };
  const auto remote = grads(test::remote_device());
  const auto local = grads(Device::cpu());
  EXPECT_EQ(remote, local);
  // The gradients are not all zero (the comparison means something).
  EXPECT_NE(remote[2], std::vector<float>(6, 0.f));
  // Several training steps agree bit for bit as well.
  const Trained r = train(test::remote_device(), 3);
  const Trained l = train(Device::cpu(), 3);
  EXPECT_EQ(r.losses, l.losses);
  EXPECT_EQ(r.w1, l.w1);
  EXPECT_EQ(r.w2, l.w2);
}

TEST(RemoteServer, FusedDeviceEqualsTheLocalFusedCpu) {
  auto run = [](Device dev) {
    const auto x = Tensor<2>::from_data(floats({1, 2, 3, -4, 5, -6, 0.5f, 0.25f}, {2, 4}), dev);
    const auto y = ((x * 2.0 + 1.0).exp() - x).sum_dim(1);
    const auto z = (x.abs() + 1.0).log();
    return std::pair{values_of(y), values_of(z)};
  };
  const Device dev = test::remote_device().fused();
  EXPECT_TRUE(dev.is_fused());
  EXPECT_EQ(run(dev), run(Device::cpu().fused()));
  EXPECT_EQ(run(dev), run(Device::cpu()));
  // Autodiff over the fused remote device trains as the local one does.
  const Trained remote = train(dev, 3);
  const Trained local = train(Device::cpu().fused(), 3);
  EXPECT_EQ(remote.losses, local.losses);
  EXPECT_EQ(remote.w1, local.w1);
  EXPECT_EQ(remote.w2, local.w2);
}

TEST(RemoteServer, ValueShapedOpsGetTheServersShapes) {
  const Device dev = test::remote_device();
  const auto x = Tensor<2>::from_data(floats({1, -2, 3, -4, 5, 0}, {2, 3}), dev);
  const auto positive = x.greater_elem(0.0);
  const Tensor<1> picked = x.mask_select(positive);
  EXPECT_EQ(picked.shape(), (Shape{3}));
  EXPECT_EQ(picked.into_data().to_vec<float>(), (std::vector<float>{1, 3, 5}));
  // The result feeds later ops with its real shape.
  EXPECT_EQ((picked * 2.0).sum().into_scalar<float>(), 18.f);
  const Tensor<2, Int> where = positive.argwhere();
  EXPECT_EQ(where.shape(), (Shape{3, 2}));
  EXPECT_EQ(where.into_data().to_vec<std::int64_t>(),
            (std::vector<std::int64_t>{0, 0, 0, 2, 1, 1}));
  // Nothing selected: a zero-size result, not a failure.
  const Tensor<1> none = x.mask_select(x.greater_elem(100.0));
  EXPECT_EQ(none.shape(), (Shape{0}));
  EXPECT_EQ(x.greater_elem(100.0).argwhere().shape(), (Shape{0, 2}));
  EXPECT_TRUE(none.into_data().to_vec<float>().empty());
}

TEST(RemoteServer, LongChainsOfOpsGoOutInBatches) {
  // More ops than one batch holds (they go out as they queue up, long before the read).
  const Device dev = test::remote_device();
  auto x = Tensor<1>::zeros({4}, dev);
  for (int k = 0; k < 40000; ++k) x = x + 1.0;
  EXPECT_EQ(x.into_data().to_vec<float>(), std::vector<float>(4, 40000.f));
}

TEST(RemoteServer, ReadManyAndSync) {
  const Device dev = test::remote_device();
  const auto a = Tensor<1>::from_data(floats({1, 2, 3}, {3}), dev);
  const auto b = a * 10.0;
  const auto c = Tensor<1, Int>::arange(0, 4, dev);
  const std::vector<TensorData> all =
      kiln::detail::read_many({b.primitive(), a.primitive(), c.primitive()});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].to_vec<float>(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(all[1].to_vec<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(all[2].to_vec<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(kiln::detail::read_many({}).empty());
  EXPECT_NO_THROW(dev.sync());
  EXPECT_NO_THROW(dev.flush());
}

// ---- errors a user sees ------------------------------------------------------------------------

TEST(RemoteServer, WrongTokenIsAuthenticationFailed) {
  const std::string address = "127.0.0.1:" + std::to_string(test::remote_server().port());
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second attempt connects again
    expect_error_containing<AuthenticationFailed>(
        [&] { Device::remote("remote://" + address, "not-the-token"); }, {"token", address});
  }
  // A token that is the right one's prefix, or the right one twice, is wrong too.
  expect_error_containing<AuthenticationFailed>(
      [&] { Device::remote("remote://" + address, std::string(kRemoteToken).substr(0, 4)); },
      {address});
  expect_error_containing<AuthenticationFailed>(
      [&] { Device::remote("remote://" + address, std::string(kRemoteToken) + kRemoteToken); },
      {address});
  // The right token still works after the refusals.
  EXPECT_EQ((Tensor<1>::ones({2}, test::remote_device()) + 1.0).into_data().to_vec<float>(),
            (std::vector<float>{2, 2}));
}

TEST(RemoteServer, MissingTokenIsAuthenticationFailed) {
  const char* saved = std::getenv("KILN_REMOTE_TOKEN");
  const std::optional<std::string> old = saved ? std::optional<std::string>(saved) : std::nullopt;
  unsetenv("KILN_REMOTE_TOKEN");
  expect_error_containing<AuthenticationFailed>([] { Device::remote(test::remote_url()); },
                                                {"token", test::remote_url().substr(9)});
  // With the variable set, the one-argument form connects.
  setenv("KILN_REMOTE_TOKEN", kRemoteToken, 1);
  EXPECT_EQ(Device::remote(test::remote_url()), test::remote_device());
  if (old)
    setenv("KILN_REMOTE_TOKEN", old->c_str(), 1);
  else
    unsetenv("KILN_REMOTE_TOKEN");
}

TEST(RemoteServer, NoServerIsBackendUnavailableNamingTheAddress) {
  // A port that was free a moment ago, with nothing listening on it.
  std::uint16_t port = 0;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = acceptor.local_endpoint().port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  expect_error_containing<BackendUnavailable>(
      [&] { Device::remote("remote://" + address, kRemoteToken); }, {"[remote]", address});
}

TEST(RemoteServer, AnotherServiceIsAProtocolErrorNamingTheAddress) {
  // Something that is not kiln answers the hello: an HTTP server.
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string address = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  std::thread http([&] {
    asio::ip::tcp::socket socket(io);
    acceptor.accept(socket);
    std::array<char, 64> request;
    asio::error_code error;
    (void)socket.read_some(asio::buffer(request), error);
    const std::string answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    asio::write(socket, asio::buffer(answer), error);
  });
  expect_error_containing<ProtocolError>(
      [&] { Device::remote("remote://" + address, kRemoteToken); }, {"[remote]", address});
  http.join();
}

TEST(RemoteServer, ServerStoppedMidRunIsBackendUnavailableNamingTheAddress) {
  OwnServer own;
  const Device dev = own.device();
  const std::string address = own.address();
  const auto x = Tensor<1>::from_data(floats({1, 2, 3}, {3}), dev);
  EXPECT_EQ((x + 1.0).into_data().to_vec<float>(), (std::vector<float>{2, 3, 4}));
  const auto pending = x * 5.0;  // queued, not sent
  own.stop();
  expect_error_containing<BackendUnavailable>([&] { pending.into_data(); }, {address});
  // Once the loss is known, every op and read says so at once.
  expect_error_containing<BackendUnavailable>([&] { (void)(x * 2.0); }, {address});
  expect_error_containing<BackendUnavailable>([&] { x.into_data(); }, {address});
  expect_error_containing<BackendUnavailable>([&] { dev.sync(); }, {address});
  expect_error_containing<BackendUnavailable>([&] { dev.memory_stats(); }, {address});
  expect_error_containing<BackendUnavailable>([&] { Tensor<1>::from_data(floats({1}, {1}), dev); },
                                              {address});
}

TEST(RemoteServer, ProtocolVersionMismatchIsRefusedNamingBothVersions) {
  remote::Server& server = test::remote_server();
  {
    RawClient raw(server.port());
    const auto answer = raw.hello(kRemoteToken, 99);
    ASSERT_TRUE(answer.has_value());
    ASSERT_EQ(answer->first.kind, FrameKind::Refused);
    const auto [code, message] = read_refused(answer->second);
    EXPECT_EQ(code, ErrorCode::ProtocolError);
    EXPECT_NE(message.find("99"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(kProtocolVersion)), std::string::npos) << message;
    EXPECT_THROW(throw_error(code, message), ProtocolError);
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    // Another op contract.
    RawClient raw(server.port());
    const auto answer = raw.hello(kRemoteToken, kProtocolVersion, kBackendContractHash ^ 1);
    ASSERT_TRUE(answer.has_value());
    ASSERT_EQ(answer->first.kind, FrameKind::Refused);
    const auto [code, message] = read_refused(answer->second);
    EXPECT_EQ(code, ErrorCode::ProtocolError);
    EXPECT_NE(message.find(contract_name(kBackendContractHash)), std::string::npos) << message;
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    // A wrong token, by hand: AuthenticationFailed, and nothing else is read.
    RawClient raw(server.port());
    const auto answer = raw.hello("nope");
    ASSERT_TRUE(answer.has_value());
    ASSERT_EQ(answer->first.kind, FrameKind::Refused);
    EXPECT_EQ(read_refused(answer->second).first, ErrorCode::AuthenticationFailed);
    EXPECT_TRUE(raw.closed_by_server());
  }
}

TEST(RemoteServer, ServerSideOpFailureSurfacesAtTheReadNamingTheOp) {
  const Device dev = test::remote_device();
  const TensorData x_data = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  const TensorData index_data =
      TensorData::from_vec(std::vector<std::int64_t>{0, 100, 1, 0, 2, 1}, Shape{2, 3});
  // Locally the CPU backend refuses the index at the call.
  expect_error<InvalidArgument>(
      [&] {
        Tensor<2>::from_data(x_data, Device::cpu())
            .gather(1, Tensor<2, Int>::from_data(index_data, Device::cpu()));
      },
      "gather", {"100"});
  // Remotely the op returns at once; its read, and the read of a value made from it, fail with
  // the same type and message.
  const auto x = Tensor<2>::from_data(x_data, dev);
  const auto gathered = x.gather(1, Tensor<2, Int>::from_data(index_data, dev));
  const auto later = (gathered + 1.0).sum_dim(0);
  expect_error<InvalidArgument>([&] { gathered.into_data(); }, "gather", {"100"});
  expect_error<InvalidArgument>([&] { later.into_data(); }, "gather", {"100"});
  // The session goes on.
  EXPECT_NO_THROW(dev.sync());
  EXPECT_EQ(values_of(x * 2.0), (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST(RemoteServer, SessionByteLimitIsOutOfMemoryAtTheRead) {
  Limits limits;
  limits.max_session_bytes = std::uint64_t{1} << 20;
  OwnServer own(limits);
  const Device dev = own.device();
  const auto big = Tensor<1>::zeros({1 << 19}, dev);  // 2 MiB: more than the session may hold
  expect_error<OutOfMemory>([&] { big.into_data(); }, "full", {"1048576"});
  const auto small = Tensor<1>::ones({4}, dev);
  EXPECT_EQ(small.into_data().to_vec<float>(), (std::vector<float>(4, 1.f)));
  // An upload that does not fit fails at its read; the same content sent again fails the same
  // way (it was never cached), and the session goes on.
  const TensorData data = TensorData::full(Shape{1 << 19}, 2.0, DType::F32);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto uploaded = Tensor<1>::from_data(data, dev);
    expect_error<OutOfMemory>([&] { (uploaded + 1.0).into_data(); }, "upload", {"1048576"});
  }
  EXPECT_EQ((small * 3.0).into_data().to_vec<float>(), (std::vector<float>(4, 3.f)));
  // QFloat blocks count their own bytes: Q8_0's 1,114,112 do not fit, Q4_0's 589,824 do.
  const TensorData values = TensorData::full(Shape{1024, 1024}, 0.5, DType::F32);
  const auto q8 = Tensor<2>::from_data(values.quantize(quant_scheme(QuantScheme::Kind::Q8_0)), dev);
  expect_error<OutOfMemory>([&] { q8.into_data(); }, "upload", {"1048576"});
  const TensorData q4 = values.quantize(quant_scheme(QuantScheme::Kind::Q4_0));
  EXPECT_TRUE(std::ranges::equal(Tensor<2>::from_data(q4, dev).into_data().bytes(), q4.bytes()));
  // Freed memory can be used again.
  const auto fits = Tensor<1>::full({1 << 17}, 1.0, dev);  // 512 KiB
  EXPECT_EQ(fits.sum().into_scalar<float>(), static_cast<float>(1 << 17));
}

TEST(RemoteServer, RepeatedUploadsOfOneContentCountAgainstTheLimit) {
  // A client that sends the same content (same hash) again instead of FromCache gets a value of
  // its own each time, and each counts against the session's bytes.
  Limits limits;
  limits.max_session_bytes = std::uint64_t{1} << 20;
  OwnServer own(limits);
  RawClient raw(own.port());
  raw.handshake(own.token());
  const Bytes bytes(400 << 10, std::byte{0});  // 400 KiB
  for (std::uint32_t id = 0; id < 3; ++id) raw.send(upload_frame(id, bytes, 0, -1, 0x5eed));
  raw.send(commands_frame({request(CommandKind::Read, 1, 1), request(CommandKind::Read, 2, 2)}));
  for (std::uint64_t number : {1, 2}) {
    const auto got = raw.receive();
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->first.kind, FrameKind::Reply);
    const Reply reply = read_reply(got->second);
    EXPECT_EQ(reply.request, number);
    if (number == 1) {
      EXPECT_EQ(reply.status, ErrorCode::Ok);  // 800 KiB held: fits
    } else {
      ASSERT_EQ(reply.status, ErrorCode::OutOfMemory);  // 1200 KiB would not
      EXPECT_NE(decode_text(reply.body).find("[upload]"), std::string::npos);
    }
  }
}

TEST(RemoteServer, TensorLimitIsOutOfMemoryAtTheCall) {
  Limits limits;
  limits.max_tensors = 4;
  OwnServer own(limits);
  const Device dev = own.device();
  const auto x = Tensor<2>::from_data(floats({3, 1, 2, 0}, {2, 2}), dev);
  {
    const auto y = x * 2.0;
    const auto z = y + 1.0;
    // One id left: an op with two results does not fit, and nothing of it reaches the server.
    expect_error_containing<OutOfMemory>([&] { x.max_dim_with_indices(1); }, {"4 tensors"});
    const auto w = z - 1.0;
    expect_error_containing<OutOfMemory>([&] { (void)(x * 3.0); }, {own.address(), "4 tensors"});
    EXPECT_EQ(values_of(w), (std::vector<float>{6, 2, 4, 0}));
  }
  // Released ids are used again, by the op that did not fit before.
  const auto [values, indices] = x.max_dim_with_indices(1);
  EXPECT_EQ(values_of(values), (std::vector<float>{3, 2}));
  EXPECT_EQ(indices.into_data().to_vec<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
}

TEST(RemoteServer, UploadsLargerThanAFrameArriveInChunks) {
  Limits limits;
  limits.max_frame_bytes = 64 << 10;
  OwnServer own(limits);
  const Device dev = own.device();
  for (const std::size_t count :
       {std::size_t{50} << 10, std::size_t{300} << 10}) {  // 200 KiB, 1.2 MiB
    std::vector<float> values(count);
    for (std::size_t k = 0; k < count; ++k) values[k] = static_cast<float>(k);
    const TensorData data = TensorData::from_vec(values, Shape{static_cast<std::int64_t>(count)});
    const auto uploaded = Tensor<1>::from_data(data, dev);
    EXPECT_EQ(uploaded.into_data().to_vec<float>(), values);  // a reply may exceed the limit
    EXPECT_EQ((uploaded + 1.0).slice({Slice(count - 2, count)}).into_data().to_vec<float>(),
              (std::vector<float>{static_cast<float>(count - 1), static_cast<float>(count)}));
  }
}

TEST(RemoteServer, SeedMakesRandomValuesRepeatable) {
  const Device dev = test::remote_device();
  auto draw = [](Device device) {
    device.seed(1234);
    return Tensor<1>::random({64}, Distribution::normal(0, 1), device).into_data().to_vec<float>();
  };
  const std::vector<float> first = draw(dev);
  EXPECT_EQ(draw(dev), first);
  // The server's device is this process's CPU: the same seed gives the same values here.
  EXPECT_EQ(draw(Device::cpu()), first);
  dev.seed(99);
  EXPECT_NE(Tensor<1>::random({64}, Distribution::normal(0, 1), dev).into_data().to_vec<float>(),
            first);
}

TEST(RemoteServer, TensorsOfAnotherDeviceAreADeviceMismatch) {
  const Device dev = test::remote_device();
  OwnServer other;
  const auto here = Tensor<1>::ones({2}, dev);
  const auto there = Tensor<1>::ones({2}, other.device());
  const auto local = Tensor<1>::ones({2}, Device::cpu());
  EXPECT_THROW((void)(here + there), DeviceMismatch);
  EXPECT_THROW((void)(here + local), DeviceMismatch);
  EXPECT_EQ((here + here).into_data().to_vec<float>(), (std::vector<float>{2, 2}));
}

TEST(RemoteServer, ServerOptionsAreChecked) {
  ServerOptions options;
  options.port = 0;
  options.token = "";
  expect_error<InvalidArgument>([&] { remote::Server server(options); }, "kiln serve", {"token"});
  // A port another server listens on.
  options.token = "t";
  options.port = test::remote_server().port();
  expect_error_containing<BackendUnavailable>([&] { remote::Server server(options); },
                                              {"127.0.0.1:" + std::to_string(options.port)});
}

// A connection that never says hello (or says half of one) is closed after the handshake
// timeout instead of holding a thread of the server for ever.
TEST(RemoteServer, SilentConnectionsAreClosedAfterTheHandshakeTimeout) {
  ServerOptions options;
  options.port = 0;
  options.token = "t";
  options.handshake_timeout = std::chrono::milliseconds(200);
  remote::Server server(options);
  server.start();
  RawClient silent(server.port());
  RawClient halfway(server.port());
  halfway.send(std::vector<std::byte>(3, std::byte{0}));  // part of a frame header
  EXPECT_TRUE(wait_until([&] { return server.ended_sessions() == 2; }));
  EXPECT_EQ(server.open_sessions(), 0);
  // It is told why (a refusal) before the connection closes.
  const auto frame = silent.receive();
  ASSERT_TRUE(frame.has_value());
  EXPECT_EQ(frame->first.kind, FrameKind::Refused);
}

// ---- a bad frame ends its session only ---------------------------------------------------------

TEST(RemoteServer, BadFrameEndsOnlyItsSession) {
  remote::Server& server = test::remote_server();
  const Device dev = test::remote_device();
  const auto x = Tensor<1>::from_data(floats({1, 2, 3}, {3}), dev);
  EXPECT_EQ((x * 2.0).into_data().to_vec<float>(), (std::vector<float>{2, 4, 6}));

  Command bind;
  bind.kind = CommandKind::Bind;
  bind.block = 7;
  bind.ids = {1};
  Command lying = full_command(3, 4, 1.0);
  lying.op.output_types[0].shape = Shape{5};
  struct Case {
    std::string name;
    bool handshake;
    Bytes bytes;
    std::string expected;  // in the refusal's message
  };
  const std::vector<Case> cases = {
      {"a read of an id that holds nothing", true,
       commands_frame({request(CommandKind::Read, 1, 12345)}), "12345"},
      {"a free of an id that holds nothing", true, commands_frame({[] {
         Command c;
         c.kind = CommandKind::Free;
         c.id = 77;
         return c;
       }()}),
       "77"},
      {"a block never defined", true, commands_frame({bind}), "never defined"},
      {"an op whose result type is a lie", true, commands_frame({lying}), "expects"},
      {"a chunk with no upload in progress", true, upload_frame(4, std::vector<std::byte>(8), 8, 4),
       "no upload in progress"},
      {"a frame kind only a server sends", true,
       encode_frame(FrameKind::Welcome, [](Writer& out) { out.u8(0); }), "frame kind"},
      {"garbage in a commands frame", true,
       encode_frame(FrameKind::Commands,
                    [](Writer& out) {
                      for (int k = 0; k < 64; ++k) out.u8(static_cast<std::uint8_t>(k * 29 + 3));
                    }),
       "[remote]"},
      {"a frame over the session's limit", true,
       [] {
         Bytes header(kFrameHeaderBytes);
         header[0] = header[1] = header[2] = header[3] = std::byte{0xff};
         header[4] = static_cast<std::byte>(FrameKind::Commands);
         return header;
       }(),
       "limit"},
      {"an HTTP request instead of a hello", false,
       [] {
         const std::string text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
         Bytes bytes(text.size());
         std::memcpy(bytes.data(), text.data(), text.size());
         return bytes;
       }(),
       "[remote]"},
      {"commands before the hello", false, commands_frame({request(CommandKind::Sync, 1)}),
       "hello"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::uint64_t ended = server.ended_sessions();
    RawClient raw(server.port());
    if (c.handshake) raw.handshake();
    raw.send(c.bytes);
    const auto [code, message] = raw.refusal();
    EXPECT_EQ(code, ErrorCode::ProtocolError) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_TRUE(raw.closed_by_server());
    EXPECT_TRUE(wait_until([&] { return server.ended_sessions() > ended; }));
    // The other session is untouched.
    EXPECT_EQ((x + 1.0).into_data().to_vec<float>(), (std::vector<float>{2, 3, 4}));
  }
}

// ---- uploads -----------------------------------------------------------------------------------

TEST(RemoteServer, EqualUploadsCrossTheWireOnce) {
  OwnServer own;
  const Device dev = own.device();
  Channel& channel = remote_backend(dev).channel();
  std::vector<float> values(std::size_t{2} << 20);  // 8 MiB
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k % 1000) * 0.5f;
  const TensorData data =
      TensorData::from_vec(values, Shape{static_cast<std::int64_t>(values.size())});
  const std::uint64_t hits = channel.cache_hits();
  auto first = Tensor<1>::from_data(data, dev);
  auto second = Tensor<1>::from_data(data, dev);
  EXPECT_EQ(channel.cache_hits(), hits + 1);
  EXPECT_EQ(first.into_data().to_vec<float>(), values);
  EXPECT_EQ(second.into_data().to_vec<float>(), values);
  // The same bytes as another shape are another tensor.
  const auto reshaped = Tensor<2>::from_data(
      TensorData(std::vector<std::byte>(data.bytes().begin(), data.bytes().end()),
                 Shape{2, static_cast<std::int64_t>(values.size() / 2)}, DType::F32),
      dev);
  EXPECT_EQ(channel.cache_hits(), hits + 1);
  EXPECT_EQ(reshaped.shape(), (Shape{2, static_cast<std::int64_t>(values.size() / 2)}));

  // Writing into one of the tensors made from one upload changes neither the other nor the cache.
  first.assign(Tensor<1>::full(first.shape(), -1.0, dev));
  EXPECT_EQ(first.into_data().to_vec<float>(), std::vector<float>(values.size(), -1.f));
  EXPECT_EQ(second.into_data().to_vec<float>(), values);
  second.assign(second * 2.0);
  EXPECT_EQ(second.slice({Slice(1, 3)}).into_data().to_vec<float>(), (std::vector<float>{1, 2}));
  const auto third = Tensor<1>::from_data(data, dev);
  EXPECT_EQ(channel.cache_hits(), hits + 2);
  EXPECT_EQ(third.into_data().to_vec<float>(), values);
  EXPECT_EQ(first.into_data().to_vec<float>(), std::vector<float>(values.size(), -1.f));

  // The server saw one upload of the content (and one of the reshaped copy) and two cache hits.
  own.stop();
  const std::vector<std::string> log = own.log();
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.back().find("2 uploads (16777216 bytes, 2 cache hits)"), std::string::npos)
      << log.back();
}

// A tensor bound from the upload cache (uploads of 1 MiB or more) shares the cached storage until
// a view of it is taken or it is written: then it gets storage of its own, so a view taken before
// an assign shows the new values, as on the local CPU (Tensor::assign's contract), and the
// cache, with every other tensor of that content, keeps the old ones.
TEST(RemoteServer, ViewsOfACachedUploadSeeAnAssign) {
  const std::vector<float> values(std::size_t{2} << 20, 5.f);  // 8 MiB: cached
  const TensorData data =
      TensorData::from_vec(values, Shape{static_cast<std::int64_t>(values.size())});
  for (const Device dev : {Device::cpu(), test::remote_device()}) {
    SCOPED_TRACE(dev.to_string());
    auto uploaded = Tensor<1>::from_data(data, dev);
    const auto view = uploaded.slice({Slice(0, 4)});
    uploaded.assign(Tensor<1>::full(uploaded.shape(), -1.0, dev));
    EXPECT_EQ(view.into_data().to_vec<float>(), std::vector<float>(4, -1.f));
  }
}

// ---- quantized tensors -------------------------------------------------------------------------

// Values of shape [rows, cols], of n(0, 1)'s size, a fixed sequence.
TensorData weight_values(std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t k = 0; k < v.size(); ++k) {
    v[k] = std::sin(0.37f * static_cast<float>(k)) * (0.5f + static_cast<float>(k % 7) * 0.25f);
  }
  return floats(std::move(v), {rows, cols});
}

QuantScheme scheme_of(QuantScheme::Kind kind) { return quant_scheme(kind); }

std::vector<QuantScheme> some_schemes() {
  return {scheme_of(QuantScheme::Kind::Q8_0), scheme_of(QuantScheme::Kind::Q4_0),
          scheme_of(QuantScheme::Kind::Q4_K), int8_channel_scheme()};
}

// Equal TensorData: dtype, scheme, shape and every byte.
void expect_same(const TensorData& got, const TensorData& expected) {
  ASSERT_EQ(got.dtype(), expected.dtype());
  if (got.dtype() == DType::QFloat) {
    EXPECT_EQ(got.scheme(), expected.scheme());
  }
  EXPECT_EQ(got.shape(), expected.shape());
  EXPECT_TRUE(std::ranges::equal(got.bytes(), expected.bytes()));
}

TEST(RemoteServer, QuantizedTensorsRoundTripBitForBit) {
  const Device dev = test::remote_device();
  for (const QuantScheme& scheme : some_schemes()) {
    SCOPED_TRACE(quant_kind_name(scheme.kind));
    const TensorData blocks = weight_values(6, 512).quantize(scheme);
    const auto there = Tensor<2>::from_data(blocks, dev);
    EXPECT_EQ(there.dtype(), DType::QFloat);
    EXPECT_EQ(there.shape(), (Shape{6, 512}));
    expect_same(there.into_data(), blocks);
    const auto moved = Tensor<2>::from_data(blocks, Device::cpu()).to_device(dev);
    EXPECT_EQ(moved.device(), dev);
    expect_same(moved.into_data(), blocks);
    const auto back = moved.to_device(Device::cpu());
    EXPECT_EQ(back.device(), Device::cpu());
    expect_same(back.into_data(), blocks);
    // Through the autodiff and fused forms of the device too.
    expect_same(Tensor<2>::from_data(blocks, dev.autodiff()).into_data(), blocks);
    expect_same(Tensor<2>::from_data(blocks, dev.fused()).to_device(dev).into_data(), blocks);
  }
}

TEST(RemoteServer, LargeQuantizedUploadsAreCachedByScheme) {
  OwnServer own;
  const Device dev = own.device();
  Channel& channel = remote_backend(dev).channel();
  // 1.4 MB of Q5_0 blocks, and the same bytes as Q5_K blocks (22 bytes per 32 values both): the
  // scheme is part of what the cache knows them by.
  const TensorData q5_0 = weight_values(8192, 256).quantize(scheme_of(QuantScheme::Kind::Q5_0));
  const TensorData q5_k =
      TensorData::quantized(std::vector<std::byte>(q5_0.bytes().begin(), q5_0.bytes().end()),
                            q5_0.shape(), scheme_of(QuantScheme::Kind::Q5_K));
  const std::uint64_t hits = channel.cache_hits();
  const auto first = Tensor<2>::from_data(q5_0, dev);
  const auto other = Tensor<2>::from_data(q5_k, dev);
  const auto again = Tensor<2>::from_data(q5_0, dev);
  EXPECT_EQ(channel.cache_hits(), hits + 1);
  expect_same(first.into_data(), q5_0);
  expect_same(other.into_data(), q5_k);
  expect_same(again.into_data(), q5_0);
  // A view of a cached upload (the weight's transpose) gets blocks of its own, the same ones.
  const auto x = Tensor<2>::from_data(weight_values(2, 256), dev);
  const auto local_q = Tensor<2>::from_data(q5_0, Device::cpu());
  const auto local_x = Tensor<2>::from_data(weight_values(2, 256), Device::cpu());
  expect_same(x.matmul(again.transpose()).into_data(),
              local_x.matmul(local_q.transpose()).into_data());
  expect_same(again.narrow(0, 8000, 192).into_data(), local_q.narrow(0, 8000, 192).into_data());
  expect_same(Tensor<2>::from_data(q5_0, dev).into_data(), q5_0);
}

// Every quantized op on the remote device: the server's CPU kernels, the local CPU's bytes.
std::vector<TensorData> quantized_ops(Device dev, const QuantScheme& scheme) {
  const auto q = Tensor<2>::from_data(weight_values(8, 256), dev).quantize(scheme);  // [out, in]
  const auto x = Tensor<2>::from_data(weight_values(3, 256), dev);
  const auto bias =
      Tensor<1>::from_data(TensorData::from_vec(std::vector<float>{1, -2, 3, 0, 5, 6, -7, 8}), dev);
  const auto ids = Tensor<2, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{7, 0, 3, 3, 1, 6}, Shape{2, 3}), dev);
  // Views of whole rows, and a transpose brought back, keep the blocks.
  EXPECT_EQ(q.narrow(0, 2, 3).dtype(), DType::QFloat);
  EXPECT_EQ(q.transpose().dtype(), DType::QFloat);
  EXPECT_EQ(q.transpose().transpose().narrow(0, 1, 2).dtype(), DType::QFloat);
  EXPECT_EQ(q.slice({Slice(0, 2), Slice(0, 64)}).dtype(), DType::F32);
  return {q.into_data(),
          q.dequantize().into_data(),
          q.dequantize(DType::BF16).into_data(),
          x.matmul(q.transpose()).into_data(),
          x.cast(DType::F64).matmul(q.transpose()).into_data(),
          module::linear(x, q, bias).into_data(),
          module::linear(x, q).into_data(),
          module::embedding(q, ids).into_data(),
          q.narrow(0, 2, 3).into_data(),
          q.transpose().into_data(),
          q.transpose().transpose().narrow(0, 1, 2).into_data(),
          q.slice({Slice(0, 2), Slice(0, 64)}).into_data(),
          (q + 1.0).into_data(),
          q.matmul(x.transpose()).into_data()};
}

TEST(RemoteServer, QuantizedOpsEqualTheLocalCpu) {
  const Device dev = test::remote_device();
  for (const QuantScheme& scheme : some_schemes()) {
    SCOPED_TRACE(quant_kind_name(scheme.kind));
    for (const auto& [there, here] :
         {std::pair{dev, Device::cpu()}, std::pair{dev.fused(), Device::cpu().fused()},
          std::pair{dev.autodiff(), Device::cpu()}}) {
      SCOPED_TRACE(there.to_string());
      const std::vector<TensorData> got = quantized_ops(there, scheme);
      const std::vector<TensorData> expected = quantized_ops(here, scheme);
      ASSERT_EQ(got.size(), expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("result " + std::to_string(i));
        expect_same(got[i], expected[i]);
      }
    }
  }
  // A remote quantize gives the bytes the host's encoder gives.
  const TensorData values = weight_values(4, 256);
  expect_same(Tensor<2>::from_data(values, dev).quantize(int8_block_scheme(64)).into_data(),
              values.quantize(int8_block_scheme(64)));
}

// Requantize (Device::set_quant_propagation) and fake quantization on a remote device give the
// local CPU's bytes.
TEST(RemoteServer, RequantizedAndFakeQuantizedResultsEqualTheLocalCpu) {
  const Device dev = test::remote_device();
  const QuantScheme q8 = quant_scheme(QuantScheme::Kind::Q8_0);
  const TensorData values = weight_values(4, 64);
  for (const Device& device : {dev, Device::cpu()}) {
    device.set_quant_propagation(QuantPropagation::Requantize);
  }
  const TensorData got = (Tensor<2>::from_data(values, dev).quantize(q8) * 3.0).into_data();
  const TensorData want =
      (Tensor<2>::from_data(values, Device::cpu()).quantize(q8) * 3.0).into_data();
  for (const Device& device : {dev, Device::cpu()}) {
    device.set_quant_propagation(QuantPropagation::Dequantize);
  }
  EXPECT_EQ(got.dtype(), DType::QFloat);
  expect_same(got, want);
  expect_same(Tensor<2>::from_data(values, dev.autodiff()).fake_quantize(q8).into_data(),
              Tensor<2>::from_data(values, Device::cpu()).fake_quantize(q8).into_data());
}

TEST(RemoteServer, QuantizedErrorsAreTheCpus) {
  for (const Device dev : {Device::cpu(), test::remote_device()}) {
    SCOPED_TRACE(dev.to_string());
    std::vector<float> values(64, 1.f);
    values[5] = std::nanf("");
    const auto nan = Tensor<2>::from_data(floats(values, {2, 32}), dev);
    auto q = Tensor<2>::from_data(weight_values(2, 32), dev).quantize(int8_channel_scheme());
    // The CPU backend refuses a NaN at the call, a server at the read.
    expect_error<InvalidArgument>(
        [&] { nan.quantize(scheme_of(QuantScheme::Kind::Q8_0)).into_data(); }, "quantize",
        {"nan", "flat index 5"});
    // The tensor layer refuses the others at the call, on the client.
    expect_error<UnsupportedOperation>(
        [&] {
          (void)Tensor<2>::from_data(weight_values(1, 256), dev)
              .quantize(scheme_of(QuantScheme::Kind::Q2_K));
        },
        "quantize", {"Q2_K"});
    expect_error<ShapeMismatch>(
        [&] { (void)q.dequantize().narrow(1, 0, 30).quantize(scheme_of(QuantScheme::Kind::Q8_0)); },
        "quantize", {"[2, 30]"});
    expect_error<UnsupportedDType>([&] { q.assign(q); }, "assign", {"qfloat"});
    expect_error<DTypeMismatch>([&] { (void)nan.dequantize(); }, "dequantize", {"not qfloat"});
    expect_error<DTypeMismatch>([&] { (void)nan.cast(DType::QFloat); }, "cast", {"qfloat"});
    // And the session goes on.
    expect_same(q.dequantize().into_data(),
                weight_values(2, 32).quantize(int8_channel_scheme()).dequantize());
  }
}

// A server whose device stores no QFloat (a welcome that offers none) has its device refuse them
// at the call, as that device does locally; the client sends nothing for them.
TEST(RemoteServer, AServerThatCannotStoreQFloatRefusesThemAtTheCall) {
  // Its welcome: the CPU's dtype usage, but none for qfloat (made here: the registry is busy
  // while Device::remote waits for the welcome).
  Welcome welcome;
  welcome.backend_name = "cuda:0";
  for (std::size_t d = 0; d + 1 < kDTypeCount; ++d) {
    for (DTypeUsage u : {DTypeUsage::Storage, DTypeUsage::Arithmetic, DTypeUsage::Accelerated}) {
      if (Device::cpu().dtype_usage(static_cast<DType>(d)).contains(u))
        welcome.usage[d] |= static_cast<std::uint8_t>(u);
    }
  }
  const Bytes welcome_frame =
      encode_frame(FrameKind::Welcome, [&](Writer& out) { write_welcome(out, welcome); });
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string address = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  std::promise<void> done;
  std::thread server([&] {
    asio::ip::tcp::socket socket(io);
    acceptor.accept(socket);
    std::array<std::byte, kFrameHeaderBytes> head;
    asio::read(socket, asio::buffer(head));
    Bytes hello(read_frame_header(head, kMaxHelloBytes).length);
    asio::read(socket, asio::buffer(hello));
    asio::write(socket, asio::buffer(welcome_frame));
    done.get_future().wait();
  });
  struct Stop {  // the server goes however the test ends
    std::promise<void>& done;
    std::thread& thread;
    ~Stop() {
      done.set_value();
      thread.join();
    }
  } stop{done, server};
  const Device dev = Device::remote("remote://" + address, kRemoteToken);
  EXPECT_FALSE(dev.supports_dtype(DType::QFloat));
  EXPECT_TRUE(dev.supports_dtype(DType::F32));
  const TensorData blocks = weight_values(2, 32).quantize(scheme_of(QuantScheme::Kind::Q8_0));
  expect_error<UnsupportedDType>([&] { (void)Tensor<2>::from_data(blocks, dev); }, "from_data",
                                 {"cannot store qfloat"});
  const auto zeros = Tensor<2>::zeros({2, 32}, dev);
  expect_error<UnsupportedDType>([&] { (void)zeros.quantize(scheme_of(QuantScheme::Kind::Q8_0)); },
                                 "quantize", {"cuda:0", "cannot store qfloat"});
}

// A malformed QFloat upload ends its session with a ProtocolError naming what was wrong; a
// well-formed one, read back, comes with its scheme.
TEST(RemoteServer, MalformedQuantizedUploadsEndTheSession) {
  remote::Server& server = test::remote_server();
  const QuantScheme q8 = scheme_of(QuantScheme::Kind::Q8_0);  // 34 bytes per 32 values
  {
    RawClient raw(server.port());
    raw.handshake();
    raw.send(blocks_frame(3, q8, {2, 32}, 68));
    raw.send(commands_frame({request(CommandKind::Read, 9, 3)}));
    const auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value());
    const TensorData data = decode_data(read_reply(reply->second).body);
    EXPECT_EQ(data.scheme(), q8);
    EXPECT_EQ(data.shape(), (Shape{2, 32}));
    EXPECT_EQ(data.bytes().size(), 68u);
  }
  struct Case {
    std::string name;
    std::vector<Bytes> frames;
    std::string expected;  // in the refusal's message
  };
  const std::vector<Case> cases = {
      {"a last dim that is no whole number of blocks",
       {blocks_frame(1, q8, {2, 30}, 64)},
       "not a multiple"},
      {"more bytes than the blocks take", {blocks_frame(1, q8, {2, 32}, 100)}, "of 68 bytes"},
      {"a scheme kiln does not know",
       {blocks_frame(1, QuantScheme{q8.kind, 16}, {2, 16}, 36)},
       "Q8_0 has block size 32, got 16"},
      {"blocks of a scalar", {blocks_frame(1, int8_block_scheme(4), {}, 0)}, "at least one dim"},
      {"chunks that change the scheme",
       {blocks_frame(1, q8, {2, 32}, 34), blocks_frame(1, int8_block_scheme(30), {2, 32}, 34, 34)},
       "agree on the tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::uint64_t ended = server.ended_sessions();
    RawClient raw(server.port());
    raw.handshake();
    for (const Bytes& frame : c.frames) raw.send(frame);
    const auto [code, message] = raw.refusal();
    EXPECT_EQ(code, ErrorCode::ProtocolError) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_TRUE(raw.closed_by_server());
    EXPECT_TRUE(wait_until([&] { return server.ended_sessions() > ended; }));
  }
}

// ---- block replay ------------------------------------------------------------------------------

TEST(RemoteServer, RepeatedStepsAreReplayedAsBlocks) {
  OwnServer own;
  const Device dev = own.device();
  const Channel& channel = remote_backend(dev).channel();
  const Trained remote = train(dev, 8);
  const Trained local = train(Device::cpu(), 8);
  EXPECT_GT(channel.blocks_replayed(), 0u);
  EXPECT_EQ(remote.losses, local.losses);
  EXPECT_EQ(remote.w1, local.w1);
  EXPECT_EQ(remote.w2, local.w2);
  // The loss went down: the steps did something.
  EXPECT_LT(local.losses.back(), local.losses.front());
  own.stop();
  const std::vector<std::string> log = own.log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().find(" 0 blocks run"), std::string::npos) << log.back();
  EXPECT_NE(log.back().find("(0 failed)"), std::string::npos) << log.back();
}

// ---- a client that goes ------------------------------------------------------------------------

TEST(RemoteServer, ClientThatDisconnectsFreesItsMemory) {
  OwnServer own;
  remote::Server& server = own.server();
  const std::int64_t baseline = cpu_bytes_in_use();
  constexpr std::int64_t kElements = std::int64_t{8} << 20;  // 32 MiB of F32
  {
    RawClient raw(own.port());
    raw.handshake(own.token());
    ASSERT_EQ(server.open_sessions(), 1);
    const Bytes bytes(static_cast<std::size_t>(kElements) * 4, std::byte{0x3f});
    raw.send(upload_frame(0, bytes));
    raw.send(commands_frame({full_command(1, kElements, 0.5), request(CommandKind::Sync, 7)}));
    const auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->first.kind, FrameKind::Reply);
    EXPECT_EQ(read_reply(reply->second).request, 7u);
    EXPECT_GE(cpu_bytes_in_use() - baseline, 2 * kElements * 4);
    // Half of a frame, then the socket goes.
    const Bytes another = upload_frame(2, std::vector<std::byte>(1 << 16));
    raw.send(std::span(another).first(1000));
    raw.close();
  }
  EXPECT_TRUE(wait_until([&] { return server.ended_sessions() == 1; }));
  EXPECT_EQ(server.open_sessions(), 0);
  EXPECT_EQ(cpu_bytes_in_use(), baseline);
}

}  // namespace
}  // namespace kiln::remote::server_test

#endif  // KILN_HAVE_REMOTE_SERVER

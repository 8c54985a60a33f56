// One client trains a small MLP through its own `kiln serve` while other threads hammer the
// same server with malformed frames (garbage, truncated frames, bad handshakes, valid handshakes
// followed by bad commands) and connections dropped mid-frame. The training must not notice: its
// losses and weights equal a local CPU run bit for bit; every bad session ends; the server still
// serves; its memory returns to where it was.
#ifdef KILN_HAVE_REMOTE_SERVER

#include <gtest/gtest.h>
#include <kiln/activation.h>
#include <kiln/kiln.h>
#include <poll.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "contract/contract.h"
#include "remote/protocol.h"
#include "remote/server.h"
#include "support/polling.h"
#include "support/remote_frames.h"

namespace kiln::remote::soak_test {
namespace {

using Bytes = std::vector<std::byte>;
using ir::wire::Writer;

constexpr const char* kToken = "soak-token";
constexpr std::uint64_t kSeed = 0x50a6;
constexpr int kMalformed = 1000;
constexpr int kDropped = 100;
constexpr int kAttackers = 3;
constexpr int kSteps = 30;
using test::cpu_bytes_in_use;
using test::kPatience;
using test::wait_until;

// ---- the training client -----------------------------------------------------------------------

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;  // w1, b1, w2, b2 after the last step
};

std::vector<float> uniform(std::mt19937& random, std::size_t n, float scale) {
  std::uniform_real_distribution<float> pick(-scale, scale);
  std::vector<float> values(n);
  for (float& v : values) v = pick(random);
  return values;
}

// An 8 -> 16 -> 1 MLP (tanh) fitted by SGD to a fixed regression task; before_step(k) runs before
// step k (the soak uses it to spread the steps over the attack).
Trained train(Device device, const std::function<void(int)>& before_step) {
  std::mt19937 random(kSeed);
  const Device dev = device.autodiff();
  auto tensor = [&](std::vector<float> values, Shape shape) {
    return Tensor<2>::from_data(TensorData::from_vec(values, std::move(shape)), dev);
  };
  const auto x = tensor(uniform(random, 32 * 8, 1.f), {32, 8});
  const auto y = tensor(uniform(random, 32, 1.f), {32, 1});
  std::vector<Tensor<2>> params = {tensor(uniform(random, 8 * 16, 0.35f), {8, 16}).require_grad(),
                                   tensor(uniform(random, 16, 0.1f), {1, 16}).require_grad(),
                                   tensor(uniform(random, 16, 0.25f), {16, 1}).require_grad(),
                                   tensor(uniform(random, 1, 0.1f), {1, 1}).require_grad()};
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    before_step(step);
    const auto hidden = (x.matmul(params[0]) + params[1]).tanh();
    const auto error = hidden.matmul(params[2]) + params[3] - y;
    const auto loss = (error * error).mean();
    const Gradients grads = loss.backward();
    for (Tensor<2>& p : params) p.inner().assign(p.inner() - p.grad(grads)->inner() * 0.2);
    out.losses.push_back(loss.into_scalar<float>());
  }
  for (const Tensor<2>& p : params) out.weights.push_back(p.into_data().to_vec<float>());
  return out;
}

// ---- the attackers -----------------------------------------------------------------------------

Bytes random_bytes(std::mt19937_64& random, std::size_t n) {
  Bytes bytes(n);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A command an honest client never sends: the server must end the session with a refusal.
Bytes bad_commands(std::mt19937_64& random) {
  Command c;
  switch (random() % 6) {
    case 0:  // a read of an id that holds nothing
      c.kind = CommandKind::Read;
      c.value = 1;
      c.id = 1000 + static_cast<std::uint32_t>(random() % 1000);
      break;
    case 1:  // a free of one
      c.kind = CommandKind::Free;
      c.id = static_cast<std::uint32_t>(random() % 100);
      break;
    case 2:  // a block never defined
      c.kind = CommandKind::Bind;
      c.block = static_cast<std::uint32_t>(random() % 64);
      c.ids = {1, 2};
      break;
    case 3:  // an op on inputs that hold nothing
      c.kind = CommandKind::Op;
      c.op.code = OpCode::add;
      c.op.inputs = {{5}, {6}};
      c.op.outputs = {{7}};
      c.op.output_types = {{DType::F32, Shape{4}}};
      break;
    case 4:  // an op whose result type is a lie
      c.kind = CommandKind::Op;
      c.op.code = OpCode::full;
      c.op.attributes = {Shape{4}, Scalar(1.0), DType::F32, ir::DeviceAttr::of(Device::cpu())};
      c.op.outputs = {{0}};
      c.op.output_types = {{DType::I32, Shape{4}}};
      break;
    default:  // a cached upload nobody sent
      c.kind = CommandKind::FromCache;
      c.id = 3;
      c.value = random() | 1;
      break;
  }
  return test::commands_frame({c});
}

// The bytes of malformed session number k, and whether the server must refuse it with a frame
// (the others may end in a refusal or in the connection closing).
std::pair<Bytes, bool> malformed(int k) {
  std::mt19937_64 random(kSeed + static_cast<std::uint64_t>(k));
  const Bytes good_hello = test::hello_frame(kToken);
  switch (k % 8) {
    case 0:  // garbage before any hello
      return {random_bytes(random, 1 + random() % 64), false};
    case 1: {  // a hello cut short
      Bytes cut = good_hello;
      cut.resize(random() % good_hello.size());
      return {cut, false};
    }
    case 2:  // a wrong token, or none
      return {test::hello_frame(k % 16 == 2 ? "" : "soak-tokeN"), true};
    case 3:  // another version, op contract or magic
      switch (random() % 3) {
        case 0:
          return {test::hello_frame(kToken, kProtocolVersion + 1 + random() % 100), true};
        case 1:
          return {test::hello_frame(kToken, kProtocolVersion, random()), true};
        default:
          return {test::hello_frame(kToken, kProtocolVersion, kBackendContractHash, 0x20544547),
                  true};
      }
    case 4: {  // a good hello, then a commands frame of garbage
      const Bytes body = random_bytes(random, 1 + random() % 200);
      return {good_hello + encode_frame(FrameKind::Commands, [&](Writer& out) { out.raw(body); }),
              false};
    }
    case 5:  // a good hello, then a command an honest client never sends
      return {good_hello + bad_commands(random), true};
    case 6: {  // a good hello, then a valid frame with bytes flipped
      Bytes valid = test::commands_frame({[] {
        Command c;
        c.kind = CommandKind::Op;
        c.op.code = OpCode::full;
        c.op.attributes = {Shape{2, 2}, Scalar(2.5), DType::F32, ir::DeviceAttr::of(Device::cpu())};
        c.op.outputs = {{0}};
        c.op.output_types = {{DType::F32, Shape{2, 2}}};
        return c;
      }()});
      for (int flips = 0; flips < 3; ++flips)
        valid[random() % valid.size()] ^= static_cast<std::byte>(1u << (random() % 8));
      return {good_hello + valid, false};
    }
    default:  // a good hello, then a frame only a server sends, or one over the limit
      if (random() % 2 == 0)
        return {good_hello + encode_frame(FrameKind::Reply, [](Writer& out) { out.u64(1); }), true};
      Bytes header(kFrameHeaderBytes, std::byte{0xff});
      header[4] = static_cast<std::byte>(FrameKind::Upload);
      return {good_hello + header, true};
  }
}

// A connection that sends bytes, closes its sending side and reads until the server closes.
struct Attack {
  int frames = 0;
  std::vector<ErrorCode> refusals;
  std::vector<float> read;  // the values of the last Reply that held data
  bool closed = false;
};

Attack attack(std::uint16_t port, const Bytes& bytes) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::error_code error;
  asio::write(socket, asio::buffer(bytes), error);  // the server may have closed already
  socket.shutdown(asio::ip::tcp::socket::shutdown_send, error);
  Attack result;
  Bytes received;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  for (;;) {
    pollfd poll_fd{socket.native_handle(), POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline || ::poll(&poll_fd, 1, 1000) < 0) break;
    if ((poll_fd.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    std::byte chunk[4096];
    const ssize_t got = ::recv(socket.native_handle(), chunk, sizeof(chunk), 0);
    if (got <= 0) {
      result.closed = true;
      break;
    }
    received.insert(received.end(), chunk, chunk + got);
  }
  // The frames that came back: a Welcome, a Reply now and then, and the refusal.
  std::size_t at = 0;
  while (received.size() - at >= kFrameHeaderBytes) {
    std::array<std::byte, kFrameHeaderBytes> head;
    std::copy_n(received.begin() + static_cast<long>(at), kFrameHeaderBytes, head.begin());
    const FrameHeader header = read_frame_header(head, std::uint64_t{1} << 32);
    if (received.size() - at - kFrameHeaderBytes < header.length) break;
    const std::span<const std::byte> body(received.data() + at + kFrameHeaderBytes, header.length);
    ++result.frames;
    if (header.kind == FrameKind::Refused) result.refusals.push_back(read_refused(body).first);
    if (header.kind == FrameKind::Reply) {
      const Reply reply = read_reply(body);
      if (reply.status == ErrorCode::Ok && !reply.body.empty()) {
        const TensorData data = decode_data(reply.body);
        if (data.dtype() == DType::F32) result.read = data.to_vec<float>();
      }
    }
    at += kFrameHeaderBytes + header.length;
  }
  return result;
}

// A connection that stops halfway through a frame and goes with a reset.
void drop(std::uint16_t port, int k) {
  std::mt19937_64 random(kSeed ^ static_cast<std::uint64_t>(k) << 20);
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
  Bytes bytes;
  Bytes upload = encode_frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(0);
    out.u64(0);
    out.u8(static_cast<std::uint8_t>(DType::F32));
    out.ints(std::vector<std::int64_t>{1 << 14});
    out.u64(0);
    out.u64(std::uint64_t{4} << 14);
    out.raw(Bytes(std::size_t{4} << 14, std::byte{1}));
  });
  if (k % 2 == 0) {
    const Bytes good_hello = test::hello_frame(kToken);
    bytes = good_hello + upload;
    bytes.resize(good_hello.size() + 1 + random() % (upload.size() - 1));
  } else {
    bytes = test::hello_frame(kToken);
    bytes.resize(1 + random() % (bytes.size() - 1));
  }
  asio::error_code error;
  asio::write(socket, asio::buffer(bytes), error);
  socket.set_option(asio::socket_base::linger(true, 0), error);
  socket.close(error);
}

TEST(RemoteSoak, TrainingIsUntouchedByMalformedClients) {
  const Trained local = train(Device::cpu(), [](int) {});
  ASSERT_LT(local.losses.back(), local.losses.front());  // the task is learnt a little

  const std::int64_t baseline = cpu_bytes_in_use();
  ServerOptions options;
  options.port = 0;
  options.token = kToken;
  remote::Server server(options);
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());

  // The attack: kMalformed bad sessions and kDropped dropped ones, spread over kAttackers
  // threads; the training steps are spread over it (step k waits for its share of attacks).
  constexpr int kTotal = kMalformed + kDropped;
  std::atomic<int> attacked{0};
  std::vector<std::vector<Attack>> results(kAttackers);
  std::vector<std::thread> attackers;
  for (int a = 0; a < kAttackers; ++a) {
    attackers.emplace_back([&, a] {
      for (int k = a; k < kTotal; k += kAttackers) {
        if (k < kMalformed) {
          results[a].push_back(attack(server.port(), malformed(k).first));
        } else {
          drop(server.port(), k);
        }
        ++attacked;
      }
    });
  }
  Trained remote;
  std::exception_ptr failed;
  std::thread trainer([&] {
    try {
      const Device dev = Device::remote("remote://" + address, kToken);
      remote = train(dev, [&](int step) {
        const int share = (step * kTotal) / kSteps;
        wait_until([&] { return attacked.load() >= share; });
      });
      dev.sync();  // the frees of the training's tensors reach the server
    } catch (...) {
      failed = std::current_exception();
    }
  });
  for (std::thread& t : attackers) t.join();
  trainer.join();
  if (failed) {
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      FAIL() << "the training client failed: " << e.what();
    }
  }

  // The training did not notice.
  EXPECT_EQ(remote.losses, local.losses);
  EXPECT_EQ(remote.weights, local.weights);

  // Every bad session ended; the ones the server must refuse were refused with the right code.
  EXPECT_TRUE(wait_until([&] {
    return server.ended_sessions() == static_cast<std::uint64_t>(kTotal) &&
           server.open_sessions() == 1;
  })) << server.ended_sessions()
      << " ended, " << server.open_sessions() << " open";
  int refused = 0;
  for (int k = 0; k < kMalformed; ++k) {
    const Attack& result = results[k % kAttackers][k / kAttackers];
    EXPECT_TRUE(result.closed) << "session " << k << " was not closed by the server";
    for (ErrorCode code : result.refusals) {
      EXPECT_TRUE(code == ErrorCode::ProtocolError || code == ErrorCode::AuthenticationFailed)
          << "session " << k << ": refused with code " << static_cast<int>(code);
    }
    if (malformed(k).second) {
      EXPECT_EQ(result.refusals.size(), 1u) << "session " << k << " (kind " << k % 8 << ")";
    }
    refused += static_cast<int>(result.refusals.size());
  }
  EXPECT_GT(refused, kMalformed / 2);

  // The server still serves a new client: a session of its own, then gone.
  {
    const Bytes request =
        test::hello_frame(kToken) +
        test::commands_frame({[] {
                                Command c;
                                c.kind = CommandKind::Op;
                                c.op.code = OpCode::full;
                                c.op.attributes = {Shape{3}, Scalar(4.5), DType::F32,
                                                   ir::DeviceAttr::of(Device::cpu())};
                                c.op.outputs = {{0}};
                                c.op.output_types = {{DType::F32, Shape{3}}};
                                return c;
                              }(),
                              [] {
                                Command c;
                                c.kind = CommandKind::Read;
                                c.value = 1;
                                c.id = 0;
                                return c;
                              }()});
    const Attack fresh = attack(server.port(), request);
    EXPECT_EQ(fresh.frames, 2);  // Welcome and the read's Reply
    EXPECT_TRUE(fresh.refusals.empty());
    EXPECT_EQ(fresh.read, (std::vector<float>{4.5f, 4.5f, 4.5f}));
  }
  EXPECT_TRUE(wait_until([&] { return server.ended_sessions() == kTotal + 1u; }));
  // The training's session still works after all of that.
  const Device dev = Device::remote("remote://" + address, kToken);
  EXPECT_EQ((Tensor<1>::full({2}, 1.5, dev) * 2.0).into_data().to_vec<float>(),
            (std::vector<float>{3, 3}));
  dev.sync();

  // Everything the sessions held is freed (the training's tensors were released above).
  EXPECT_EQ(cpu_bytes_in_use(), baseline);
  server.stop();
  EXPECT_EQ(server.open_sessions(), 0);
  EXPECT_EQ(cpu_bytes_in_use(), baseline);
}

}  // namespace
}  // namespace kiln::remote::soak_test

#endif  // KILN_HAVE_REMOTE_SERVER

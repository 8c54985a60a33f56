// libFuzzer target for the remote protocol (src/remote/protocol.cpp, ir/wire.cpp) and the
// server's session (src/remote/session.cpp): an input is a stream of frames (u32 length, u8 kind,
// body) as a server receives them after the handshake and a client receives the server's.
//
//   Commands, Upload   run by a remote::Session over the CPU backend, with small limits, so ids,
//                      op signatures, remote::infer_types and the backend's kernels all meet
//                      hostile ops; a session that ends (SessionEnded, ProtocolError, another
//                      kiln::Error) leaves the rest of the input to the decoders alone
//   Hello, Welcome,    decoded as the server / the client does (a Reply's body with every
//   Refused, Reply     decode_*: data, type, stats, text)
//
// A decoder must return or throw a ProtocolError, and what it returns must survive the wire again
// (written, read, written: the same bytes); the session may throw any kiln::Error. Any other
// exception, a failed round trip, a sanitizer report, a leak or a crash is a finding. A frame's
// length is read with read_frame_header (limit 1 MiB) and may run past the input: the frame is
// then what is left, so a mutation that changes a body need not fix its length.
//
// The session's replies go to a loopback TCP connection whose other end a thread drains.
//
// KILN_REMOTE_FUZZ_SEEDS=dir writes the seeds (fuzz/corpus/remote_frame) to dir, checks that
// each runs without ending its session, and exits.
#include <array>
#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "contract/contract.h"
#include "ir/wire.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "remote/connection.h"
#include "remote/infer.h"
#include "remote/protocol.h"
#include "remote/session.h"
#include "runtime/registry.h"

namespace {

using namespace kiln;
using ir::wire::Writer;
using remote::FrameKind;

constexpr std::uint64_t kFrameLimit = std::uint64_t{1} << 20;

remote::Limits fuzz_limits() {
  remote::Limits limits;
  limits.max_frame_bytes = kFrameLimit;
  limits.max_session_bytes = std::uint64_t{64} << 20;
  limits.max_tensors = 4096;
  limits.max_blocks = 64;
  limits.max_block_commands = 1024;
  return limits;
}

// A connected loopback pair: the server's end for the sessions' replies, the client's end read
// and dropped by a thread. Made once and never destroyed (the thread reads until the process
// ends).
struct Loopback {
  asio::io_context io;
  asio::ip::tcp::socket client{io};
  std::unique_ptr<remote::Connection> server;
};

remote::Connection& connection() {
  static Loopback* const loopback = [] {
    auto* l = new Loopback;
    asio::ip::tcp::acceptor acceptor(l->io, {asio::ip::address_v4::loopback(), 0});
    l->client.connect(acceptor.local_endpoint());
    asio::ip::tcp::socket accepted(l->io);
    acceptor.accept(accepted);
    l->server = std::make_unique<remote::Connection>(std::move(accepted));
    std::thread([l] {
      std::vector<char> buffer(std::size_t{1} << 16);
      asio::error_code error;
      while (!error) l->client.read_some(asio::buffer(buffer), error);
    }).detach();
    return l;
  }();
  return *loopback->server;
}

Backend& cpu_backend() { return hardware_backend_for(Device::cpu()); }

bool verbose() {
  static const bool on = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  return on;
}

template <class Write>
std::vector<std::byte> encoded(Write&& write) {
  Writer out;
  write(out);
  return std::move(out).take();
}

void expect_same(std::span<const std::byte> a, std::span<const std::byte> b, const char* what) {
  if (!std::ranges::equal(a, b)) {
    std::fprintf(stderr, "remote_frame_fuzz: %s does not survive the wire again\n", what);
    __builtin_trap();
  }
}

// ---- the decoders, as a client and a server use them ----------------------------------------

// Decodes a Commands frame as the server does, and checks that it survives the wire again.
void decode_commands(std::span<const std::byte> body, const remote::Limits& limits) {
  std::vector<remote::Command> commands;
  try {
    commands = remote::read_commands(body, limits);
  } catch (const ProtocolError&) {
    return;  // the session refuses it too
  }
  if (verbose()) {
    for (const remote::Command& c : commands) {
      std::fprintf(stderr, "command %d%s%s\n", static_cast<int>(c.kind),
                   c.kind == remote::CommandKind::Op ? ": " : "",
                   c.kind == remote::CommandKind::Op ? ir::to_string(c.op).c_str() : "");
      for (const remote::Command& inner : c.body) {
        if (inner.kind == remote::CommandKind::Op)
          std::fprintf(stderr, "  block op: %s\n", ir::to_string(inner.op).c_str());
      }
    }
  }
  // Not byte for byte (fields the reader skips, such as attention's scale when it has none, are
  // written as zeros): what was read is written, read and written again unchanged.
  auto write_all = [](const std::vector<remote::Command>& list) {
    return encoded([&](Writer& out) {
      out.count(list.size());
      for (const remote::Command& c : list) remote::write_command(out, c);
    });
  };
  const std::vector<std::byte> once = write_all(commands);
  const std::vector<std::byte> twice = write_all(remote::read_commands(once, limits));
  expect_same(once, twice, "a Commands frame");
}

void decode_client_frame(FrameKind kind, std::span<const std::byte> body) {
  try {
    switch (kind) {
      case FrameKind::Hello: {
        const remote::Hello hello = remote::read_hello(body);
        expect_same(body, encoded([&](Writer& out) { remote::write_hello(out, hello); }),
                    "a Hello");
        return;
      }
      case FrameKind::Welcome: {
        const remote::Welcome welcome = remote::read_welcome(body);
        expect_same(body, encoded([&](Writer& out) { remote::write_welcome(out, welcome); }),
                    "a Welcome");
        return;
      }
      case FrameKind::Refused: {
        const std::pair<remote::ErrorCode, std::string> refused = remote::read_refused(body);
        expect_same(body, encoded([&](Writer& out) {
                      remote::write_refused(out, refused.first, refused.second);
                    }),
                    "a Refused");
        return;
      }
      case FrameKind::Reply:
        break;
      default:
        return;
    }
  } catch (const ProtocolError&) {
    return;
  }
  remote::Reply reply;
  try {
    reply = remote::read_reply(body);
  } catch (const ProtocolError&) {
    return;
  }
  // The client decodes a body by the request it answers; the fuzzer tries them all.
  try {
    const TensorData data = remote::decode_data(reply.body);
    expect_same(reply.body, encoded([&](Writer& out) { ir::wire::write_data(out, data); }),
                "a reply's data");
  } catch (const ProtocolError&) {
  }
  try {
    const ir::TensorType type = remote::decode_type(reply.body);
    expect_same(reply.body, encoded([&](Writer& out) { out.type(type); }), "a reply's type");
  } catch (const ProtocolError&) {
  }
  try {
    const MemoryStats stats = remote::decode_stats(reply.body);
    expect_same(reply.body, encoded([&](Writer& out) { remote::write_stats(out, stats); }),
                "a reply's stats");
  } catch (const ProtocolError&) {
  }
  try {
    const std::string text = remote::decode_text(reply.body);
    expect_same(reply.body, encoded([&](Writer& out) { out.text(text); }), "a reply's text");
  } catch (const ProtocolError&) {
  }
}

// Runs the frames of an input; false when the session ended.
bool run_frames(std::span<const std::byte> rest) {
  const remote::Limits limits = fuzz_limits();
  std::optional<remote::Session> session;
  session.emplace(cpu_backend(), limits, connection());
  bool ended = false;
  while (rest.size() >= remote::kFrameHeaderBytes) {
    remote::FrameHeader header;
    try {
      header = remote::read_frame_header(rest.first<remote::kFrameHeaderBytes>(), kFrameLimit);
    } catch (const ProtocolError&) {
      break;  // a server drops the connection, a client fails it
    }
    rest = rest.subspan(remote::kFrameHeaderBytes);
    // A body of its own, so a read past its end is one past an allocation.
    const std::size_t length = std::min<std::size_t>(header.length, rest.size());
    const std::vector<std::byte> body(rest.begin(),
                                      rest.begin() + static_cast<std::ptrdiff_t>(length));
    rest = rest.subspan(length);
    switch (header.kind) {
      case FrameKind::Commands:
        decode_commands(body, limits);
        [[fallthrough]];
      case FrameKind::Upload:
        if (!session) {
          if (header.kind == FrameKind::Upload) {
            try {
              (void)remote::read_upload(body);
            } catch (const ProtocolError&) {
            }
          }
          break;
        }
        try {
          session->handle(header.kind, body);
        } catch (const Error& e) {
          // The server ends the session (and tells the client why).
          if (verbose()) std::fprintf(stderr, "session ended: %s\n", e.what());
          session.reset();
          ended = true;
        }
        break;
      default:
        decode_client_frame(header.kind, body);
    }
  }
  if (session && verbose()) {
    const remote::SessionTotals& t = session->totals();
    std::fprintf(
        stderr, "session: %llu ops (%llu failed), %llu uploads, %llu reads, %llu blocks\n",
        static_cast<unsigned long long>(t.ops), static_cast<unsigned long long>(t.failed_ops),
        static_cast<unsigned long long>(t.uploads), static_cast<unsigned long long>(t.reads),
        static_cast<unsigned long long>(t.blocks_run));
  }
  return !ended;
}

// ---- the seeds ---------------------------------------------------------------------------------

// Builds a client's commands: ops over ids numbered in order, their result types from
// remote::infer_types as the client has them.
struct Script {
  std::vector<ir::TensorType> types;
  std::vector<remote::Command> commands;

  std::uint32_t op(OpCode code, std::vector<std::uint32_t> inputs,
                   std::vector<ir::Attribute> attributes) {
    ir::Op op;
    op.code = code;
    std::vector<const ir::TensorType*> input_types;
    for (std::uint32_t id : inputs) {
      op.inputs.push_back({id});
      input_types.push_back(id == ir::kNoTensor.index ? nullptr : &types.at(id));
    }
    op.attributes = std::move(attributes);
    const std::vector<ir::TensorType> results = remote::infer_types(op, input_types);
    const auto first = static_cast<std::uint32_t>(types.size());
    for (ir::TensorType type : results) {
      for (std::int64_t& dim : type.shape.vector()) dim = dim < 0 ? 0 : dim;  // value-shaped
      op.outputs.push_back({static_cast<std::uint32_t>(types.size())});
      op.output_types.push_back(type);
      types.push_back(type);
    }
    remote::Command command;
    command.op = std::move(op);
    commands.push_back(std::move(command));
    return first;
  }
  std::uint32_t data(std::vector<float> values, Shape shape) {
    return op(OpCode::from_data, {},
              {TensorData::from_vec(values, std::move(shape)), ir::DeviceAttr::of(Device::cpu())});
  }
  std::uint32_t ints(std::vector<std::int64_t> values, Shape shape) {
    return op(OpCode::from_data, {},
              {TensorData::from_vec(values, std::move(shape)), ir::DeviceAttr::of(Device::cpu())});
  }
  void plain(remote::CommandKind kind, std::uint64_t value = 0, std::uint32_t id = 0,
             std::uint32_t other = 0) {
    remote::Command command;
    command.kind = kind;
    command.value = value;
    command.id = id;
    command.other = other;
    commands.push_back(std::move(command));
  }
  std::vector<std::byte> frame() const {
    return encoded([&](Writer& out) {
      const std::size_t start = remote::begin_frame(out, FrameKind::Commands);
      out.count(commands.size());
      for (const remote::Command& c : commands) remote::write_command(out, c);
      remote::end_frame(out, start);
    });
  }
};

template <class Write>
std::vector<std::byte> frame(FrameKind kind, Write&& write) {
  return encoded([&](Writer& out) {
    const std::size_t start = remote::begin_frame(out, kind);
    write(out);
    remote::end_frame(out, start);
  });
}

std::vector<std::byte> upload_frame(std::uint32_t id, std::uint64_t hash, const TensorData& data,
                                    std::uint64_t offset, std::size_t n) {
  return frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(id);
    out.u64(hash);
    ir::wire::write_data_head(out, data);
    out.u64(offset);
    out.u64(n);
    out.raw(data.bytes().subspan(offset, n));
  });
}

std::vector<std::vector<std::byte>> seed_ops_basic() {
  Script s;
  const auto a = s.data({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto b = s.data({6, 5, 4, 3, 2, 1}, {3, 2});
  const auto c = s.op(OpCode::matmul, {a, b}, {});
  const auto d = s.op(OpCode::sum_dim, {c}, {std::int64_t{1}});
  s.op(OpCode::exp, {d}, {});
  const auto f = s.op(OpCode::reshape, {a}, {Shape{3, 2}});
  s.op(OpCode::add, {f, b}, {});
  s.op(OpCode::mul_scalar, {a}, {Scalar(0.5)});
  s.op(OpCode::cast, {a}, {DType::I64});
  s.op(OpCode::argmax,
       {
           a,
       },
       {std::int64_t{1}, DType::I64});
  s.op(OpCode::softmax, {a}, {std::int64_t{0}});
  s.op(OpCode::cat, {a, a}, {std::int64_t{0}});
  s.op(OpCode::slice, {a}, {ResolvedSlices{{0, 1, 1}, {0, 2, 2}}});
  s.op(OpCode::permute, {a}, {Axes{1, 0}});
  s.op(OpCode::expand, {d}, {Shape{2, 2}});
  s.op(OpCode::greater_elem, {a}, {Scalar(std::int64_t{3})});
  s.op(OpCode::sort_with_indices, {b}, {std::int64_t{0}, true, DType::I64});
  s.plain(remote::CommandKind::Read, 1, c);
  s.plain(remote::CommandKind::Describe, 2, d);
  return {s.frame()};
}

std::vector<std::vector<std::byte>> seed_ops_nn() {
  Script s;
  const auto x = s.data(std::vector<float>(16, 0.25f), {1, 1, 4, 4});
  const auto w = s.data(std::vector<float>(9, 1.0f), {1, 1, 3, 3});
  const auto bias = s.data({0.5f}, {1});
  s.op(OpCode::conv, {x, w, bias},
       {ConvOptions{.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1}});
  s.op(OpCode::max_pool_with_indices, {x},
       {PoolOptions{.kernel_size = {2, 2}, .stride = {2, 2}, .padding = {0, 0}, .dilation = {1, 1}},
        DType::I64});
  s.op(OpCode::avg_pool, {x},
       {PoolOptions{
           .kernel_size = {2, 2}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}}});
  s.op(OpCode::interpolate, {x},
       {Axes{8, 8}, InterpolateOptions{InterpolateMode::Bilinear, false}});
  const auto table = s.data({1, 2, 3, 4, 5, 6}, {3, 2});
  const auto index = s.ints({2, 0, 1}, {3});
  s.op(OpCode::embedding, {table, index}, {});
  s.op(OpCode::select, {table, index}, {std::int64_t{0}});
  const auto gamma = s.data({1, 1}, {2});
  s.op(OpCode::layer_norm, {table, gamma, ir::kNoTensor.index}, {1e-5});
  const auto q = s.data(std::vector<float>(8, 0.5f), {1, 1, 2, 4});
  s.op(OpCode::attention, {q, q, q, ir::kNoTensor.index, ir::kNoTensor.index},
       {AttentionOptions{std::nullopt, true}});
  s.op(OpCode::cumsum, {table}, {std::int64_t{0}});
  s.op(OpCode::topk_with_indices, {table}, {std::int64_t{1}, std::int64_t{1}, true, DType::I64});
  s.op(OpCode::arange, {},
       {std::int64_t{0}, std::int64_t{10}, std::int64_t{3}, DType::I64,
        ir::DeviceAttr::of(Device::cpu())});
  s.op(OpCode::random, {},
       {Shape{3, 3}, Distribution::normal(0, 1), DType::F32, ir::DeviceAttr::of(Device::cpu())});
  s.op(OpCode::full, {},
       {Shape{2, 2}, Scalar(std::int64_t{7}), DType::I32, ir::DeviceAttr::of(Device::cpu())});
  const auto mask = s.op(OpCode::greater_elem, {table}, {Scalar(2.5)});
  s.op(OpCode::mask_select, {table, mask}, {});
  s.op(OpCode::unfold, {table}, {std::int64_t{0}, std::int64_t{2}, std::int64_t{1}});
  s.plain(remote::CommandKind::Sync, 3);
  return {s.frame()};
}

std::vector<std::vector<std::byte>> seed_session() {
  Script s;
  const auto a = s.data({1, 2, 3, 4}, {2, 2});
  const auto b = s.data({4, 3, 2, 1}, {2, 2});
  const auto c = s.op(OpCode::add, {a, b}, {});
  const auto wrong = s.data({1, 2, 3}, {3});
  // Fails on the server (shapes that do not broadcast): kept, then read back as its error.
  ir::Op failing;
  failing.code = OpCode::add;
  failing.inputs = {{a}, {wrong}};
  failing.outputs = {{static_cast<std::uint32_t>(s.types.size())}};
  failing.output_types = {{DType::F32, Shape{2, 2}}};
  s.types.push_back(failing.output_types[0]);
  remote::Command fail_command;
  fail_command.op = failing;
  s.commands.push_back(fail_command);
  s.plain(remote::CommandKind::Read, 10, failing.outputs[0].index);
  s.plain(remote::CommandKind::Assign, 0, c, b);
  s.plain(remote::CommandKind::Free, 0, a);
  s.plain(remote::CommandKind::Stats, 11);
  s.plain(remote::CommandKind::Seed, 1234);
  s.plain(remote::CommandKind::Cleanup);
  s.plain(remote::CommandKind::ResetPeak);
  // A block over local ids 0 (in), 1 and 2 (out): run once when defined, then again.
  remote::Command block;
  block.kind = remote::CommandKind::Block;
  block.block = 3;
  {
    Script body;
    body.types = {{DType::F32, Shape{2, 2}}};
    body.op(OpCode::mul, {0, 0}, {});
    body.op(OpCode::neg, {1}, {});
    body.plain(remote::CommandKind::Free, 0, 1);
    block.body = body.commands;
  }
  const auto next = static_cast<std::uint32_t>(s.types.size());
  block.ids = {b, next, next + 1};
  s.commands.push_back(block);
  remote::Command bind;
  bind.kind = remote::CommandKind::Bind;
  bind.block = 3;
  bind.ids = {next + 1, next + 2, next + 3};
  s.commands.push_back(bind);
  s.plain(remote::CommandKind::Read, 12, next + 3);
  return {s.frame()};
}

std::vector<std::vector<std::byte>> seed_upload() {
  const TensorData cached = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const TensorData chunked = TensorData::from_vec(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {6});
  std::vector<std::vector<std::byte>> frames;
  frames.push_back(upload_frame(0, 0x1234, cached, 0, cached.bytes().size()));
  frames.push_back(upload_frame(1, 0, chunked, 0, 8));
  frames.push_back(upload_frame(1, 0, chunked, 8, 16));
  Script s;
  s.types = {{DType::F32, Shape{2, 2}}, {DType::I32, Shape{6}}, {DType::F32, Shape{2, 2}}};
  s.plain(remote::CommandKind::FromCache, 0x1234, 2);
  s.op(OpCode::add, {0, 2}, {});
  s.op(OpCode::sum, {1}, {});
  s.plain(remote::CommandKind::Read, 1, 3);
  s.plain(remote::CommandKind::Evict, 0x1234);
  frames.push_back(s.frame());
  return frames;
}

// QFloat blocks, uploaded and made by quantize: viewed, multiplied, looked up, decoded, read.
std::vector<std::vector<std::byte>> seed_quantized() {
  std::vector<float> values(2 * 64);
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k % 9) - 4.f;
  const TensorData blocks =
      TensorData::from_vec(values, {2, 64}).quantize(quant_scheme(QuantScheme::Kind::Q4_0));
  std::vector<std::vector<std::byte>> frames;
  frames.push_back(upload_frame(0, 0, blocks, 0, blocks.bytes().size()));
  Script s;
  s.types = {remote::type_of(blocks)};
  const auto x = s.data(values, {2, 64});
  const auto q8 = s.op(OpCode::quantize, {x}, {quant_scheme(QuantScheme::Kind::Q8_0)});
  const auto t = s.op(OpCode::swap_dims, {0}, {std::int64_t{0}, std::int64_t{1}});
  s.op(OpCode::matmul, {x, t}, {});
  s.op(OpCode::linear, {x, t, ir::kNoTensor.index}, {});
  s.op(OpCode::dequantize, {q8}, {DType::BF16});
  s.op(OpCode::slice, {q8}, {ResolvedSlices{{1, 1, 1}, {0, 64, 1}}});
  s.op(OpCode::permute, {t}, {Axes{1, 0}});
  s.op(OpCode::embedding, {0, s.ints({1, 0, 1}, {3})}, {});
  s.plain(remote::CommandKind::Read, 1, q8);
  s.plain(remote::CommandKind::Read, 2, t);
  frames.push_back(s.frame());
  return frames;
}

std::vector<std::vector<std::byte>> seed_hello() {
  remote::Hello hello;
  hello.contract = kBackendContractHash;
  hello.token = "secret";
  return {frame(FrameKind::Hello, [&](Writer& out) { remote::write_hello(out, hello); })};
}

std::vector<std::vector<std::byte>> seed_client() {
  remote::Welcome welcome;
  welcome.backend_name = "cpu";
  welcome.settings = cpu_backend().default_settings();
  welcome.usage.fill(3);
  welcome.limits = fuzz_limits();
  std::vector<std::vector<std::byte>> frames;
  frames.push_back(
      frame(FrameKind::Welcome, [&](Writer& out) { remote::write_welcome(out, welcome); }));
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 1, remote::ErrorCode::Ok);
    ir::wire::write_data(out, TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  }));
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 2, remote::ErrorCode::Ok);
    out.type({DType::I64, Shape{3, 0, 2}});
  }));
  const QuantScheme q4 = quant_scheme(QuantScheme::Kind::Q4_0);
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 5, remote::ErrorCode::Ok);
    ir::wire::write_data(out, TensorData::full({2, 32}, 1.5, DType::F32).quantize(q4));
  }));
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 6, remote::ErrorCode::Ok);
    out.type({DType::QFloat, Shape{32, 2}, q4, {1, 0}});
  }));
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 3, remote::ErrorCode::Ok);
    remote::write_stats(out, MemoryStats{1024, 4096, 2048});
  }));
  frames.push_back(frame(FrameKind::Reply, [&](Writer& out) {
    remote::write_reply_header(out, 4, remote::ErrorCode::ShapeMismatch);
    out.text("[add] shapes [2, 2] and [3] do not broadcast");
  }));
  frames.push_back(frame(FrameKind::Refused, [&](Writer& out) {
    remote::write_refused(out, remote::ErrorCode::AuthenticationFailed, "[remote] wrong token");
  }));
  return frames;
}

void write_seeds(const std::string& directory) {
  const std::pair<const char*, std::vector<std::vector<std::byte>> (*)()> seeds[] = {
      {"ops_basic", seed_ops_basic}, {"ops_nn", seed_ops_nn},       {"session", seed_session},
      {"upload", seed_upload},       {"quantized", seed_quantized}, {"hello", seed_hello},
      {"client", seed_client}};
  for (const auto& [name, make] : seeds) {
    std::vector<std::byte> bytes;
    for (const std::vector<std::byte>& f : make()) bytes.insert(bytes.end(), f.begin(), f.end());
    const bool ran = run_frames(bytes);
    std::fprintf(stderr, "%s: %zu bytes, %s\n", name, bytes.size(),
                 ran ? "session ran to the end" : "SESSION ENDED");
    if (!ran) std::exit(1);
    std::ofstream(directory + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The session's limit bounds the values it holds; this bounds a kernel's scratch too, so an op
  // past it is an OutOfMemory the session keeps, not an exhausted machine.
  setenv("KILN_CPU_MEMORY_LIMIT", "268435456", 0);
  setenv("OMP_NUM_THREADS", "1", 0);
  if (const char* directory = std::getenv("KILN_REMOTE_FUZZ_SEEDS")) {
    write_seeds(directory);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run_frames({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}

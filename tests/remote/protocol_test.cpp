// The remote protocol's frames (src/remote/protocol.h): every frame and command kind written and
// read back equal; every malformed body (truncated anywhere, bad enum values, counts past the
// body, a block inside a block, trailing bytes, a frame over the limit) refused with a
// kiln::ProtocolError, never a crash or another exception; same_token; and a fixed-seed loop of
// random mutations of valid frames that may only parse or throw ProtocolError.
#ifdef KILN_HAVE_REMOTE_SERVER

#include "remote/protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "contract/contract.h"
#include "kiln/quant.h"

namespace kiln::remote {
namespace {

using ir::wire::Writer;
using Bytes = std::vector<std::byte>;

// ---- building frames ---------------------------------------------------------------------------

std::span<const std::byte> body_of(const Bytes& whole) {
  return std::span<const std::byte>(whole).subspan(kFrameHeaderBytes);
}

ir::TensorType type_of(DType dtype, Shape shape) { return {dtype, std::move(shape)}; }
// A QFloat type: Q4_0 blocks, seen through axes.
ir::TensorType q4_type(Shape shape, Axes axes = {}) {
  return {DType::QFloat, std::move(shape), quant_scheme(QuantScheme::Kind::Q4_0), std::move(axes)};
}

ir::Op make_op(OpCode code, std::vector<std::uint32_t> inputs,
               std::vector<ir::Attribute> attributes, std::vector<ir::TensorType> types,
               std::uint32_t first_output) {
  ir::Op op;
  op.code = code;
  for (std::uint32_t id : inputs) op.inputs.push_back({id});
  op.attributes = std::move(attributes);
  for (std::size_t i = 0; i < types.size(); ++i)
    op.outputs.push_back({first_output + static_cast<std::uint32_t>(i)});
  op.output_types = std::move(types);
  return op;
}

// One real op of ops.def for every attribute kind of the IR (and an absent optional tensor).
std::vector<ir::Op> ops_with_every_attribute() {
  const Shape s{2, 3};
  std::vector<ir::Op> ops;
  ops.push_back(make_op(OpCode::full, {},
                        {Shape{2, 3}, Scalar(1.5), DType::F32, ir::DeviceAttr::of(Device::cpu())},
                        {type_of(DType::F32, s)}, 10));
  ops.push_back(make_op(OpCode::full, {},
                        {Shape{4}, Scalar(std::int64_t{-7}), DType::I64,
                         ir::DeviceAttr{DeviceKind::Remote, 0, true, true, "remote://h:1"}},
                        {type_of(DType::I64, Shape{4})}, 11));
  ops.push_back(make_op(
      OpCode::full, {},
      {Shape{1}, Scalar(std::uint64_t{1} << 63), DType::U64, ir::DeviceAttr::of(Device::cpu())},
      {type_of(DType::U64, Shape{1})}, 12));
  ops.push_back(make_op(OpCode::full, {},
                        {Shape{1}, Scalar(true), DType::Bool, ir::DeviceAttr::of(Device::cpu())},
                        {type_of(DType::Bool, Shape{1})}, 13));
  ops.push_back(
      make_op(OpCode::sum_dim, {1}, {std::int64_t{1}}, {type_of(DType::F32, {2, 1})}, 14));
  ops.push_back(make_op(OpCode::sort, {1}, {std::int64_t{0}, true}, {type_of(DType::F32, s)}, 15));
  ops.push_back(make_op(OpCode::layer_norm, {1, 2, ir::kNoTensor.index}, {1e-5},
                        {type_of(DType::F32, s)}, 16));
  ops.push_back(make_op(OpCode::cast, {1}, {DType::F64}, {type_of(DType::F64, s)}, 17));
  ops.push_back(make_op(OpCode::permute, {1}, {Axes{1, 0}}, {type_of(DType::F32, {3, 2})}, 18));
  ops.push_back(make_op(OpCode::slice, {1}, {ResolvedSlices{{0, 2, 1}, {2, 1, -1}}},
                        {type_of(DType::F32, {2, 1})}, 19));
  ops.push_back(make_op(
      OpCode::random, {},
      {Shape{5}, Distribution::normal(0.5, 2), DType::F32, ir::DeviceAttr::of(Device::cpu())},
      {type_of(DType::F32, Shape{5})}, 20));
  ops.push_back(make_op(OpCode::scatter, {1, 3, 4}, {std::int64_t{0}, IndexingUpdate::Max},
                        {type_of(DType::F32, s)}, 21));
  ops.push_back(make_op(OpCode::all_reduce, {1},
                        {ReduceOperation::Max, ir::GroupAttr::of(ProcessGroup::single())},
                        {type_of(DType::F32, s)}, 22));
  ops.push_back(make_op(OpCode::conv, {5, 6, ir::kNoTensor.index},
                        {ConvOptions{{1, 2}, {0, 1}, {1, 1}, 1}},
                        {type_of(DType::F32, {1, 4, 3, 3})}, 23));
  ops.push_back(make_op(OpCode::conv_transpose, {5, 6, 7},
                        {ConvTransposeOptions{{2, 2}, {1, 1}, {1, 0}, {1, 1}, 2}},
                        {type_of(DType::F32, {1, 4, 6, 6})}, 24));
  ops.push_back(make_op(OpCode::avg_pool, {5},
                        {PoolOptions{{2, 2}, {2, 2}, {0, 0}, {1, 1}, true, false}},
                        {type_of(DType::F32, {1, 2, 2, 2})}, 25));
  ops.push_back(make_op(OpCode::unfold_patches, {5},
                        {UnfoldOptions{{2, 2}, {1, 1}, {0, 0}, {1, 1}}},
                        {type_of(DType::F32, {1, 8, 9})}, 26));
  ops.push_back(make_op(OpCode::interpolate, {5},
                        {Axes{8, 8}, InterpolateOptions{InterpolateMode::Bicubic, true}},
                        {type_of(DType::F32, {1, 2, 8, 8})}, 27));
  ops.push_back(make_op(OpCode::attention, {8, 8, 8, ir::kNoTensor.index, 9},
                        {AttentionOptions{0.125, true}}, {type_of(DType::F32, {1, 2, 4, 8})}, 28));
  ops.push_back(make_op(OpCode::attention, {8, 8, 8, 9, ir::kNoTensor.index},
                        {AttentionOptions{std::nullopt, false}},
                        {type_of(DType::F32, {1, 2, 4, 8})}, 29));
  ops.push_back(make_op(OpCode::quantize, {1}, {QuantScheme{QuantScheme::Kind::Q4_0, 32}},
                        {q4_type({2, 32})}, 30));
  ops.push_back(make_op(OpCode::permute, {30}, {Axes{1, 0}}, {q4_type({32, 2}, {1, 0})}, 33));
  ops.push_back(make_op(OpCode::from_data, {},
                        {TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 5, 6}, s),
                         ir::DeviceAttr::of(Device::cpu())},
                        {type_of(DType::F32, s)}, 31));
  ops.push_back(make_op(OpCode::sort_with_indices, {1}, {std::int64_t{1}, false, DType::I32},
                        {type_of(DType::F32, s), type_of(DType::I32, s)}, 32));
  return ops;
}

Command op_command(ir::Op op) {
  Command c;
  c.kind = CommandKind::Op;
  c.op = std::move(op);
  return c;
}

Command simple(CommandKind kind, std::uint32_t id = 0, std::uint64_t value = 0,
               std::uint32_t other = 0) {
  Command c;
  c.kind = kind;
  c.id = id;
  c.value = value;
  c.other = other;
  return c;
}

// One command of every kind, a Block with ops, a free and an assign among them.
std::vector<Command> every_command() {
  std::vector<Command> commands;
  commands.push_back(op_command(ops_with_every_attribute()[0]));
  commands.push_back(simple(CommandKind::Free, 7));
  commands.push_back(simple(CommandKind::Assign, 3, 0, 4));
  commands.push_back(simple(CommandKind::Read, 5, 0x0102030405060708u));
  commands.push_back(simple(CommandKind::Describe, 6, 99));
  commands.push_back(simple(CommandKind::Sync, 0, 100));
  commands.push_back(simple(CommandKind::Stats, 0, 101));
  commands.push_back(simple(CommandKind::Seed, 0, 0xfeedfacecafebeefu));
  commands.push_back(simple(CommandKind::Cleanup));
  commands.push_back(simple(CommandKind::ResetPeak));
  commands.push_back(simple(CommandKind::FromCache, 8, 0xabcdefu));
  commands.push_back(simple(CommandKind::Evict, 0, 0xabcdefu));
  Command block;
  block.kind = CommandKind::Block;
  block.block = 3;
  block.body.push_back(op_command(make_op(OpCode::add, {0, 1}, {}, {type_of(DType::F32, {4})}, 2)));
  block.body.push_back(op_command(ops_with_every_attribute()[9]));
  block.body.push_back(simple(CommandKind::Assign, 0, 0, 2));
  block.body.push_back(simple(CommandKind::Free, 2));
  block.ids = {40, 41, 42};
  commands.push_back(block);
  Command bind;
  bind.kind = CommandKind::Bind;
  bind.block = 3;
  bind.ids = {50, 51, 52};
  commands.push_back(bind);
  return commands;
}

Bytes commands_frame(const std::vector<Command>& commands) {
  return encode_frame(FrameKind::Commands, [&](Writer& out) {
    out.count(commands.size());
    for (const Command& c : commands) write_command(out, c);
  });
}

void expect_same(const Command& a, const Command& b, const std::string& where) {
  EXPECT_EQ(a.kind, b.kind) << where;
  EXPECT_TRUE(a.op == b.op) << where << ": " << ir::to_string(a.op) << " vs "
                            << ir::to_string(b.op);
  EXPECT_EQ(a.id, b.id) << where;
  EXPECT_EQ(a.other, b.other) << where;
  EXPECT_EQ(a.value, b.value) << where;
  EXPECT_EQ(a.block, b.block) << where;
  EXPECT_EQ(a.ids, b.ids) << where;
  ASSERT_EQ(a.body.size(), b.body.size()) << where;
  for (std::size_t i = 0; i < a.body.size(); ++i)
    expect_same(a.body[i], b.body[i], where + " body " + std::to_string(i));
}

Hello test_hello() {
  return Hello{kProtocolMagic, kProtocolVersion, kBackendContractHash, "s3cret"};
}

Welcome test_welcome() {
  Welcome w;
  w.backend_name = "cpu";
  w.settings = {DType::F64, DType::I32, DType::Bool};
  for (std::size_t d = 0; d < kDTypeCount; ++d) w.usage[d] = static_cast<std::uint8_t>(d % 8);
  w.limits = {123456, 987654321, 77, 11, 22};
  return w;
}

TensorData test_data() {
  return TensorData::from_vec(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 1e30f, -0.f}, Shape{3, 2});
}

Bytes upload_frame(std::span<const std::byte> chunk, std::uint64_t offset) {
  return encode_frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(9);
    out.u64(0x1234);
    out.u8(static_cast<std::uint8_t>(DType::F32));
    out.ints(std::vector<std::int64_t>{3, 2});
    out.u64(offset);
    out.u64(chunk.size());
    out.raw(chunk);
  });
}

// Q4_K blocks of [2, 256], as the client uploads them (its data head, then the chunk).
TensorData test_blocks() {
  std::vector<float> values(512);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  return TensorData::from_vec(values, Shape{2, 256})
      .quantize(quant_scheme(QuantScheme::Kind::Q4_K));
}
Bytes blocks_upload_frame() {
  const TensorData data = test_blocks();
  return encode_frame(FrameKind::Upload, [&](Writer& out) {
    out.u32(4);
    out.u64(0);
    ir::wire::write_data_head(out, data);
    out.u64(0);
    out.u64(data.bytes().size());
    out.raw(data.bytes());
  });
}

Bytes data_reply_frame() {
  return encode_frame(FrameKind::Reply, [](Writer& out) {
    write_reply_header(out, 42, ErrorCode::Ok);
    ir::wire::write_data(out, test_data());
  });
}

// Every frame the parser below reads, valid, with the kind it is read as. A Reply's body is
// decoded as the waiting request would (data, type, stats or text).
enum class Body {
  Hello,
  Welcome,
  Refused,
  Commands,
  Upload,
  DataReply,
  TypeReply,
  StatsReply,
  TextReply
};
struct Sample {
  Body body;
  Bytes bytes;
};

std::vector<Sample> valid_frames() {
  std::vector<Sample> samples;
  samples.push_back({Body::Hello, encode_frame(FrameKind::Hello, [](Writer& out) {
                       write_hello(out, test_hello());
                     })});
  samples.push_back({Body::Welcome, encode_frame(FrameKind::Welcome, [](Writer& out) {
                       write_welcome(out, test_welcome());
                     })});
  samples.push_back({Body::Refused, encode_frame(FrameKind::Refused, [](Writer& out) {
                       write_refused(out, ErrorCode::AuthenticationFailed, "[remote] no");
                     })});
  samples.push_back({Body::Commands, commands_frame(every_command())});
  std::vector<Command> ops;
  for (ir::Op& op : ops_with_every_attribute()) ops.push_back(op_command(std::move(op)));
  samples.push_back({Body::Commands, commands_frame(ops)});
  const TensorData data = test_data();
  samples.push_back({Body::Upload, upload_frame(data.bytes().subspan(8), 8)});
  samples.push_back({Body::Upload, blocks_upload_frame()});
  samples.push_back({Body::DataReply, data_reply_frame()});
  samples.push_back({Body::DataReply, encode_frame(FrameKind::Reply, [](Writer& out) {
                       write_reply_header(out, 43, ErrorCode::Ok);
                       ir::wire::write_data(out, test_blocks());
                     })});
  samples.push_back({Body::TypeReply, encode_frame(FrameKind::Reply, [](Writer& out) {
                       write_reply_header(out, 7, ErrorCode::Ok);
                       out.type(type_of(DType::BF16, {0, 5, 1}));
                     })});
  samples.push_back({Body::TypeReply, encode_frame(FrameKind::Reply, [](Writer& out) {
                       write_reply_header(out, 7, ErrorCode::Ok);
                       out.type(q4_type({32, 2, 3}, {2, 0, 1}));
                     })});
  samples.push_back({Body::StatsReply, encode_frame(FrameKind::Reply, [](Writer& out) {
                       write_reply_header(out, 8, ErrorCode::Ok);
                       write_stats(out, MemoryStats{1, 2, 3});
                     })});
  samples.push_back({Body::TextReply, encode_frame(FrameKind::Reply, [](Writer& out) {
                       write_reply_header(out, 9, ErrorCode::OutOfMemory);
                       out.text("[full] too big");
                     })});
  return samples;
}

// Reads body as kind (the whole frame, as a server or client would); throws what the readers do.
void parse(Body kind, std::span<const std::byte> body, const Limits& limits = {}) {
  switch (kind) {
    case Body::Hello:
      read_hello(body);
      return;
    case Body::Welcome:
      read_welcome(body);
      return;
    case Body::Refused:
      read_refused(body);
      return;
    case Body::Commands:
      read_commands(body, limits);
      return;
    case Body::Upload:
      read_upload(body);
      return;
    case Body::DataReply:
      decode_data(read_reply(body).body);
      return;
    case Body::TypeReply:
      decode_type(read_reply(body).body);
      return;
    case Body::StatsReply:
      decode_stats(read_reply(body).body);
      return;
    case Body::TextReply:
      decode_text(read_reply(body).body);
      return;
  }
}

// "ProtocolError" when parse throws one, "parsed" when it does not, else what it threw.
std::string outcome(Body kind, std::span<const std::byte> body, const Limits& limits = {}) {
  try {
    parse(kind, body, limits);
  } catch (const ProtocolError&) {
    return "ProtocolError";
  } catch (const std::exception& e) {
    return std::string("another exception: ") + e.what();
  }
  return "parsed";
}

void put_u32(Bytes& bytes, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

// ---- round trips -------------------------------------------------------------------------------

TEST(RemoteProtocol, HelloRoundTrips) {
  const Bytes bytes =
      encode_frame(FrameKind::Hello, [](Writer& out) { write_hello(out, test_hello()); });
  std::array<std::byte, kFrameHeaderBytes> head;
  std::copy_n(bytes.begin(), kFrameHeaderBytes, head.begin());
  const FrameHeader header = read_frame_header(head, kMaxHelloBytes);
  EXPECT_EQ(header.kind, FrameKind::Hello);
  EXPECT_EQ(header.length, bytes.size() - kFrameHeaderBytes);
  const Hello hello = read_hello(body_of(bytes));
  EXPECT_EQ(hello.magic, kProtocolMagic);
  EXPECT_EQ(hello.version, kProtocolVersion);
  EXPECT_EQ(hello.contract, kBackendContractHash);
  EXPECT_EQ(hello.token, "s3cret");
}

TEST(RemoteProtocol, WelcomeRoundTrips) {
  const Welcome sent = test_welcome();
  const Bytes bytes =
      encode_frame(FrameKind::Welcome, [&](Writer& out) { write_welcome(out, sent); });
  const Welcome got = read_welcome(body_of(bytes));
  EXPECT_EQ(got.backend_name, sent.backend_name);
  EXPECT_EQ(got.settings, sent.settings);
  EXPECT_EQ(got.usage, sent.usage);
  EXPECT_EQ(got.limits.max_frame_bytes, sent.limits.max_frame_bytes);
  EXPECT_EQ(got.limits.max_session_bytes, sent.limits.max_session_bytes);
  EXPECT_EQ(got.limits.max_tensors, sent.limits.max_tensors);
  EXPECT_EQ(got.limits.max_blocks, sent.limits.max_blocks);
  EXPECT_EQ(got.limits.max_block_commands, sent.limits.max_block_commands);
}

TEST(RemoteProtocol, RefusedRoundTripsEveryErrorCode) {
  for (int c = 0; c <= static_cast<int>(kLastErrorCode); ++c) {
    const auto code = static_cast<ErrorCode>(c);
    const Bytes bytes = encode_frame(FrameKind::Refused, [&](Writer& out) {
      write_refused(out, code, "[remote] code " + std::to_string(c));
    });
    const auto [got, message] = read_refused(body_of(bytes));
    EXPECT_EQ(got, code);
    EXPECT_EQ(message, "[remote] code " + std::to_string(c));
  }
}

TEST(RemoteProtocol, ErrorCodesMapToTheirErrorTypes) {
  // throw_error and current_error_code are inverses for every code but Ok (thrown as Error).
  for (int c = 1; c <= static_cast<int>(kLastErrorCode); ++c) {
    const auto code = static_cast<ErrorCode>(c);
    ErrorCode back = ErrorCode::Ok;
    std::string message;
    try {
      throw_error(code, "[op] message");
    } catch (...) {
      back = current_error_code();
      try {
        throw;
      } catch (const Error& e) {
        message = e.what();
      }
    }
    EXPECT_EQ(back, code) << c;
    EXPECT_EQ(message, "[op] message");
  }
  EXPECT_THROW(throw_error(ErrorCode::AuthenticationFailed, "x"), AuthenticationFailed);
  EXPECT_THROW(throw_error(ErrorCode::ProtocolError, "x"), ProtocolError);
  try {
    throw std::bad_alloc();
  } catch (...) {
    EXPECT_EQ(current_error_code(), ErrorCode::OutOfMemory);
  }
  try {
    throw std::runtime_error("not kiln's");
  } catch (...) {
    EXPECT_EQ(current_error_code(), ErrorCode::Error);
  }
}

TEST(RemoteProtocol, UploadRoundTrips) {
  const TensorData data = test_data();
  const Bytes bytes = upload_frame(data.bytes().subspan(8), 8);
  const Upload got = read_upload(body_of(bytes));
  EXPECT_EQ(got.id, 9u);
  EXPECT_EQ(got.hash, 0x1234u);
  EXPECT_EQ(got.dtype, DType::F32);
  EXPECT_EQ(got.shape, (Shape{3, 2}));
  EXPECT_EQ(got.offset, 8u);
  ASSERT_EQ(got.bytes.size(), data.bytes().size() - 8);
  EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), data.bytes().begin() + 8));
  // An empty chunk (a zero-size tensor) is a valid upload too.
  const Bytes empty_frame = upload_frame({}, 0);
  const Upload empty = read_upload(body_of(empty_frame));
  EXPECT_TRUE(empty.bytes.empty());
  // QFloat blocks carry their scheme.
  const TensorData blocks = test_blocks();
  const Bytes blocks_frame = blocks_upload_frame();  // the upload's bytes are a view of it
  const Upload q = read_upload(body_of(blocks_frame));
  EXPECT_EQ(q.dtype, DType::QFloat);
  EXPECT_EQ(q.scheme, blocks.scheme());
  EXPECT_EQ(q.shape, (Shape{2, 256}));
  ASSERT_EQ(q.bytes.size(), blocks.bytes().size());
  EXPECT_TRUE(std::equal(q.bytes.begin(), q.bytes.end(), blocks.bytes().begin()));
}

TEST(RemoteProtocol, QuantizedUploadWithAnUnknownSchemeIsAProtocolError) {
  Bytes bytes = blocks_upload_frame();
  // After the id, the hash and the dtype: the scheme's kind, then its block size.
  const std::size_t kind = kFrameHeaderBytes + 4 + 8 + 1;
  Bytes unknown_kind = bytes;
  unknown_kind[kind] = std::byte{0x40};
  EXPECT_EQ(outcome(Body::Upload, body_of(unknown_kind)), "ProtocolError");
  Bytes wrong_size = bytes;
  wrong_size[kind + 1] = std::byte{7};  // Q4_K with 7 values a block (256 is 00 01 ...)
  wrong_size[kind + 2] = std::byte{0};
  try {
    read_upload(body_of(wrong_size));
    ADD_FAILURE() << "a Q4_K scheme of 7 values a block was read";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

TEST(RemoteProtocol, RepliesRoundTripWithEveryBody) {
  const Bytes data_frame = data_reply_frame();
  const Reply data = read_reply(body_of(data_frame));
  EXPECT_EQ(data.request, 42u);
  EXPECT_EQ(data.status, ErrorCode::Ok);
  const TensorData got = decode_data(data.body);
  EXPECT_EQ(got.dtype(), DType::F32);
  EXPECT_EQ(got.shape(), (Shape{3, 2}));
  EXPECT_EQ(got.to_vec<float>(), test_data().to_vec<float>());

  for (const Sample& sample : valid_frames()) {
    if (sample.body == Body::TypeReply) {
      const Reply reply = read_reply(body_of(sample.bytes));
      EXPECT_EQ(reply.request, 7u);
      const ir::TensorType type = decode_type(reply.body);
      EXPECT_TRUE(type == type_of(DType::BF16, {0, 5, 1}) ||
                  type == q4_type({32, 2, 3}, {2, 0, 1}));
    } else if (sample.body == Body::DataReply && read_reply(body_of(sample.bytes)).request == 43) {
      const TensorData got = decode_data(read_reply(body_of(sample.bytes)).body);
      EXPECT_EQ(got.scheme(), test_blocks().scheme());
      EXPECT_EQ(got.shape(), test_blocks().shape());
      EXPECT_TRUE(std::ranges::equal(got.bytes(), test_blocks().bytes()));
    } else if (sample.body == Body::StatsReply) {
      const MemoryStats stats = decode_stats(read_reply(body_of(sample.bytes)).body);
      EXPECT_EQ(stats.bytes_in_use, 1);
      EXPECT_EQ(stats.bytes_reserved, 2);
      EXPECT_EQ(stats.peak_bytes_in_use, 3);
    } else if (sample.body == Body::TextReply) {
      const Reply reply = read_reply(body_of(sample.bytes));
      EXPECT_EQ(reply.status, ErrorCode::OutOfMemory);
      EXPECT_EQ(decode_text(reply.body), "[full] too big");
    }
  }
  // A Sync's reply has no body.
  const Bytes sync = encode_frame(FrameKind::Reply,
                                  [](Writer& out) { write_reply_header(out, 1, ErrorCode::Ok); });
  EXPECT_TRUE(read_reply(body_of(sync)).body.empty());
}

TEST(RemoteProtocol, EveryCommandKindRoundTrips) {
  const std::vector<Command> sent = every_command();
  // The list above holds every kind: a new kind must be added to it.
  std::vector<bool> seen(static_cast<std::size_t>(kLastCommandKind) + 1, false);
  for (const Command& c : sent) seen[static_cast<std::size_t>(c.kind)] = true;
  for (std::size_t k = 0; k < seen.size(); ++k) EXPECT_TRUE(seen[k]) << "command kind " << k;

  const std::vector<Command> got = read_commands(body_of(commands_frame(sent)), Limits{});
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i)
    expect_same(got[i], sent[i], "command " + std::to_string(i));
}

TEST(RemoteProtocol, OpsWithEveryAttributeKindRoundTrip) {
  const std::vector<ir::Op> ops = ops_with_every_attribute();
  std::vector<bool> seen(ir::kAttributeKinds, false);
  std::vector<Command> sent;
  for (const ir::Op& op : ops) {
    for (const ir::Attribute& a : op.attributes)
      seen[static_cast<std::size_t>(ir::kind_of(a))] = true;
    sent.push_back(op_command(op));
  }
  for (std::size_t k = 0; k < seen.size(); ++k)
    EXPECT_TRUE(seen[k]) << ir::attribute_kind_name(static_cast<ir::AttributeKind>(k));

  const std::vector<Command> got = read_commands(body_of(commands_frame(sent)), Limits{});
  ASSERT_EQ(got.size(), ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_TRUE(got[i].op == ops[i]) << ir::to_string(got[i].op) << " vs " << ir::to_string(ops[i]);
  }
  // A NaN scalar comes back bit for bit.
  const ir::Op nan =
      make_op(OpCode::add_scalar, {1}, {Scalar(std::nan(""))}, {type_of(DType::F32, {2})}, 2);
  const std::vector<Command> back =
      read_commands(body_of(commands_frame({op_command(nan)})), Limits{});
  EXPECT_TRUE(back.at(0).op == nan);
}

TEST(RemoteProtocol, EmptyCommandsFrameIsValid) {
  EXPECT_TRUE(read_commands(body_of(commands_frame({})), Limits{}).empty());
}

// ---- malformed input ---------------------------------------------------------------------------

TEST(RemoteProtocol, EveryTruncationIsAProtocolError) {
  for (const Sample& sample : valid_frames()) {
    const std::span<const std::byte> body = body_of(sample.bytes);
    ASSERT_EQ(outcome(sample.body, body), "parsed") << static_cast<int>(sample.body);
    for (std::size_t n = 0; n < body.size(); ++n) {
      ASSERT_EQ(outcome(sample.body, body.first(n)), "ProtocolError")
          << "frame " << static_cast<int>(sample.body) << " truncated to " << n << " of "
          << body.size() << " bytes";
    }
  }
}

TEST(RemoteProtocol, TrailingBytesAreAProtocolError) {
  for (const Sample& sample : valid_frames()) {
    Bytes longer(sample.bytes.begin() + kFrameHeaderBytes, sample.bytes.end());
    longer.push_back(std::byte{0});
    EXPECT_EQ(outcome(sample.body, longer), "ProtocolError") << static_cast<int>(sample.body);
  }
}

TEST(RemoteProtocol, FrameHeaderIsCheckedAgainstTheLimit) {
  auto header = [](std::uint32_t length, std::uint8_t kind) {
    std::array<std::byte, kFrameHeaderBytes> h;
    for (int i = 0; i < 4; ++i) h[i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
    h[4] = static_cast<std::byte>(kind);
    return h;
  };
  EXPECT_EQ(read_frame_header(header(100, 1), 100).length, 100u);
  EXPECT_EQ(read_frame_header(header(0, static_cast<std::uint8_t>(kLastFrameKind)), 0).kind,
            kLastFrameKind);
  EXPECT_THROW(read_frame_header(header(101, 1), 100), ProtocolError);
  EXPECT_THROW(read_frame_header(header(0xffffffffu, 0), kMaxHelloBytes), ProtocolError);
  EXPECT_THROW(read_frame_header(header(kMaxHelloBytes + 1, 0), kMaxHelloBytes), ProtocolError);
  EXPECT_THROW(read_frame_header(header(4, static_cast<std::uint8_t>(kLastFrameKind) + 1), 100),
               ProtocolError);
  EXPECT_THROW(read_frame_header(header(4, 0xff), 100), ProtocolError);
  try {
    read_frame_header(header(5000, 0), kMaxHelloBytes);
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("5000"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[remote]", 0), 0u) << e.what();
  }
}

TEST(RemoteProtocol, BadEnumValuesAreProtocolErrors) {
  // A command kind past the last.
  Bytes commands = commands_frame({simple(CommandKind::Cleanup)});
  commands[kFrameHeaderBytes + 4] = static_cast<std::byte>(static_cast<int>(kLastCommandKind) + 1);
  EXPECT_EQ(outcome(Body::Commands, body_of(commands)), "ProtocolError");
  // An error code past the last, in a refusal and in a reply.
  Bytes refused =
      encode_frame(FrameKind::Refused, [](Writer& out) { write_refused(out, ErrorCode::Ok, ""); });
  refused[kFrameHeaderBytes] = static_cast<std::byte>(static_cast<int>(kLastErrorCode) + 1);
  EXPECT_EQ(outcome(Body::Refused, body_of(refused)), "ProtocolError");
  Bytes reply = data_reply_frame();
  reply[kFrameHeaderBytes + 8] = std::byte{0xee};
  EXPECT_EQ(outcome(Body::DataReply, body_of(reply)), "ProtocolError");
  // A dtype past the last, in an upload and in a welcome.
  Bytes upload = upload_frame({}, 0);
  upload[kFrameHeaderBytes + 12] = static_cast<std::byte>(kDTypeCount);
  EXPECT_EQ(outcome(Body::Upload, body_of(upload)), "ProtocolError");
  Bytes welcome =
      encode_frame(FrameKind::Welcome, [](Writer& out) { write_welcome(out, test_welcome()); });
  welcome[kFrameHeaderBytes + 4 + 3] = std::byte{0x7f};  // after "cpu": the float dtype
  EXPECT_EQ(outcome(Body::Welcome, body_of(welcome)), "ProtocolError");

  // Inside an op: its code, an attribute kind, a scalar kind, a bool byte, a distribution kind.
  auto op_frame = [](const ir::Op& op) { return commands_frame({op_command(op)}); };
  // Commands: u32 n, u8 kind, then the op: u32 length, u16 code.
  const std::size_t op_at = kFrameHeaderBytes + 5;
  Bytes code = op_frame(ops_with_every_attribute()[4]);
  code[op_at + 4] = std::byte{0xff};
  code[op_at + 5] = std::byte{0xff};
  EXPECT_EQ(outcome(Body::Commands, body_of(code)), "ProtocolError");
  // sum_dim(%1, dim): code, u32 1 input, id, u32 1 attribute, then the attribute's kind.
  const std::size_t attribute_at = op_at + 4 + 2 + 4 + 4 + 4;
  Bytes kind = op_frame(ops_with_every_attribute()[4]);
  ASSERT_EQ(kind[attribute_at], static_cast<std::byte>(ir::AttributeKind::Int));
  kind[attribute_at] = static_cast<std::byte>(ir::kAttributeKinds);
  EXPECT_EQ(outcome(Body::Commands, body_of(kind)), "ProtocolError");
  // add_scalar(%1, value): the scalar's kind follows the attribute kind.
  Bytes scalar =
      op_frame(make_op(OpCode::add_scalar, {1}, {Scalar(1.0)}, {type_of(DType::F32, {2})}, 2));
  scalar[attribute_at + 1] = std::byte{9};
  EXPECT_EQ(outcome(Body::Commands, body_of(scalar)), "ProtocolError");
  Bytes flag =
      op_frame(make_op(OpCode::add_scalar, {1}, {Scalar(true)}, {type_of(DType::F32, {2})}, 2));
  flag[attribute_at + 2] = std::byte{2};
  EXPECT_EQ(outcome(Body::Commands, body_of(flag)), "ProtocolError");
  // random(shape [5], distribution...): no inputs, so attributes start 4 bytes earlier.
  Bytes distribution = op_frame(ops_with_every_attribute()[10]);
  const std::size_t shape_attribute = op_at + 4 + 2 + 4 + 4;
  const std::size_t distribution_at = shape_attribute + 1 + 4 + 8;  // kind, rank 1, one dim
  ASSERT_EQ(distribution[distribution_at], static_cast<std::byte>(ir::AttributeKind::Distribution));
  distribution[distribution_at + 1] = std::byte{4};
  EXPECT_EQ(outcome(Body::Commands, body_of(distribution)), "ProtocolError");
}

TEST(RemoteProtocol, CountsLargerThanTheBodyAreProtocolErrors) {
  // The command count.
  Bytes commands = commands_frame({simple(CommandKind::Cleanup)});
  put_u32(commands, kFrameHeaderBytes, 0xffffffffu);
  EXPECT_EQ(outcome(Body::Commands, body_of(commands)), "ProtocolError");
  put_u32(commands, kFrameHeaderBytes, 2);
  EXPECT_EQ(outcome(Body::Commands, body_of(commands)), "ProtocolError");
  // A Bind's binding count.
  Command bind;
  bind.kind = CommandKind::Bind;
  bind.ids = {1, 2};
  Bytes bindings = commands_frame({bind});
  put_u32(bindings, kFrameHeaderBytes + 4 + 1 + 4, 3);
  EXPECT_EQ(outcome(Body::Commands, body_of(bindings)), "ProtocolError");
  // An op's byte length, its input count, its attribute count.
  const std::size_t op_at = kFrameHeaderBytes + 5;
  for (std::size_t field : {op_at, op_at + 6, op_at + 14}) {
    Bytes op = commands_frame({op_command(ops_with_every_attribute()[4])});
    put_u32(op, field, 0x7fffffffu);
    EXPECT_EQ(outcome(Body::Commands, body_of(op)), "ProtocolError") << field;
  }
  // The hello's token length.
  Bytes hello = encode_frame(FrameKind::Hello, [](Writer& out) { write_hello(out, test_hello()); });
  put_u32(hello, kFrameHeaderBytes + 16, 1000);
  EXPECT_EQ(outcome(Body::Hello, body_of(hello)), "ProtocolError");
  // An upload's rank and its chunk length.
  Bytes rank = upload_frame({}, 0);
  put_u32(rank, kFrameHeaderBytes + 13, 1u << 30);
  EXPECT_EQ(outcome(Body::Upload, body_of(rank)), "ProtocolError");
  Bytes chunk = upload_frame(std::vector<std::byte>(8), 0);
  put_u32(chunk, kFrameHeaderBytes + 13 + 4 + 16 + 8, 9);
  EXPECT_EQ(outcome(Body::Upload, body_of(chunk)), "ProtocolError");
  // A data reply's byte length that disagrees with its shape, and one past the body.
  for (std::uint32_t length : {20u, 28u, 0xffffffu}) {
    Bytes data = data_reply_frame();
    put_u32(data, kFrameHeaderBytes + 9 + 1 + 4 + 16, length);
    EXPECT_EQ(outcome(Body::DataReply, body_of(data)), "ProtocolError") << length;
  }
  // A data reply whose shape has more elements than any tensor may.
  const Bytes huge = encode_frame(FrameKind::Reply, [](Writer& out) {
    write_reply_header(out, 1, ErrorCode::Ok);
    out.u8(static_cast<std::uint8_t>(DType::F32));
    out.ints(std::vector<std::int64_t>{std::int64_t{1} << 40, std::int64_t{1} << 40});
    out.u64(0);
  });
  EXPECT_EQ(outcome(Body::DataReply, body_of(huge)), "ProtocolError");
  const Bytes negative = encode_frame(FrameKind::Reply, [](Writer& out) {
    write_reply_header(out, 1, ErrorCode::Ok);
    out.u8(static_cast<std::uint8_t>(DType::F32));
    out.ints(std::vector<std::int64_t>{-1, -4});
    out.u64(16);
    out.raw(std::vector<std::byte>(16));
  });
  EXPECT_EQ(outcome(Body::DataReply, body_of(negative)), "ProtocolError");
}

TEST(RemoteProtocol, BlocksDoNotNestAndRespectTheLimits) {
  Command inner;
  inner.kind = CommandKind::Block;
  inner.block = 1;
  inner.body = {simple(CommandKind::Free, 0)};
  inner.ids = {5};
  Command outer;
  outer.kind = CommandKind::Block;
  outer.block = 0;
  outer.body = {simple(CommandKind::Free, 0), inner};
  outer.ids = {4};
  const Bytes nested = commands_frame({outer});
  try {
    read_commands(body_of(nested), Limits{});
    ADD_FAILURE() << "a block inside a block was read";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("a block inside a block"), std::string::npos) << e.what();
  }
  Command bind;
  bind.kind = CommandKind::Bind;
  bind.ids = {1};
  outer.body = {bind};
  EXPECT_THROW(read_commands(body_of(commands_frame({outer})), Limits{}), ProtocolError);

  // A block number at the limit, and a block with more commands than allowed.
  Limits limits;
  limits.max_blocks = 4;
  limits.max_block_commands = 2;
  Command block;
  block.kind = CommandKind::Block;
  block.block = 3;
  block.body = {simple(CommandKind::Free, 0), simple(CommandKind::Free, 1)};
  block.ids = {8, 9};
  EXPECT_EQ(read_commands(body_of(commands_frame({block})), limits).size(), 1u);
  block.block = 4;
  EXPECT_EQ(outcome(Body::Commands, body_of(commands_frame({block})), limits), "ProtocolError");
  bind.block = 4;
  EXPECT_EQ(outcome(Body::Commands, body_of(commands_frame({bind})), limits), "ProtocolError");
  block.block = 0;
  block.body.push_back(simple(CommandKind::Free, 2));
  EXPECT_EQ(outcome(Body::Commands, body_of(commands_frame({block})), limits), "ProtocolError");
}

TEST(RemoteProtocol, HelloWithAnotherMagicIsRefused) {
  Hello hello = test_hello();
  hello.magic = 0x50545448;  // "HTTP"
  const Bytes bytes = encode_frame(FrameKind::Hello, [&](Writer& out) { write_hello(out, hello); });
  EXPECT_THROW(read_hello(body_of(bytes)), ProtocolError);
}

// ---- same_token --------------------------------------------------------------------------------

TEST(RemoteProtocol, SameToken) {
  EXPECT_TRUE(same_token("kiln-test-token", "kiln-test-token"));
  EXPECT_TRUE(same_token("x", "x"));
  EXPECT_FALSE(same_token("kiln-test-token", "kiln-test-tokeN"));
  EXPECT_FALSE(same_token("kiln-test-token", "Kiln-test-token"));
  // Different lengths, including a prefix and a repetition (b is read cyclically).
  EXPECT_FALSE(same_token("abc", "ab"));
  EXPECT_FALSE(same_token("abc", "abcd"));
  EXPECT_FALSE(same_token("abc", "abcabc"));
  EXPECT_FALSE(same_token("abcabc", "abc"));
  EXPECT_FALSE(same_token("aaaa", "a"));
  // Empty: no token matches an empty one, and an empty one matches nothing.
  EXPECT_FALSE(same_token("", ""));
  EXPECT_FALSE(same_token("abc", ""));
  EXPECT_FALSE(same_token("", "abc"));
  // Bytes past ASCII and embedded zeros count.
  EXPECT_TRUE(same_token(std::string("a\0b\xff", 4), std::string("a\0b\xff", 4)));
  EXPECT_FALSE(same_token(std::string("a\0b\xff", 4), std::string("a\0c\xff", 4)));
  EXPECT_FALSE(same_token(std::string("a\0", 2), "a"));
}

// ---- random mutations --------------------------------------------------------------------------

TEST(RemoteProtocol, RandomMutationsParseOrThrowProtocolError) {
  const std::vector<Sample> samples = valid_frames();
  std::mt19937_64 random(20240611);
  Limits limits;
  limits.max_blocks = 16;
  limits.max_block_commands = 64;
  int parsed = 0;
  int refused = 0;
  constexpr int kMutations = 10000;
  for (int m = 0; m < kMutations; ++m) {
    const Sample& sample = samples[random() % samples.size()];
    Bytes body(sample.bytes.begin() + kFrameHeaderBytes, sample.bytes.end());
    const int edits = 1 + static_cast<int>(random() % 4);
    std::string what;
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = body.empty() ? 0 : random() % body.size();
      switch (random() % 6) {
        case 0:  // flip a bit
          if (!body.empty()) body[at] ^= static_cast<std::byte>(1u << (random() % 8));
          what += " flip@" + std::to_string(at);
          break;
        case 1:  // a random byte
          if (!body.empty()) body[at] = static_cast<std::byte>(random());
          what += " byte@" + std::to_string(at);
          break;
        case 2:  // a large or small u32 (a count, a length, an id)
          if (body.size() >= 4) {
            const std::uint32_t values[] = {0, 1, 0x7fffffffu, 0xffffffffu,
                                            static_cast<std::uint32_t>(random())};
            put_u32(body, std::min(at, body.size() - 4), values[random() % 5]);
          }
          what += " u32@" + std::to_string(at);
          break;
        case 3:  // truncate
          body.resize(at);
          what += " cut@" + std::to_string(at);
          break;
        case 4:  // insert bytes
          body.insert(body.begin() + static_cast<long>(at), 1 + random() % 8,
                      static_cast<std::byte>(random()));
          what += " insert@" + std::to_string(at);
          break;
        default:  // delete bytes
          if (!body.empty()) {
            const std::size_t n = std::min<std::size_t>(1 + random() % 8, body.size() - at);
            body.erase(body.begin() + static_cast<long>(at),
                       body.begin() + static_cast<long>(at + n));
          }
          what += " erase@" + std::to_string(at);
          break;
      }
    }
    const std::string result = outcome(sample.body, body, limits);
    if (result == "parsed") {
      ++parsed;
    } else if (result == "ProtocolError") {
      ++refused;
    } else {
      ADD_FAILURE() << "mutation " << m << " of frame " << static_cast<int>(sample.body) << what
                    << ": " << result;
    }
  }
  EXPECT_EQ(parsed + refused, kMutations);
  // Most mutations break a frame; a loop where none did would be testing nothing.
  EXPECT_GT(refused, kMutations / 2);
}

}  // namespace
}  // namespace kiln::remote

#endif  // KILN_HAVE_REMOTE_SERVER

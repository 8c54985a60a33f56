// The binary form of a Program (layout in op_ir.h): little-endian fixed-width fields, every
// count and length checked against what is left before anything is allocated or read, every
// enum value and op signature checked before a value is built. A malformed buffer is a
// ProtocolError naming the byte offset and what was wrong.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "contract/contract.h"
#include "core/checked.h"
#include "ir/check.h"
#include "ir/op_ir.h"
#include "kiln/detail/format.h"

namespace kiln::ir {
namespace {

// ---- writing ----

class Writer {
 public:
  void u8(std::uint8_t value) { bytes_.push_back(static_cast<std::byte>(value)); }
  void u16(std::uint16_t value) { little(value, 2); }
  void u32(std::uint32_t value) { little(value, 4); }
  void u64(std::uint64_t value) { little(value, 8); }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void f64(double value) { u64(std::bit_cast<std::uint64_t>(value)); }
  void boolean(bool value) { u8(value ? 1 : 0); }
  void count(std::size_t n) {
    if (n > std::numeric_limits<std::uint32_t>::max()) {
      kiln::detail::fail<InvalidArgument>("ir::serialize", "a count of ", n,
                                          " does not fit the format");
    }
    u32(static_cast<std::uint32_t>(n));
  }
  void ints(std::span<const std::int64_t> values) {
    count(values.size());
    for (std::int64_t v : values) i64(v);
  }
  void text(std::string_view value) {
    count(value.size());
    for (char c : value) u8(static_cast<std::uint8_t>(c));
  }
  void raw(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void type(const TensorType& t) {
    u8(static_cast<std::uint8_t>(t.dtype));
    ints(t.shape.dims());
  }

  std::size_t size() const noexcept { return bytes_.size(); }
  // Writes value over the 4 bytes at offset (a length reserved earlier).
  void patch_u32(std::size_t offset, std::uint32_t value) {
    for (int i = 0; i < 4; ++i)
      bytes_[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
  }
  std::vector<std::byte> take() && { return std::move(bytes_); }

 private:
  void little(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i)
      bytes_.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
  }
  std::vector<std::byte> bytes_;
};

void write_attribute(Writer& out, const Attribute& attribute) {
  out.u8(static_cast<std::uint8_t>(attribute.index()));
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, Scalar>) {
          out.u8(static_cast<std::uint8_t>(value.kind()));
          switch (value.kind()) {
            case Scalar::Kind::Float:
              out.f64(value.to_double());
              break;
            case Scalar::Kind::Int:
              out.i64(value.to_int());
              break;
            case Scalar::Kind::UInt:
              out.u64(value.to_uint());
              break;
            case Scalar::Kind::Bool:
              out.boolean(value.to_bool());
              break;
          }
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out.i64(value);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.boolean(value);
        } else if constexpr (std::is_same_v<T, double>) {
          out.f64(value);
        } else if constexpr (std::is_same_v<T, DType> || std::is_same_v<T, IndexingUpdate> ||
                             std::is_same_v<T, ReduceOperation>) {
          out.u8(static_cast<std::uint8_t>(value));
        } else if constexpr (std::is_same_v<T, Shape>) {
          out.ints(value.dims());
        } else if constexpr (std::is_same_v<T, Axes>) {
          out.ints(value);
        } else if constexpr (std::is_same_v<T, ResolvedSlices>) {
          out.count(value.size());
          for (const ResolvedSlice& slice : value) {
            out.i64(slice.start);
            out.i64(slice.length);
            out.i64(slice.step);
          }
        } else if constexpr (std::is_same_v<T, Distribution>) {
          out.u8(static_cast<std::uint8_t>(value.kind));
          out.f64(value.a);
          out.f64(value.b);
        } else if constexpr (std::is_same_v<T, ConvOptions>) {
          out.ints(value.stride);
          out.ints(value.padding);
          out.ints(value.dilation);
          out.i64(value.groups);
        } else if constexpr (std::is_same_v<T, ConvTransposeOptions>) {
          out.ints(value.stride);
          out.ints(value.padding);
          out.ints(value.padding_out);
          out.ints(value.dilation);
          out.i64(value.groups);
        } else if constexpr (std::is_same_v<T, PoolOptions>) {
          out.ints(value.kernel_size);
          out.ints(value.stride);
          out.ints(value.padding);
          out.ints(value.dilation);
          out.boolean(value.ceil_mode);
          out.boolean(value.count_include_pad);
        } else if constexpr (std::is_same_v<T, UnfoldOptions>) {
          out.ints(value.kernel_size);
          out.ints(value.stride);
          out.ints(value.padding);
          out.ints(value.dilation);
        } else if constexpr (std::is_same_v<T, InterpolateOptions>) {
          out.u8(static_cast<std::uint8_t>(value.mode));
          out.boolean(value.align_corners);
        } else if constexpr (std::is_same_v<T, AttentionOptions>) {
          out.boolean(value.scale.has_value());
          out.f64(value.scale.value_or(0.0));
          out.boolean(value.is_causal);
        } else if constexpr (std::is_same_v<T, QuantScheme>) {
          out.u8(static_cast<std::uint8_t>(value.mode));
          out.u8(static_cast<std::uint8_t>(value.value));
          out.i64(value.block_size);
        } else if constexpr (std::is_same_v<T, DeviceAttr>) {
          out.u8(static_cast<std::uint8_t>(value.kind));
          out.u32(static_cast<std::uint32_t>(value.index));
          out.boolean(value.autodiff);
          out.boolean(value.fused);
          out.text(value.url);
        } else {
          static_assert(std::is_same_v<T, TensorData>);
          out.u8(static_cast<std::uint8_t>(value.dtype()));
          out.ints(value.shape().dims());
          out.u64(value.bytes().size());
          out.raw(value.bytes());
        }
      },
      attribute);
}

void write_op(Writer& out, const Op& op) {
  const std::size_t length_at = out.size();
  out.u32(0);  // the op's byte length, patched below
  out.u16(static_cast<std::uint16_t>(op.code));
  out.count(op.inputs.size());
  for (TensorId id : op.inputs) out.u32(id.index);
  out.count(op.attributes.size());
  for (const Attribute& attribute : op.attributes) write_attribute(out, attribute);
  out.count(op.outputs.size());
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    out.u32(op.outputs[i].index);
    out.type(op.output_types[i]);
  }
  const std::size_t length = out.size() - length_at - 4;
  if (length > std::numeric_limits<std::uint32_t>::max()) {
    kiln::detail::fail<InvalidArgument>("ir::serialize", to_string(op), ": ", length,
                                        " bytes do not fit one op's frame");
  }
  out.patch_u32(length_at, static_cast<std::uint32_t>(length));
}

// ---- reading ----

[[noreturn]] void fail_protocol(std::string message) {
  throw ProtocolError("[ir::deserialize] " + message);
}

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, std::size_t base) : bytes_(bytes), base_(base) {}

  std::size_t left() const noexcept { return bytes_.size() - position_; }
  std::size_t offset() const noexcept { return base_ + position_; }

  [[noreturn]] void fail(const std::string& what) const {
    fail_protocol(kiln::detail::concat("at byte ", offset(), context_.empty() ? "" : " (", context_,
                                       context_.empty() ? "" : ")", ": ", what));
  }
  void set_context(std::string context) { context_ = std::move(context); }

  std::span<const std::byte> take(std::size_t n, std::string_view what) {
    if (n > left()) {
      fail(kiln::detail::concat("truncated: ", what, " needs ", n, " bytes, ", left(), " left"));
    }
    const auto out = bytes_.subspan(position_, n);
    position_ += n;
    return out;
  }
  std::uint64_t little(int width, std::string_view what) {
    const auto data = take(static_cast<std::size_t>(width), what);
    std::uint64_t value = 0;
    for (int i = 0; i < width; ++i) {
      value |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(data[i])) << (8 * i);
    }
    return value;
  }
  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(little(1, what)); }
  std::uint16_t u16(std::string_view what) { return static_cast<std::uint16_t>(little(2, what)); }
  std::uint32_t u32(std::string_view what) { return static_cast<std::uint32_t>(little(4, what)); }
  std::uint64_t u64(std::string_view what) { return little(8, what); }
  std::int64_t i64(std::string_view what) { return static_cast<std::int64_t>(u64(what)); }
  double f64(std::string_view what) { return std::bit_cast<double>(u64(what)); }
  bool boolean(std::string_view what) {
    const std::uint8_t value = u8(what);
    if (value > 1) fail(kiln::detail::concat(what, ": a bool byte of ", static_cast<int>(value)));
    return value == 1;
  }
  // An enum stored as a byte, checked against its last value.
  template <class E>
  E enumeration(E last, std::string_view what) {
    const std::uint8_t value = u8(what);
    if (value > static_cast<std::uint8_t>(last)) {
      fail(kiln::detail::concat(what, ": unknown value ", static_cast<int>(value)));
    }
    return static_cast<E>(value);
  }
  // A count of items of at least item_bytes each: refused when they cannot fit in what is left,
  // so a hostile count never drives an allocation.
  std::size_t count(std::size_t item_bytes, std::string_view what) {
    const std::uint32_t n = u32(what);
    if (static_cast<std::uint64_t>(n) * item_bytes > left()) {
      fail(kiln::detail::concat("truncated: ", what, " of ", n, " entries needs ",
                                static_cast<std::uint64_t>(n) * item_bytes, " bytes, ", left(),
                                " left"));
    }
    return n;
  }
  std::vector<std::int64_t> ints(std::string_view what) {
    std::vector<std::int64_t> values(count(8, what));
    for (std::int64_t& v : values) v = i64(what);
    return values;
  }
  std::string text(std::string_view what) {
    const auto data = take(count(1, what), what);
    std::string value(data.size(), '\0');
    if (!data.empty()) std::memcpy(value.data(), data.data(), data.size());
    return value;
  }
  DType dtype(std::string_view what) { return enumeration(DType::QFloat, what); }
  Shape shape(std::string_view what) { return Shape(ints(what)); }
  TensorType type(std::string_view what) {
    TensorType t;
    t.dtype = dtype(what);
    t.shape = shape(what);
    return t;
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t base_;
  std::size_t position_ = 0;
  std::string context_;
};

Scalar read_scalar(Reader& in) {
  switch (in.enumeration(Scalar::Kind::Bool, "scalar kind")) {
    case Scalar::Kind::Float:
      return Scalar(in.f64("scalar"));
    case Scalar::Kind::Int:
      return Scalar(in.i64("scalar"));
    case Scalar::Kind::UInt:
      return Scalar(in.u64("scalar"));
    case Scalar::Kind::Bool:
      return Scalar(in.boolean("scalar"));
  }
  return {};
}

TensorData read_data(Reader& in) {
  const DType dtype = in.dtype("data dtype");
  Shape shape = in.shape("data shape");
  std::uint64_t elements = 1;
  for (std::int64_t dim : shape.dims()) {
    if (dim < 0) in.fail("data shape " + shape.to_string() + " has a negative dim");
    if (dim != 0 && elements > static_cast<std::uint64_t>(checked::kMaxElements) /
                                   static_cast<std::uint64_t>(dim)) {
      in.fail("data shape " + shape.to_string() + " has too many elements");
    }
    elements *= static_cast<std::uint64_t>(dim);
  }
  if (std::ranges::find(shape.dims(), 0) != shape.dims().end()) elements = 0;
  const std::uint64_t length = in.u64("data length");
  if (length != elements * dtype_size(dtype)) {
    in.fail(kiln::detail::concat("data of ", dtype_name(dtype), " ", shape, " holds ", length,
                                 " bytes where it needs ", elements * dtype_size(dtype)));
  }
  const auto bytes = in.take(static_cast<std::size_t>(length), "data bytes");
  return TensorData(std::vector<std::byte>(bytes.begin(), bytes.end()), std::move(shape), dtype);
}

Attribute read_attribute(Reader& in) {
  const auto kind = static_cast<AttributeKind>(in.u8("attribute kind"));
  switch (kind) {
    case AttributeKind::Scalar:
      return read_scalar(in);
    case AttributeKind::Int:
      return in.i64("int");
    case AttributeKind::Bool:
      return in.boolean("bool");
    case AttributeKind::Double:
      return in.f64("double");
    case AttributeKind::DType:
      return in.dtype("dtype");
    case AttributeKind::Shape:
      return in.shape("shape");
    case AttributeKind::Axes:
      return in.ints("axes");
    case AttributeKind::Slices: {
      ResolvedSlices slices(in.count(24, "slices"));
      for (ResolvedSlice& slice : slices) {
        slice.start = in.i64("slice start");
        slice.length = in.i64("slice length");
        slice.step = in.i64("slice step");
      }
      return slices;
    }
    case AttributeKind::Distribution: {
      Distribution d;
      d.kind = in.enumeration(Distribution::Kind::Bernoulli, "distribution kind");
      d.a = in.f64("distribution");
      d.b = in.f64("distribution");
      return d;
    }
    case AttributeKind::IndexingUpdate:
      return in.enumeration(IndexingUpdate::Max, "indexing update");
    case AttributeKind::ReduceOperation:
      return in.enumeration(ReduceOperation::Mean, "reduce operation");
    case AttributeKind::Conv: {
      ConvOptions o;
      o.stride = in.ints("conv stride");
      o.padding = in.ints("conv padding");
      o.dilation = in.ints("conv dilation");
      o.groups = in.i64("conv groups");
      return o;
    }
    case AttributeKind::ConvTranspose: {
      ConvTransposeOptions o;
      o.stride = in.ints("conv stride");
      o.padding = in.ints("conv padding");
      o.padding_out = in.ints("conv padding_out");
      o.dilation = in.ints("conv dilation");
      o.groups = in.i64("conv groups");
      return o;
    }
    case AttributeKind::Pool: {
      PoolOptions o;
      o.kernel_size = in.ints("pool kernel_size");
      o.stride = in.ints("pool stride");
      o.padding = in.ints("pool padding");
      o.dilation = in.ints("pool dilation");
      o.ceil_mode = in.boolean("pool ceil_mode");
      o.count_include_pad = in.boolean("pool count_include_pad");
      return o;
    }
    case AttributeKind::Unfold: {
      UnfoldOptions o;
      o.kernel_size = in.ints("unfold kernel_size");
      o.stride = in.ints("unfold stride");
      o.padding = in.ints("unfold padding");
      o.dilation = in.ints("unfold dilation");
      return o;
    }
    case AttributeKind::Interpolate: {
      InterpolateOptions o;
      o.mode = in.enumeration(InterpolateMode::Bicubic, "interpolate mode");
      o.align_corners = in.boolean("interpolate align_corners");
      return o;
    }
    case AttributeKind::Attention: {
      AttentionOptions o;
      const bool has_scale = in.boolean("attention has scale");
      const double scale = in.f64("attention scale");
      if (has_scale) o.scale = scale;
      o.is_causal = in.boolean("attention is_causal");
      return o;
    }
    case AttributeKind::QuantScheme: {
      QuantScheme q;
      q.mode = in.enumeration(QuantScheme::Mode::Symmetric, "quant mode");
      q.value = in.enumeration(QuantScheme::Value::Q2, "quant value");
      q.block_size = in.i64("quant block_size");
      return q;
    }
    case AttributeKind::Device: {
      DeviceAttr d;
      d.kind = in.enumeration(DeviceKind::Remote, "device kind");
      const std::uint32_t index = in.u32("device index");
      if (index > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
        in.fail(kiln::detail::concat("device index ", index, " out of range"));
      }
      d.index = static_cast<std::int32_t>(index);
      d.autodiff = in.boolean("device autodiff");
      d.fused = in.boolean("device fused");
      d.url = in.text("device url");
      return d;
    }
    case AttributeKind::Data:
      return read_data(in);
  }
  in.fail(kiln::detail::concat("unknown attribute kind ", static_cast<int>(kind)));
}

Op read_op(Reader& in, std::size_t position) {
  in.set_context("op " + std::to_string(position));
  const std::uint32_t length = in.u32("op length");
  const std::span<const std::byte> frame = in.take(length, "op frame");
  Reader body(frame, in.offset() - length);
  body.set_context("op " + std::to_string(position));
  Op op;
  const std::uint16_t code = body.u16("op code");
  if (code >= all_ops().size()) body.fail(kiln::detail::concat("unknown op code ", code));
  op.code = static_cast<OpCode>(code);
  body.set_context(kiln::detail::concat("op ", position, " (", signature(op.code).name, ")"));
  op.inputs.resize(body.count(4, "inputs"));
  for (TensorId& id : op.inputs) id.index = body.u32("input id");
  const std::size_t attributes = body.count(1, "attributes");
  op.attributes.reserve(attributes);
  for (std::size_t i = 0; i < attributes; ++i) op.attributes.push_back(read_attribute(body));
  const std::size_t outputs = body.count(9, "outputs");
  for (std::size_t i = 0; i < outputs; ++i) {
    op.outputs.push_back({body.u32("output id")});
    op.output_types.push_back(body.type("output type"));
  }
  if (body.left() != 0)
    body.fail(kiln::detail::concat(body.left(), " bytes left over in the op frame"));
  return op;
}

}  // namespace

std::vector<std::byte> serialize(const Program& program) {
  Writer out;
  out.u32(kWireMagic);
  out.u32(kWireVersion);
  out.u64(kBackendContractHash);
  out.count(program.inputs.size());
  for (const ProgramInput& input : program.inputs) {
    out.u32(input.id.index);
    out.type(input.type);
  }
  out.count(program.ops.size());
  for (const Op& op : program.ops) write_op(out, op);
  out.count(program.outputs.size());
  for (TensorId id : program.outputs) out.u32(id.index);
  return std::move(out).take();
}

Program deserialize(std::span<const std::byte> bytes) {
  Reader in(bytes, 0);
  const std::uint32_t magic = in.u32("magic");
  if (magic != kWireMagic)
    in.fail(kiln::detail::concat("not a kiln IR program (magic ", magic, ")"));
  const std::uint32_t version = in.u32("version");
  if (version != kWireVersion) {
    in.fail(kiln::detail::concat("format version ", version, ", this build reads ", kWireVersion));
  }
  const std::uint64_t contract = in.u64("contract hash");
  if (contract != kBackendContractHash) {
    in.fail("written against op contract " + contract_name(contract) + ", this build has " +
            contract_name(kBackendContractHash));
  }
  Program program;
  program.inputs.resize(in.count(9, "inputs"));
  for (ProgramInput& input : program.inputs) {
    input.id.index = in.u32("input id");
    input.type = in.type("input type");
  }
  // An op frame has at least a length, a code and three counts: 18 bytes.
  program.ops.resize(in.count(18, "ops"));
  for (std::size_t i = 0; i < program.ops.size(); ++i) program.ops[i] = read_op(in, i);
  in.set_context("");
  program.outputs.resize(in.count(4, "outputs"));
  for (TensorId& id : program.outputs) id.index = in.u32("output id");
  if (in.left() != 0) in.fail(kiln::detail::concat(in.left(), " bytes after the program"));
  internal::validate_program(program, fail_protocol);
  return program;
}

}  // namespace kiln::ir

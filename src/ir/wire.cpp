// The binary form of a Program (layout in op_ir.h): little-endian fixed-width fields, every
// count and length checked against what is left before anything is allocated or read, every
// enum value and op signature checked before a value is built. A malformed buffer is a
// ProtocolError naming the byte offset and what was wrong.
#include "ir/wire.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "contract/contract.h"
#include "core/checked.h"
#include "ir/check.h"
#include "ir/op_ir.h"
#include "kiln/detail/format.h"
#include "kiln/quant.h"

namespace kiln::ir {
namespace {

using wire::read_scheme;
using wire::Reader;
using wire::write_scheme;
using wire::Writer;

[[noreturn]] void fail_protocol(std::string message) {
  throw ProtocolError("[ir::deserialize] " + message);
}

// ---- writing ----

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
          out.f64(value.dropout);
        } else if constexpr (std::is_same_v<T, QuantScheme>) {
          write_scheme(out, value);
        } else if constexpr (std::is_same_v<T, DeviceAttr>) {
          out.u8(static_cast<std::uint8_t>(value.kind));
          out.u32(static_cast<std::uint32_t>(value.index));
          out.boolean(value.autodiff);
          out.boolean(value.fused);
          out.text(value.url);
        } else if constexpr (std::is_same_v<T, GroupAttr>) {
          out.u64(value.id);
          out.u32(static_cast<std::uint32_t>(value.rank));
          out.u32(static_cast<std::uint32_t>(value.size));
        } else {
          static_assert(std::is_same_v<T, TensorData>);
          wire::write_data(out, value);
        }
      },
      attribute);
}

void write_op_impl(Writer& out, const Op& op) {
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

TensorData read_data_impl(Reader& in) {
  const DType dtype = in.dtype("data dtype");
  const std::optional<QuantScheme> scheme =
      dtype == DType::QFloat ? std::optional(read_scheme(in)) : std::nullopt;
  Shape shape = in.shape("data shape");
  std::uint64_t elements = 1;
  for (std::int64_t dim : shape.dims()) {
    if (dim < 0) in.fail("data shape " + shape.to_string() + " has a negative dim");
    // The product of the non-zero dims, as TensorData checks it: a zero dim makes the count 0
    // but does not excuse the others ([0, 2^62] would otherwise pass here and be refused by
    // TensorData with an OutOfMemory instead of a ProtocolError).
    if (dim == 0) continue;
    if (elements >
        static_cast<std::uint64_t>(checked::kMaxElements) / static_cast<std::uint64_t>(dim)) {
      in.fail("data shape " + shape.to_string() + " has too many elements");
    }
    elements *= static_cast<std::uint64_t>(dim);
  }
  if (std::ranges::find(shape.dims(), 0) != shape.dims().end()) elements = 0;
  std::uint64_t needed = elements * dtype_size(dtype);
  if (scheme) {
    try {
      needed = quantized_bytes(shape, *scheme, "wire");
    } catch (const Error& error) {
      in.fail(error.what());
    }
  }
  const std::uint64_t length = in.u64("data length");
  if (length != needed) {
    in.fail(kiln::detail::concat("data of ", dtype_name(dtype), " ", shape, " holds ", length,
                                 " bytes where it needs ", needed));
  }
  const auto bytes = in.take(static_cast<std::size_t>(length), "data bytes");
  std::vector<std::byte> copy(bytes.begin(), bytes.end());
  if (scheme) return TensorData::quantized(std::move(copy), std::move(shape), *scheme);
  return TensorData(std::move(copy), std::move(shape), dtype);
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
      return in.enumeration(ReduceOperation::Min, "reduce operation");
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
      o.dropout = in.f64("attention dropout");
      return o;
    }
    case AttributeKind::QuantScheme: {
      return read_scheme(in);
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
      return read_data_impl(in);
    case AttributeKind::Group: {
      GroupAttr g;
      g.id = in.u64("group id");
      const std::uint32_t rank = in.u32("group rank");
      const std::uint32_t size = in.u32("group size");
      if (size == 0 || rank >= size ||
          size > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
        in.fail(kiln::detail::concat("group rank ", rank, " of ", size, " out of range"));
      }
      g.rank = static_cast<std::int32_t>(rank);
      g.size = static_cast<std::int32_t>(size);
      return g;
    }
  }
  in.fail(kiln::detail::concat("unknown attribute kind ", static_cast<int>(kind)));
}

Op read_op_impl(Reader& in, std::size_t position) {
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

namespace wire {

void write_scheme(Writer& out, const QuantScheme& scheme) {
  out.u8(static_cast<std::uint8_t>(scheme.kind));
  out.i64(scheme.block_size);
}

QuantScheme read_scheme(Reader& in) {
  QuantScheme scheme;
  scheme.kind = in.enumeration(QuantScheme::Kind::Int8Channel, "quant kind");
  scheme.block_size = in.i64("quant block_size");
  try {
    check_quant_scheme(scheme, "wire");
  } catch (const InvalidArgument& error) {
    in.fail(error.what());
  }
  return scheme;
}

void write_op(Writer& out, const Op& op) { write_op_impl(out, op); }
Op read_op(Reader& in, std::size_t position) { return read_op_impl(in, position); }
void write_data(Writer& out, const TensorData& data) {
  write_data_head(out, data);
  out.u64(data.bytes().size());
  out.raw(data.bytes());
}
TensorData read_data(Reader& in) { return read_data_impl(in); }

}  // namespace wire

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
  for (const Op& op : program.ops) write_op_impl(out, op);
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
  for (std::size_t i = 0; i < program.ops.size(); ++i) program.ops[i] = read_op_impl(in, i);
  in.set_context("");
  program.outputs.resize(in.count(4, "outputs"));
  for (TensorId& id : program.outputs) id.index = in.u32("output id");
  if (in.left() != 0) in.fail(kiln::detail::concat(in.left(), " bytes after the program"));
  internal::validate_program(program, fail_protocol);
  return program;
}

}  // namespace kiln::ir

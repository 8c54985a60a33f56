// The public description of schemes: construction, names, checks and byte counts.
#include "core/checked.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "quant/blocks.h"

namespace kiln {
namespace {

using Kind = QuantScheme::Kind;

// A block of an int8 scheme holds at most this many values: a bound that keeps every block
// size product far from overflow and no real use near it.
constexpr std::int64_t kMaxInt8Block = std::int64_t{1} << 20;

bool is_gguf(Kind kind) noexcept { return kind != Kind::Int8Block && kind != Kind::Int8Channel; }

}  // namespace

std::string_view quant_kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::Q4_0:
      return "Q4_0";
    case Kind::Q4_1:
      return "Q4_1";
    case Kind::Q5_0:
      return "Q5_0";
    case Kind::Q5_1:
      return "Q5_1";
    case Kind::Q8_0:
      return "Q8_0";
    case Kind::Q2_K:
      return "Q2_K";
    case Kind::Q3_K:
      return "Q3_K";
    case Kind::Q4_K:
      return "Q4_K";
    case Kind::Q5_K:
      return "Q5_K";
    case Kind::Q6_K:
      return "Q6_K";
    case Kind::Q8_K:
      return "Q8_K";
    case Kind::Int8Block:
      return "int8_block";
    case Kind::Int8Channel:
      return "int8_channel";
  }
  return "unknown";
}

QuantScheme quant_scheme(Kind kind) {
  if (kind == Kind::Int8Block) {
    detail::fail<InvalidArgument>("quant_scheme",
                                  "int8_block needs a block size: use int8_block_scheme(n)");
  }
  QuantScheme scheme{kind, 0};
  if (is_gguf(kind)) scheme.block_size = quant::block_size(scheme, 0).values;
  check_quant_scheme(scheme, "quant_scheme");
  return scheme;
}

QuantScheme int8_block_scheme(std::int64_t block_size) {
  const QuantScheme scheme{Kind::Int8Block, block_size};
  check_quant_scheme(scheme, "int8_block_scheme");
  return scheme;
}

QuantScheme int8_channel_scheme() { return QuantScheme{Kind::Int8Channel, 0}; }

void check_quant_scheme(const QuantScheme& scheme, std::string_view op) {
  if (static_cast<std::uint8_t>(scheme.kind) > static_cast<std::uint8_t>(Kind::Int8Channel)) {
    detail::fail<InvalidArgument>(op, "unknown quantization kind ", static_cast<int>(scheme.kind));
  }
  std::int64_t expected = 0;
  if (scheme.kind == Kind::Int8Block) {
    if (scheme.block_size >= 1 && scheme.block_size <= kMaxInt8Block) return;
    detail::fail<InvalidArgument>(op, "int8_block needs a block size in [1, ", kMaxInt8Block,
                                  "], got ", scheme.block_size);
  }
  if (is_gguf(scheme.kind)) expected = quant::block_size(scheme, 0).values;
  if (scheme.block_size != expected) {
    detail::fail<InvalidArgument>(op, quant_kind_name(scheme.kind), " has block size ", expected,
                                  ", got ", scheme.block_size);
  }
}

bool can_quantize(const QuantScheme& scheme) noexcept {
  switch (scheme.kind) {
    case Kind::Q4_0:
    case Kind::Q4_1:
    case Kind::Q5_0:
    case Kind::Q5_1:
    case Kind::Q8_0:
    case Kind::Q4_K:
    case Kind::Q6_K:
    case Kind::Int8Block:
    case Kind::Int8Channel:
      return true;
    default:
      return false;
  }
}

std::size_t quantized_bytes(const Shape& shape, const QuantScheme& scheme, std::string_view op) {
  check_quant_scheme(scheme, op);
  if (shape.rank() == 0) {
    detail::fail<ShapeMismatch>(op, quant_kind_name(scheme.kind),
                                " data needs at least one dim, its blocks run along the last");
  }
  const std::int64_t elements = checked::num_elements(shape, op);
  const std::int64_t row = shape.dims().back();
  const quant::BlockSize block = quant::block_size(scheme, row);
  if (row == 0) return 0;
  if (row % block.values != 0) {
    detail::fail<ShapeMismatch>(op, "the last dim of ", shape.to_string(), " is not a multiple of ",
                                quant_kind_name(scheme.kind), "'s ", block.values,
                                " values per block");
  }
  if (elements == 0) return 0;
  const std::int64_t blocks = elements / block.values;
  const std::int64_t bytes = checked::mul(blocks, block.bytes, op, "blocks * bytes per block");
  if (static_cast<std::uint64_t>(bytes) > checked::kMaxBytes) {
    detail::fail<OutOfMemory>(op, "shape ", shape.to_string(), " in ", quant_kind_name(scheme.kind),
                              " needs ", bytes, " bytes");
  }
  return static_cast<std::size_t>(bytes);
}

}  // namespace kiln

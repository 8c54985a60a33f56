#include "ir/op_ir.h"

#include <bit>
#include <charconv>

#include "ir/check.h"
#include "kiln/detail/format.h"
#include "kiln/quant.h"

namespace kiln::ir {
namespace {

constexpr OpSignature kSignatures[] = {
#define KILN_OP(name, ...) internal::make_signature<OpCode::name>(),
#include "kiln/detail/ops.def"
#undef KILN_OP
};

constexpr std::string_view kAttributeKindNames[] = {
    "scalar", "int",          "bool",      "double",       "dtype",  "shape",          "axes",
    "slices", "distribution", "update",    "reduce",       "conv",   "conv_transpose", "pool",
    "unfold", "interpolate",  "attention", "quant_scheme", "device", "data",           "group"};
static_assert(std::size(kAttributeKindNames) == kAttributeKinds);

std::string number(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

std::string list(std::span<const std::int64_t> values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(values[i]);
  }
  return text + "]";
}

std::string id_text(TensorId id) {
  return id == kNoTensor ? std::string("none") : "%" + std::to_string(id.index);
}

std::string type_text(const TensorType& type) {
  std::string text = std::string(dtype_name(type.dtype)) + " " + type.shape.to_string();
  if (type.dtype != DType::QFloat) return text;
  text += " " + to_string(Attribute(type.scheme));
  return type.axes.empty() ? text : text + " axes " + list(type.axes);
}

bool same_bits(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

bool same_scalar(const Scalar& a, const Scalar& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Scalar::Kind::Float:
      return same_bits(a.to_double(), b.to_double());
    case Scalar::Kind::UInt:
      return a.to_uint() == b.to_uint();
    default:
      return a.to_int() == b.to_int();
  }
}

std::string scalar_text(const Scalar& value) {
  switch (value.kind()) {
    case Scalar::Kind::Float:
      return number(value.to_double());
    case Scalar::Kind::Int:
      return std::to_string(value.to_int());
    case Scalar::Kind::UInt:
      return std::to_string(value.to_uint()) + "u";
    case Scalar::Kind::Bool:
      return value.to_bool() ? "true" : "false";
  }
  return "?";
}

std::string_view update_name(IndexingUpdate update) {
  constexpr std::string_view names[] = {"assign", "add", "mul", "min", "max"};
  const auto i = static_cast<std::size_t>(update);
  return i < std::size(names) ? names[i] : "?";
}

// FNV-1a over 64-bit words, as the contract fingerprint and the fused programs' hash.
class Hasher {
 public:
  void mix(std::uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= (value >> (8 * byte)) & 0xff;
      hash_ *= 1099511628211ull;
    }
  }
  void mix_text(std::string_view text) {
    mix(text.size());
    for (char c : text) mix(static_cast<unsigned char>(c));
  }
  std::uint64_t value() const noexcept { return hash_; }

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

void mix_type(Hasher& hash, const TensorType& type) {
  hash.mix(static_cast<std::uint64_t>(type.dtype));
  hash.mix(type.shape.rank());
  if (type.dtype != DType::QFloat) return;
  hash.mix(static_cast<std::uint64_t>(type.scheme.kind));
  hash.mix(static_cast<std::uint64_t>(type.scheme.block_size));
  for (std::int64_t axis : type.axes) hash.mix(static_cast<std::uint64_t>(axis));
}

// The parts of an attribute that are structure (see structure_hash in op_ir.h).
void mix_attribute(Hasher& hash, const Param& param, const Attribute& attribute) {
  hash.mix(attribute.index());
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, Scalar>) {
          hash.mix(static_cast<std::uint64_t>(value.kind()));
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          if (param.names_dims) hash.mix(static_cast<std::uint64_t>(value));
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, DType> ||
                             std::is_same_v<T, IndexingUpdate> ||
                             std::is_same_v<T, ReduceOperation>) {
          hash.mix(static_cast<std::uint64_t>(value));
        } else if constexpr (std::is_same_v<T, Shape>) {
          hash.mix(value.rank());
        } else if constexpr (std::is_same_v<T, Axes>) {
          hash.mix(value.size());
          if (param.names_dims) {
            for (std::int64_t axis : value) hash.mix(static_cast<std::uint64_t>(axis));
          }
        } else if constexpr (std::is_same_v<T, ResolvedSlices>) {
          hash.mix(value.size());
        } else if constexpr (std::is_same_v<T, Distribution>) {
          hash.mix(static_cast<std::uint64_t>(value.kind));
        } else if constexpr (std::is_same_v<T, ConvOptions>) {
          for (const auto* v : {&value.stride, &value.padding, &value.dilation})
            hash.mix(v->size());
        } else if constexpr (std::is_same_v<T, ConvTransposeOptions>) {
          for (const auto* v : {&value.stride, &value.padding, &value.padding_out, &value.dilation})
            hash.mix(v->size());
        } else if constexpr (std::is_same_v<T, PoolOptions>) {
          for (const auto* v : {&value.kernel_size, &value.stride, &value.padding, &value.dilation})
            hash.mix(v->size());
          hash.mix(value.ceil_mode);
          hash.mix(value.count_include_pad);
        } else if constexpr (std::is_same_v<T, UnfoldOptions>) {
          for (const auto* v : {&value.kernel_size, &value.stride, &value.padding, &value.dilation})
            hash.mix(v->size());
        } else if constexpr (std::is_same_v<T, InterpolateOptions>) {
          hash.mix(static_cast<std::uint64_t>(value.mode));
          hash.mix(value.align_corners);
        } else if constexpr (std::is_same_v<T, AttentionOptions>) {
          hash.mix(value.scale.has_value());
          hash.mix(value.is_causal);
          hash.mix(value.dropout > 0);
        } else if constexpr (std::is_same_v<T, QuantScheme>) {
          hash.mix(static_cast<std::uint64_t>(value.kind));
          hash.mix(static_cast<std::uint64_t>(value.block_size));
        } else if constexpr (std::is_same_v<T, DeviceAttr>) {
          hash.mix(static_cast<std::uint64_t>(value.kind));
          hash.mix(static_cast<std::uint64_t>(value.index));
          hash.mix(value.autodiff);
          hash.mix(value.fused);
          hash.mix_text(value.url);
        } else if constexpr (std::is_same_v<T, TensorData>) {
          hash.mix(static_cast<std::uint64_t>(value.dtype()));
          hash.mix(value.shape().rank());
        } else if constexpr (std::is_same_v<T, GroupAttr>) {
          hash.mix(value.id);
        }
        // double: a value (epsilon), nothing of it in the key.
      },
      attribute);
}

// Calls visit(param, attribute index or -1, first input, input count) for each parameter.
template <class Visit>
void for_each_param(const Op& op, const OpSignature& sig, Visit&& visit) {
  const std::size_t list_size = sig.tensor_list ? op.inputs.size() - sig.tensors : 0;
  std::size_t input = 0;
  std::size_t attribute = 0;
  for (const Param& param : sig.params) {
    switch (param.slot) {
      case SlotKind::Attribute:
        visit(param, attribute++, input, 0);
        break;
      case SlotKind::TensorList:
        visit(param, 0, input, list_size);
        input += list_size;
        break;
      default:
        visit(param, 0, input, 1);
        ++input;
    }
  }
}

void mix_op(Hasher& hash, const Op& op) {
  hash.mix(static_cast<std::uint64_t>(op.code));
  hash.mix(op.inputs.size());
  for (TensorId id : op.inputs) hash.mix(id.index);
  const OpSignature& sig = signature(op.code);
  if (op.attributes.size() == sig.attributes) {
    for_each_param(op, sig, [&](const Param& param, std::size_t a, std::size_t, std::size_t) {
      if (param.slot == SlotKind::Attribute) mix_attribute(hash, param, op.attributes[a]);
    });
  } else {  // not a valid op: its attribute kinds still count
    for (const Attribute& attribute : op.attributes) hash.mix(attribute.index());
  }
  hash.mix(op.outputs.size());
  for (TensorId id : op.outputs) hash.mix(id.index);
  for (const TensorType& type : op.output_types) mix_type(hash, type);
}

[[noreturn]] void fail_invalid(std::string message) {
  throw InvalidArgument("[ir::validate] " + message);
}

}  // namespace

const OpSignature& signature(OpCode code) noexcept {
  return kSignatures[static_cast<std::size_t>(code)];
}

DeviceAttr DeviceAttr::of(const Device& device) {
  DeviceAttr attr;
  attr.kind = device.kind();
  attr.index = device.kind() == DeviceKind::Cuda ? device.index() : 0;
  attr.autodiff = device.is_autodiff();
  attr.fused = device.is_fused();
  attr.url = device.url();
  return attr;
}

Device DeviceAttr::to_device() const {
  Device device = Device::cpu();
  switch (kind) {
    case DeviceKind::Cpu:
      break;
    case DeviceKind::Cuda:
      device = Device::cuda(index);
      break;
    case DeviceKind::Remote:
      device = Device::remote(url);
      break;
  }
  if (autodiff) device = device.autodiff();
  if (fused) device = device.fused();
  return device;
}

GroupAttr GroupAttr::of(const ProcessGroup& group) {
  return {group.id(), group.rank(), group.size(), std::make_shared<const ProcessGroup>(group)};
}

const ProcessGroup& GroupAttr::to_group() const {
  if (!live) {
    kiln::detail::fail<InvalidArgument>("ir::replay", "process group #", id,
                                        " belongs to another process");
  }
  return *live;
}

std::string_view attribute_kind_name(AttributeKind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return i < kAttributeKinds ? kAttributeKindNames[i] : "unknown";
}

bool same_attribute(const Attribute& a, const Attribute& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Scalar>) {
          return same_scalar(x, y);
        } else if constexpr (std::is_same_v<T, double>) {
          return same_bits(x, y);
        } else if constexpr (std::is_same_v<T, Distribution>) {
          return x.kind == y.kind && same_bits(x.a, y.a) && same_bits(x.b, y.b);
        } else if constexpr (std::is_same_v<T, AttentionOptions>) {
          return x.is_causal == y.is_causal && x.scale.has_value() == y.scale.has_value() &&
                 (!x.scale || same_bits(*x.scale, *y.scale)) && same_bits(x.dropout, y.dropout);
        } else if constexpr (std::is_same_v<T, TensorData>) {
          const auto bx = x.bytes();
          const auto by = y.bytes();
          return x.dtype() == y.dtype() && x.shape() == y.shape() &&
                 (x.dtype() != DType::QFloat || x.scheme() == y.scheme()) &&
                 std::equal(bx.begin(), bx.end(), by.begin(), by.end());
        } else {
          return x == y;
        }
      },
      a);
}

std::string to_string(const Attribute& attribute) {
  return std::visit(
      [](const auto& value) -> std::string {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, Scalar>) {
          return scalar_text(value);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(value);
        } else if constexpr (std::is_same_v<T, bool>) {
          return value ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return number(value);
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtype_name(value));
        } else if constexpr (std::is_same_v<T, Shape>) {
          return value.to_string();
        } else if constexpr (std::is_same_v<T, Axes>) {
          return list(value);
        } else if constexpr (std::is_same_v<T, ResolvedSlices>) {
          std::string text = "[";
          for (std::size_t i = 0; i < value.size(); ++i) {
            text += kiln::detail::concat(i ? ", " : "", value[i].start, "+", value[i].length, "/",
                                         value[i].step);
          }
          return text + "]";
        } else if constexpr (std::is_same_v<T, Distribution>) {
          constexpr std::string_view names[] = {"default", "uniform", "normal", "bernoulli"};
          const auto i = static_cast<std::size_t>(value.kind);
          return std::string(i < std::size(names) ? names[i] : "?") + "(" + number(value.a) + ", " +
                 number(value.b) + ")";
        } else if constexpr (std::is_same_v<T, IndexingUpdate>) {
          return std::string(update_name(value));
        } else if constexpr (std::is_same_v<T, ReduceOperation>) {
          constexpr std::string_view names[] = {"sum", "mean", "max", "min"};
          const auto i = static_cast<std::size_t>(value);
          return std::string(i < std::size(names) ? names[i] : "?");
        } else if constexpr (std::is_same_v<T, ConvOptions>) {
          return "{stride=" + list(value.stride) + ", padding=" + list(value.padding) +
                 ", dilation=" + list(value.dilation) + ", groups=" + std::to_string(value.groups) +
                 "}";
        } else if constexpr (std::is_same_v<T, ConvTransposeOptions>) {
          return "{stride=" + list(value.stride) + ", padding=" + list(value.padding) +
                 ", padding_out=" + list(value.padding_out) + ", dilation=" + list(value.dilation) +
                 ", groups=" + std::to_string(value.groups) + "}";
        } else if constexpr (std::is_same_v<T, PoolOptions>) {
          return "{kernel_size=" + list(value.kernel_size) + ", stride=" + list(value.stride) +
                 ", padding=" + list(value.padding) + ", dilation=" + list(value.dilation) +
                 ", ceil_mode=" + (value.ceil_mode ? "true" : "false") +
                 ", count_include_pad=" + (value.count_include_pad ? "true" : "false") + "}";
        } else if constexpr (std::is_same_v<T, UnfoldOptions>) {
          return "{kernel_size=" + list(value.kernel_size) + ", stride=" + list(value.stride) +
                 ", padding=" + list(value.padding) + ", dilation=" + list(value.dilation) + "}";
        } else if constexpr (std::is_same_v<T, InterpolateOptions>) {
          constexpr std::string_view modes[] = {"nearest", "bilinear", "bicubic"};
          const auto i = static_cast<std::size_t>(value.mode);
          return "{mode=" + std::string(i < std::size(modes) ? modes[i] : "?") +
                 ", align_corners=" + (value.align_corners ? "true" : "false") + "}";
        } else if constexpr (std::is_same_v<T, AttentionOptions>) {
          return "{scale=" + (value.scale ? number(*value.scale) : std::string("default")) +
                 ", is_causal=" + (value.is_causal ? "true" : "false") +
                 (value.dropout > 0 ? ", dropout=" + number(value.dropout) : std::string()) + "}";
        } else if constexpr (std::is_same_v<T, QuantScheme>) {
          return kiln::detail::concat("{kind=", quant_kind_name(value.kind),
                                      ", block_size=", value.block_size, "}");
        } else if constexpr (std::is_same_v<T, DeviceAttr>) {
          std::string text = value.kind == DeviceKind::Cpu ? std::string("cpu")
                             : value.kind == DeviceKind::Cuda
                                 ? "cuda:" + std::to_string(value.index)
                                 : "remote:" + value.url;
          if (value.autodiff) text += "+autodiff";
          if (value.fused) text += "+fused";
          return text;
        } else if constexpr (std::is_same_v<T, GroupAttr>) {
          return kiln::detail::concat("group#", value.id, "(rank ", value.rank, " of ", value.size,
                                      ")");
        } else {
          static_assert(std::is_same_v<T, TensorData>);
          return "<data " + std::string(dtype_name(value.dtype())) + " " +
                 value.shape().to_string() + ">";
        }
      },
      attribute);
}

bool Op::operator==(const Op& other) const {
  if (code != other.code || inputs != other.inputs || outputs != other.outputs ||
      output_types != other.output_types || attributes.size() != other.attributes.size()) {
    return false;
  }
  for (std::size_t i = 0; i < attributes.size(); ++i) {
    if (!same_attribute(attributes[i], other.attributes[i])) return false;
  }
  return true;
}

std::uint32_t Program::value_count() const {
  std::size_t count = inputs.size();
  for (const Op& op : ops) count += op.outputs.size();
  return static_cast<std::uint32_t>(count);
}

std::string to_string(const Op& op) {
  std::string text;
  for (std::size_t i = 0; i < op.outputs.size(); ++i)
    text += (i ? ", " : "") + id_text(op.outputs[i]);
  if (!op.outputs.empty()) text += " = ";
  const auto code = static_cast<std::size_t>(op.code);
  if (code >= all_ops().size()) return text + "<unknown op " + std::to_string(code) + ">";
  const OpSignature& sig = signature(op.code);
  text += std::string(sig.name) + "(";
  const bool well_formed =
      op.attributes.size() == sig.attributes &&
      (sig.tensor_list ? op.inputs.size() >= sig.tensors : op.inputs.size() == sig.tensors);
  if (well_formed) {
    bool first = true;
    for_each_param(op, sig,
                   [&](const Param& param, std::size_t a, std::size_t input, std::size_t count) {
                     text += first ? "" : ", ";
                     first = false;
                     if (param.slot == SlotKind::Attribute) {
                       text += std::string(param.name) + "=" + to_string(op.attributes[a]);
                     } else if (param.slot == SlotKind::TensorList) {
                       text += "[";
                       for (std::size_t j = 0; j < count; ++j)
                         text += (j ? ", " : "") + id_text(op.inputs[input + j]);
                       text += "]";
                     } else {
                       text += id_text(op.inputs[input]);
                     }
                   });
  } else {  // printed as it is, for messages about it
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      text += (i ? ", " : "") + id_text(op.inputs[i]);
    for (const Attribute& attribute : op.attributes) text += ", " + to_string(attribute);
  }
  text += ")";
  for (std::size_t i = 0; i < op.output_types.size(); ++i) {
    text += (i ? ", " : " ") + type_text(op.output_types[i]);
  }
  return text;
}

std::string to_string(const Program& program) {
  std::string text;
  for (const ProgramInput& input : program.inputs) {
    text += id_text(input.id) + " = input " + type_text(input.type) + "\n";
  }
  for (const Op& op : program.ops) text += to_string(op) + "\n";
  if (!program.outputs.empty()) {
    text += "return";
    for (std::size_t i = 0; i < program.outputs.size(); ++i) {
      text += (i ? ", " : " ") + id_text(program.outputs[i]);
    }
    text += "\n";
  }
  return text;
}

std::uint64_t structure_hash(const Op& op) {
  Hasher hash;
  mix_op(hash, op);
  return hash.value();
}

std::uint64_t structure_hash(const Program& program) {
  Hasher hash;
  hash.mix(program.inputs.size());
  for (const ProgramInput& input : program.inputs) {
    hash.mix(input.id.index);
    mix_type(hash, input.type);
  }
  hash.mix(program.ops.size());
  for (const Op& op : program.ops) mix_op(hash, op);
  hash.mix(program.outputs.size());
  for (TensorId id : program.outputs) hash.mix(id.index);
  return hash.value();
}

namespace internal {

bool valid_dtype(DType dtype) noexcept {
  return static_cast<std::uint8_t>(dtype) <= static_cast<std::uint8_t>(DType::QFloat);
}

void check_type(const TensorType& type, const std::string& what, Fail fail) {
  if (!valid_dtype(type.dtype)) {
    fail(what + ": unknown dtype " + std::to_string(static_cast<int>(type.dtype)));
  }
  for (std::int64_t dim : type.shape.dims()) {
    if (dim < 0) fail(what + ": negative dim in shape " + type.shape.to_string());
  }
}

Defined defined_in(const std::vector<bool>& defined) {
  return {[](const void* context, std::uint32_t id) {
            const auto& flags = *static_cast<const std::vector<bool>*>(context);
            return id < flags.size() && flags[id];
          },
          &defined};
}

void check_op(const Op& op, Defined defined, std::size_t position, Fail fail) {
  const auto code = static_cast<std::size_t>(op.code);
  const std::string where = "op " + std::to_string(position);
  if (code >= all_ops().size()) fail(where + ": unknown op code " + std::to_string(code));
  const OpSignature& sig = signature(op.code);
  const std::string what = where + " (" + std::string(sig.name) + ")";
  if (sig.tensor_list ? op.inputs.size() < sig.tensors : op.inputs.size() != sig.tensors) {
    fail(kiln::detail::concat(what, ": ", op.inputs.size(), " tensor inputs where ops.def has ",
                              sig.tensor_list ? "at least " : "", static_cast<int>(sig.tensors)));
  }
  if (op.attributes.size() != sig.attributes) {
    fail(kiln::detail::concat(what, ": ", op.attributes.size(), " attributes where ops.def has ",
                              static_cast<int>(sig.attributes)));
  }
  for_each_param(op, sig,
                 [&](const Param& param, std::size_t a, std::size_t input, std::size_t count) {
                   if (param.slot == SlotKind::Attribute) {
                     const AttributeKind kind = kind_of(op.attributes[a]);
                     if (kind != param.attribute) {
                       fail(what + ": attribute " + std::string(param.name) + " is a " +
                            std::string(attribute_kind_name(kind)) + " where ops.def has a " +
                            std::string(attribute_kind_name(param.attribute)));
                     }
                     return;
                   }
                   for (std::size_t j = input; j < input + count; ++j) {
                     const TensorId id = op.inputs[j];
                     if (id == kNoTensor && param.slot == SlotKind::OptionalTensor) continue;
                     if (id == kNoTensor)
                       fail(what + ": tensor " + std::string(param.name) + " is missing");
                     if (!defined.test(defined.context, id.index)) {
                       fail(kiln::detail::concat(what, ": input ", param.name, " reads %", id.index,
                                                 ", which is not defined before it"));
                     }
                   }
                 });
  if (op.outputs.size() != sig.outputs || op.output_types.size() != op.outputs.size()) {
    fail(kiln::detail::concat(what, ": ", op.outputs.size(), " outputs and ",
                              op.output_types.size(), " output types where ops.def has ",
                              static_cast<int>(sig.outputs), " outputs"));
  }
  for (std::size_t i = 0; i < op.output_types.size(); ++i) {
    check_type(op.output_types[i], what + " output " + std::to_string(i), fail);
  }
}

}  // namespace internal

void validate(const Program& program) { internal::validate_program(program, fail_invalid); }

namespace internal {

void validate_program(const Program& program, Fail fail_invalid) {
  const std::uint32_t count = program.value_count();
  std::vector<bool> defined(count, false);
  auto define = [&](TensorId id, const std::string& what) {
    if (id.index >= count) {
      fail_invalid(kiln::detail::concat(what, " defines %", id.index, " but the program has ",
                                        count, " values"));
    }
    if (defined[id.index])
      fail_invalid(kiln::detail::concat(what, " defines %", id.index, " again"));
    defined[id.index] = true;
  };
  for (std::size_t i = 0; i < program.inputs.size(); ++i) {
    const std::string what = "input " + std::to_string(i);
    internal::check_type(program.inputs[i].type, what, fail_invalid);
    define(program.inputs[i].id, what);
  }
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    internal::check_op(op, internal::defined_in(defined), i, fail_invalid);
    for (TensorId id : op.outputs) {
      define(id, kiln::detail::concat("op ", i, " (", signature(op.code).name, ")"));
    }
  }
  for (TensorId id : program.outputs) {
    if (id.index >= count || !defined[id.index]) {
      fail_invalid(
          kiln::detail::concat("the program returns %", id.index, ", which it does not define"));
    }
  }
}

}  // namespace internal

TensorId Recorder::id_of(const Primitive& tensor) {
  const auto found = ids_.find(tensor.get());
  if (found != ids_.end()) return found->second;
  const TensorId id{next_id_++};
  program_.inputs.push_back({id, {tensor->dtype(), tensor->shape()}});
  ids_.emplace(tensor.get(), id);
  held_.push_back(tensor);
  return id;
}

void Recorder::add_output(Op& op, const Primitive& tensor) {
  const TensorId id{next_id_++};
  op.outputs.push_back(id);
  op.output_types.push_back({tensor->dtype(), tensor->shape()});
  ids_[tensor.get()] = id;  // a view may return its input's primitive: the newest value wins
  held_.push_back(tensor);
}

}  // namespace kiln::ir

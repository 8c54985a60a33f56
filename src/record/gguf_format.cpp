#include "record/gguf_format.h"

#include <array>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"

namespace kiln::record::detail {
namespace {

using Kind = QuantScheme::Kind;

struct GgmlType {
  std::uint32_t id;
  std::string_view name;
  std::optional<DType> dtype;  // a plain dtype
  std::optional<Kind> kind;    // or a block kind
};

// ggml's type ids (ggml.h), pinned by the format; the gaps are ids ggml retired.
constexpr std::array kGgmlTypes{
    GgmlType{0, "F32", DType::F32, {}},    GgmlType{1, "F16", DType::F16, {}},
    GgmlType{2, "Q4_0", {}, Kind::Q4_0},   GgmlType{3, "Q4_1", {}, Kind::Q4_1},
    GgmlType{6, "Q5_0", {}, Kind::Q5_0},   GgmlType{7, "Q5_1", {}, Kind::Q5_1},
    GgmlType{8, "Q8_0", {}, Kind::Q8_0},   GgmlType{9, "Q8_1", {}, {}},
    GgmlType{10, "Q2_K", {}, Kind::Q2_K},  GgmlType{11, "Q3_K", {}, Kind::Q3_K},
    GgmlType{12, "Q4_K", {}, Kind::Q4_K},  GgmlType{13, "Q5_K", {}, Kind::Q5_K},
    GgmlType{14, "Q6_K", {}, Kind::Q6_K},  GgmlType{15, "Q8_K", {}, Kind::Q8_K},
    GgmlType{16, "IQ2_XXS", {}, {}},       GgmlType{17, "IQ2_XS", {}, {}},
    GgmlType{18, "IQ3_XXS", {}, {}},       GgmlType{19, "IQ1_S", {}, {}},
    GgmlType{20, "IQ4_NL", {}, {}},        GgmlType{21, "IQ3_S", {}, {}},
    GgmlType{22, "IQ2_S", {}, {}},         GgmlType{23, "IQ4_XS", {}, {}},
    GgmlType{24, "I8", DType::I8, {}},     GgmlType{25, "I16", DType::I16, {}},
    GgmlType{26, "I32", DType::I32, {}},   GgmlType{27, "I64", DType::I64, {}},
    GgmlType{28, "F64", DType::F64, {}},   GgmlType{29, "IQ1_M", {}, {}},
    GgmlType{30, "BF16", DType::BF16, {}}, GgmlType{34, "TQ1_0", {}, {}},
    GgmlType{35, "TQ2_0", {}, {}},         GgmlType{39, "MXFP4", {}, {}},
};

const GgmlType* find(std::uint32_t id) noexcept {
  for (const GgmlType& type : kGgmlTypes) {
    if (type.id == id) return &type;
  }
  return nullptr;
}

}  // namespace

std::string_view ggml_type_name(std::uint32_t id) noexcept {
  const GgmlType* type = find(id);
  return type ? type->name : std::string_view();
}

std::optional<GgufTensorType> tensor_type_from_ggml(std::uint32_t id) noexcept {
  const GgmlType* type = find(id);
  if (type == nullptr) return std::nullopt;
  if (type->dtype) return GgufTensorType{*type->dtype, {}};
  if (type->kind) return GgufTensorType{DType::QFloat, quant_scheme(*type->kind)};
  return std::nullopt;
}

std::optional<std::uint32_t> ggml_type_of(const TensorData& data) noexcept {
  for (const GgmlType& type : kGgmlTypes) {
    if (data.dtype() == DType::QFloat ? type.kind == data.scheme().kind
                                      : type.dtype == data.dtype()) {
      return type.id;
    }
  }
  return std::nullopt;
}

std::size_t gguf_scalar_size(GgufType type) noexcept {
  switch (type) {
    case GgufType::UInt8:
    case GgufType::Int8:
    case GgufType::Bool:
      return 1;
    case GgufType::UInt16:
    case GgufType::Int16:
      return 2;
    case GgufType::UInt32:
    case GgufType::Int32:
    case GgufType::Float32:
      return 4;
    case GgufType::UInt64:
    case GgufType::Int64:
    case GgufType::Float64:
      return 8;
    case GgufType::String:
    case GgufType::Array:
      return 0;
  }
  return 0;
}

bool is_gguf_type(std::uint32_t id) noexcept {
  return id <= static_cast<std::uint32_t>(GgufType::Float64);
}

std::uint32_t gguf_alignment(const GgufMetadata& metadata, std::string_view op,
                             std::string_view origin) {
  const auto it = metadata.find(std::string(kGgufAlignmentKey));
  if (it == metadata.end()) return kGgufDefaultAlignment;
  if (it->second.type() != GgufType::UInt32) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": ", kGgufAlignmentKey, " is a ",
                                        gguf_type_name(it->second.type()), ", not a uint32");
  }
  const std::uint32_t alignment = it->second.get<std::uint32_t>();
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": ", kGgufAlignmentKey, " is ", alignment,
                                        ", not a power of two");
  }
  return alignment;
}

}  // namespace kiln::record::detail

// Writing GGUF v3 as llama.cpp's writers do: metadata, tensor entries, then each tensor's data
// at the next multiple of the alignment.
#include <bit>
#include <cstring>

#include "core/atomic_file.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "record/gguf_format.h"

namespace kiln::record {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian and is written without byte swapping");

class Bytes {
 public:
  template <class T>
  void scalar(T value) {
    const auto* raw = reinterpret_cast<const std::byte*>(&value);
    out_.insert(out_.end(), raw, raw + sizeof(T));
  }
  void text(std::string_view value) {
    scalar<std::uint64_t>(value.size());
    const auto* raw = reinterpret_cast<const std::byte*>(value.data());
    out_.insert(out_.end(), raw, raw + value.size());
  }
  void pad_to(std::uint64_t alignment) {
    out_.resize(out_.size() + padding(out_.size(), alignment));
  }
  static std::uint64_t padding(std::uint64_t size, std::uint64_t alignment) {
    return (alignment - size % alignment) % alignment;
  }
  std::vector<std::byte>& bytes() { return out_; }

 private:
  std::vector<std::byte> out_;
};

struct Writer {
  std::string_view op;
  std::string_view origin;
  Bytes header;

  void value(const GgufValue& value, const std::string& key) {
    std::visit(
        [&]<class T>(const T& held) {
          if constexpr (std::is_same_v<T, std::string>) {
            header.text(held);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            header.scalar(static_cast<std::uint32_t>(held.element_type));
            header.scalar<std::uint64_t>(held.values.size());
            for (const GgufValue& element : held.values) {
              if (element.type() != held.element_type) {
                kiln::detail::fail<InvalidArgument>(op, origin, ": metadata '", key,
                                                    "' is an array of ",
                                                    gguf_type_name(held.element_type),
                                                    " holding a ", gguf_type_name(element.type()));
              }
              this->value(element, key);
            }
          } else if constexpr (std::is_same_v<T, bool>) {
            header.scalar<std::uint8_t>(held ? 1 : 0);
          } else {
            header.scalar(held);
          }
        },
        value.value());
  }
};

struct Plan {
  std::vector<std::byte> header;  // through the padding before the data
  std::uint32_t alignment;
};

Plan plan(const GgufFile& file, std::string_view op, std::string_view origin) {
  const std::uint32_t alignment = detail::gguf_alignment(file.metadata, op, origin);
  Writer writer{op, origin, {}};
  Bytes& out = writer.header;
  out.scalar(detail::kGgufMagic);
  out.scalar(detail::kGgufVersion);
  out.scalar<std::uint64_t>(file.tensors.size());
  out.scalar<std::uint64_t>(file.metadata.size());
  for (const auto& [key, value] : file.metadata) {
    out.text(key);
    out.scalar(static_cast<std::uint32_t>(value.type()));
    writer.value(value, key);
  }
  std::uint64_t offset = 0;
  for (const auto& [name, data] : file.tensors) {
    const std::optional<std::uint32_t> type = detail::ggml_type_of(data);
    if (!type) {
      kiln::detail::fail<UnsupportedDType>(op, origin, ": tensor '", name, "' is ",
                                           data.dtype() == DType::QFloat
                                               ? quant_kind_name(data.scheme().kind)
                                               : dtype_name(data.dtype()),
                                           ", which GGUF has no type for");
    }
    const Shape& shape = data.shape();
    if (shape.rank() > detail::kGgufMaxDims) {
      kiln::detail::fail<InvalidArgument>(op, origin, ": tensor '", name, "' of shape ",
                                          shape.to_string(), " has more than ",
                                          detail::kGgufMaxDims, " dims");
    }
    out.text(name);
    out.scalar(static_cast<std::uint32_t>(shape.rank()));
    for (std::size_t i = shape.rank(); i-- > 0;) out.scalar<std::uint64_t>(shape[i]);
    out.scalar(*type);
    out.scalar(offset);
    offset += data.bytes().size() + Bytes::padding(data.bytes().size(), alignment);
  }
  out.pad_to(alignment);
  return {std::move(out.bytes()), alignment};
}

}  // namespace

std::vector<std::byte> serialize_gguf(const GgufFile& file) {
  Plan p = plan(file, "serialize_gguf", "<memory>");
  std::vector<std::byte> out = std::move(p.header);
  for (const auto& [name, data] : file.tensors) {
    out.insert(out.end(), data.bytes().begin(), data.bytes().end());
    out.resize(out.size() + Bytes::padding(data.bytes().size(), p.alignment));
  }
  return out;
}

void save_gguf(const std::filesystem::path& path, const GgufFile& file) {
  constexpr std::string_view kOp = "save_gguf";
  const std::string origin = path.string();
  const Plan p = plan(file, kOp, origin);
  kiln::detail::AtomicFile out(path, kOp);
  out.write(p.header);
  const std::vector<std::byte> zeros(p.alignment);
  for (const auto& [name, data] : file.tensors) {
    out.write(data.bytes());
    out.write(std::span(zeros).first(Bytes::padding(data.bytes().size(), p.alignment)));
  }
  out.commit();
}

}  // namespace kiln::record

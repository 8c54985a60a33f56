// Reading GGUF. The header is parsed through a cursor that checks every length against what is
// left of the input before reading or allocating; tensors are then read straight into their own
// buffers. Files and memory share the parser through a small source interface.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "core/buffer.h"
#include "core/checked.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/quant.h"
#include "record/gguf_format.h"
#include "record/input_file.h"

namespace kiln::record {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian and is read without byte swapping");

// Bytes at an offset of a file or of memory; a read past the end is the caller's bug, so
// callers check against size() first.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const noexcept = 0;
  virtual void read(std::uint64_t offset, std::span<std::byte> out) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::uint64_t size() const noexcept override { return bytes_.size(); }
  void read(std::uint64_t offset, std::span<std::byte> out) override {
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
  }

 private:
  std::span<const std::byte> bytes_;
};

class FileSource final : public Source {
 public:
  FileSource(const std::filesystem::path& path, std::string_view op) : file_(path, op) {}
  std::uint64_t size() const noexcept override { return file_.size(); }
  void read(std::uint64_t offset, std::span<std::byte> out) override { file_.read_at(offset, out); }
  const std::string& origin() const noexcept { return file_.origin(); }

 private:
  detail::InputFile file_;
};

// One tensor's header entry after every check.
struct TensorInfo {
  std::string name;
  detail::GgufTensorType type;
  Shape shape;
  std::uint64_t offset;  // into the data section
  std::uint64_t bytes;
};

struct Header {
  GgufMetadata metadata;
  std::vector<TensorInfo> tensors;
  std::uint64_t data_start = 0;
};

class Parser {
 public:
  Parser(Source& source, std::string_view op, std::string_view origin)
      : source_(source), op_(op), origin_(origin) {}

  Header parse() {
    const std::uint32_t magic = u32("the magic");
    if (magic != detail::kGgufMagic) fail("not a GGUF file (magic ", hex(magic), ")");
    const std::uint32_t version = u32("the version");
    // Version 2 has version 3's layout (3 added big-endian files, marked only by the version
    // bytes themselves); version 1 counted in 32 bits.
    if (version != 2 && version != detail::kGgufVersion) {
      fail("GGUF version ", version, " is not supported (2 and 3 are",
           version > 0xffff ? "; a big-endian file?" : "", ")");
    }
    const std::uint64_t tensor_count = u64("the tensor count");
    const std::uint64_t kv_count = u64("the metadata count");
    // A key-value pair takes at least 13 bytes and a tensor entry 24, so a count the rest of
    // the file cannot hold is refused before anything is reserved for it.
    check_count(kv_count, 13, "metadata entries");
    Header header;
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      std::string key = string("a metadata key");
      const std::uint64_t at = position_;
      const std::uint32_t type = u32("the type of '" + key + "'");
      GgufValue value = read_value(type, at, key, 0);
      if (!header.metadata.emplace(key, std::move(value)).second) {
        fail("metadata key '", key, "' appears twice");
      }
    }
    const std::uint32_t alignment = detail::gguf_alignment(header.metadata, op_, origin_);
    check_count(tensor_count, 24, "tensor entries");
    header.tensors.reserve(static_cast<std::size_t>(tensor_count));
    std::set<std::string_view> names;
    for (std::uint64_t i = 0; i < tensor_count; ++i) header.tensors.push_back(tensor_info());
    for (const TensorInfo& info : header.tensors) {
      if (!names.insert(info.name).second) fail("tensor '", info.name, "' appears twice");
    }
    // The data section starts at the next multiple of the alignment after the header.
    header.data_start = position_ + (alignment - position_ % alignment) % alignment;
    check_layout(header.tensors, header.data_start, alignment);
    return header;
  }

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    kiln::detail::fail<InvalidArgument>(op_, origin_, ": ", std::forward<Parts>(parts)...);
  }

 private:
  static std::string hex(std::uint32_t value) {
    constexpr char kDigits[] = "0123456789abcdef";
    std::string text = "0x";
    for (int shift = 28; shift >= 0; shift -= 4) text += kDigits[(value >> shift) & 0xf];
    return text;
  }

  std::uint64_t left() const noexcept { return source_.size() - position_; }

  void take(std::span<std::byte> out, std::string_view what) {
    if (out.size() > left()) {
      fail("truncated: ", what, " needs ", out.size(), " bytes at offset ", position_, ", ", left(),
           " left");
    }
    source_.read(position_, out);
    position_ += out.size();
  }
  template <class T>
  T scalar(std::string_view what) {
    std::byte raw[sizeof(T)];
    take(raw, what);
    T value;
    std::memcpy(&value, raw, sizeof(T));
    return value;
  }
  std::uint32_t u32(std::string_view what) { return scalar<std::uint32_t>(what); }
  std::uint64_t u64(std::string_view what) { return scalar<std::uint64_t>(what); }

  std::string string(std::string_view what) {
    const std::uint64_t length = u64(what);
    if (length > left()) {
      fail("truncated: ", what, " of ", length, " bytes at offset ", position_, ", ", left(),
           " left");
    }
    std::string text(static_cast<std::size_t>(length), '\0');
    take(std::as_writable_bytes(std::span(text)), what);
    return text;
  }

  void check_count(std::uint64_t count, std::uint64_t min_bytes, std::string_view what) {
    if (count > left() / min_bytes) {
      fail(count, " ", what, " cannot fit in the ", left(), " bytes left at offset ", position_);
    }
  }

  GgufValue read_value(std::uint32_t type_id, std::uint64_t at, const std::string& key, int depth) {
    if (!detail::is_gguf_type(type_id)) {
      fail("metadata '", key, "' has unknown value type ", type_id, " at offset ", at);
    }
    const auto type = static_cast<GgufType>(type_id);
    switch (type) {
      case GgufType::UInt8:
        return GgufValue(scalar<std::uint8_t>(key));
      case GgufType::Int8:
        return GgufValue(scalar<std::int8_t>(key));
      case GgufType::UInt16:
        return GgufValue(scalar<std::uint16_t>(key));
      case GgufType::Int16:
        return GgufValue(scalar<std::int16_t>(key));
      case GgufType::UInt32:
        return GgufValue(scalar<std::uint32_t>(key));
      case GgufType::Int32:
        return GgufValue(scalar<std::int32_t>(key));
      case GgufType::Float32:
        return GgufValue(scalar<float>(key));
      case GgufType::UInt64:
        return GgufValue(scalar<std::uint64_t>(key));
      case GgufType::Int64:
        return GgufValue(scalar<std::int64_t>(key));
      case GgufType::Float64:
        return GgufValue(scalar<double>(key));
      case GgufType::Bool: {
        const auto byte = scalar<std::uint8_t>(key);
        if (byte > 1) fail("metadata '", key, "' has bool byte ", int(byte), " at offset ", at);
        return GgufValue(byte == 1);
      }
      case GgufType::String:
        return GgufValue(string(key));
      case GgufType::Array:
        return GgufValue(read_array(at, key, depth));
    }
    fail("metadata '", key, "' has unknown value type ", type_id);
  }

  GgufArray read_array(std::uint64_t at, const std::string& key, int depth) {
    if (depth >= detail::kGgufMaxArrayDepth) {
      fail("metadata '", key, "' nests arrays more than ", detail::kGgufMaxArrayDepth,
           " deep at offset ", at);
    }
    const std::uint32_t element_id = u32("the element type of '" + key + "'");
    if (!detail::is_gguf_type(element_id)) {
      fail("metadata '", key, "' is an array of unknown value type ", element_id);
    }
    GgufArray array{static_cast<GgufType>(element_id), {}};
    const std::uint64_t count = u64("the length of '" + key + "'");
    // Strings take at least their 8-byte length, arrays their 12-byte header.
    const std::size_t scalar_size = detail::gguf_scalar_size(array.element_type);
    const std::uint64_t min_bytes = scalar_size                              ? scalar_size
                                    : array.element_type == GgufType::String ? 8
                                                                             : 12;
    check_count(count, min_bytes, "values of '" + key + "'");
    array.values.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < count; ++i) {
      array.values.push_back(read_value(element_id, position_, key, depth + 1));
    }
    return array;
  }

  TensorInfo tensor_info() {
    TensorInfo info;
    const std::uint64_t at = position_;
    info.name = string("a tensor name");
    const std::uint32_t rank = u32("the rank of tensor '" + info.name + "'");
    if (rank > detail::kGgufMaxDims) {
      fail("tensor '", info.name, "' at offset ", at, " has ", rank, " dims, more than ",
           detail::kGgufMaxDims);
    }
    std::vector<std::int64_t> dims(rank);
    for (std::uint32_t i = 0; i < rank; ++i) {
      const std::uint64_t dim = u64("a dim of tensor '" + info.name + "'");
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail("tensor '", info.name, "' has dim ", dim);
      }
      dims[rank - 1 - i] = static_cast<std::int64_t>(dim);  // GGUF lists the innermost first
    }
    info.shape = Shape(dims);
    const std::uint32_t type_id = u32("the type of tensor '" + info.name + "'");
    const std::optional<detail::GgufTensorType> type = detail::tensor_type_from_ggml(type_id);
    if (!type) {
      const std::string_view name = detail::ggml_type_name(type_id);
      if (name.empty()) fail("tensor '", info.name, "' has unknown ggml type ", type_id);
      kiln::detail::fail<UnsupportedDType>(op_, origin_, ": tensor '", info.name, "' is ", name,
                                           " (ggml type ", type_id, "), which kiln cannot hold");
    }
    info.type = *type;
    info.offset = u64("the offset of tensor '" + info.name + "'");
    try {
      info.bytes = info.type.dtype == DType::QFloat
                       ? quantized_bytes(info.shape, info.type.scheme, op_)
                       : checked::dense_bytes(info.shape, info.type.dtype, op_);
    } catch (const Error& error) {
      fail("tensor '", info.name, "' of shape ", info.shape.to_string(), ": ", error.what());
    }
    return info;
  }

  void check_layout(std::vector<TensorInfo>& tensors, std::uint64_t data_start,
                    std::uint32_t alignment) const {
    const std::uint64_t data_size = source_.size() > data_start ? source_.size() - data_start : 0;
    for (const TensorInfo& info : tensors) {
      if (info.offset % alignment != 0) {
        fail("tensor '", info.name, "' at offset ", info.offset, " is not aligned to ", alignment);
      }
      if (info.bytes > data_size || info.offset > data_size - info.bytes) {
        fail("tensor '", info.name, "' of ", info.bytes, " bytes at offset ", info.offset,
             " runs past the data's ", data_size, " bytes");
      }
    }
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& info : tensors) {
      if (info.bytes > 0) order.push_back(&info);
    }
    std::ranges::sort(order, {}, &TensorInfo::offset);
    for (std::size_t i = 1; i < order.size(); ++i) {
      if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset) {
        fail("tensors '", order[i - 1]->name, "' and '", order[i]->name, "' overlap");
      }
    }
  }

  Source& source_;
  std::string_view op_;
  std::string_view origin_;
  std::uint64_t position_ = 0;
};

GgufFile read(Source& source, std::string_view op, std::string_view origin) {
  Parser parser(source, op, origin);
  Header header = parser.parse();
  GgufFile file{{}, std::move(header.metadata)};
  for (TensorInfo& info : header.tensors) {
    std::vector<std::byte> bytes = kiln::detail::allocate_bytes(info.bytes);
    source.read(header.data_start + info.offset, bytes);
    TensorData data =
        info.type.dtype == DType::QFloat
            ? TensorData::quantized(std::move(bytes), std::move(info.shape), info.type.scheme)
            : TensorData(std::move(bytes), std::move(info.shape), info.type.dtype);
    file.tensors.emplace(std::move(info.name), std::move(data));
  }
  return file;
}

}  // namespace

GgufFile parse_gguf(std::span<const std::byte> bytes, std::string_view origin) {
  MemorySource source(bytes);
  return read(source, "parse_gguf", origin);
}

GgufFile load_gguf(const std::filesystem::path& path) {
  FileSource source(path, "load_gguf");
  return read(source, "load_gguf", source.origin());
}

}  // namespace kiln::record

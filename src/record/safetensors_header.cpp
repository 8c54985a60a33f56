// Parsing and checking a safetensors header. The file is untrusted: every value is checked
// for type and range before it is used, sizes are computed with overflow checks, and the
// tensors must tile the data buffer exactly as the reference reader demands.
#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "record/safetensors_format.h"

namespace kiln::record::detail {
namespace {

using Json = nlohmann::json;

// A valid header nests three levels (file, tensor, shape); the limit stops a hostile header
// of a hundred million brackets from costing gigabytes before it is rejected, much as the
// reference's JSON parser stops at 128 levels.
constexpr int kMaxDepth = 16;
constexpr std::uint64_t kMaxDim =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Messages quote names and values from the file; a hostile file could make them huge.
std::string shorten(std::string text) {
  constexpr std::size_t kLimit = 120;
  if (text.size() > kLimit) {
    text.resize(kLimit);
    text += "...";
  }
  return text;
}

std::string excerpt(const Json& value) {
  return shorten(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string a_type(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

// A JSON integer >= 0; floats (even 2.0), negatives and values past 2^64 are not.
std::optional<std::uint64_t> as_count(const Json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  }
  return std::nullopt;
}

// Builds the header's JSON value from nlohmann's SAX events. nlohmann keeps the last of
// duplicate keys silently, and a file with two tensors of one name is ambiguous, so a key
// already in its object is refused as it is read. (nlohmann's own callback parser cannot be
// used: closing each tensor's object rescans the whole file object, quadratic in the number of
// tensors.)
class JsonBuilder final : public nlohmann::json_sax<Json> {
 public:
  using Fail = std::function<void(std::string)>;
  explicit JsonBuilder(Fail fail) : fail_(std::move(fail)) {}

  Json take() { return std::move(root_); }

  bool null() override { return add(nullptr); }
  bool boolean(bool value) override { return add(value); }
  bool number_integer(number_integer_t value) override { return add(value); }
  bool number_unsigned(number_unsigned_t value) override { return add(value); }
  bool number_float(number_float_t value, const string_t&) override { return add(value); }
  bool string(string_t& value) override { return add(std::move(value)); }
  bool binary(binary_t& value) override { return add(Json::binary(std::move(value))); }

  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& name) override {
    if (open_.back()->contains(name)) {
      if (open_.size() == 1) fail_("tensor name '" + shorten(name) + "' appears twice");
      fail_("key '" + shorten(name) + "' appears twice in one object");
    }
    key_ = std::move(name);
    return true;
  }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    fail_(std::string("the header is not valid JSON: ") + error.what());
    return false;
  }

 private:
  // Where a finished value goes: the root, the end of the open array, or the open object under
  // the last key. Pointers into the tree stay valid: an array grows only while none of its
  // elements is open, and object members never move.
  template <class Value>
  Json* place(Value&& value) {
    if (open_.empty()) {
      root_ = Json(std::forward<Value>(value));
      return &root_;
    }
    Json& container = *open_.back();
    if (container.is_array()) {
      container.push_back(Json(std::forward<Value>(value)));
      return &container.back();
    }
    auto& members = container.get_ref<Json::object_t&>();
    return &members.emplace(std::move(key_), Json(std::forward<Value>(value))).first->second;
  }

  template <class Value>
  bool add(Value&& value) {
    place(std::forward<Value>(value));
    return true;
  }

  bool open(Json container) {
    if (open_.size() >= static_cast<std::size_t>(kMaxDepth)) {
      fail_("the header nests deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    open_.push_back(place(std::move(container)));
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  Fail fail_;
  Json root_;
  std::vector<Json*> open_;
  std::string key_;
};

class HeaderParser {
 public:
  HeaderParser(std::uint64_t data_size, std::string_view op, std::string_view origin)
      : data_size_(data_size), op_(op), origin_(origin) {}

  template <class E = InvalidArgument, class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    kiln::detail::fail<E>(op_, origin_, ": ", std::forward<Parts>(parts)...);
  }

  Header parse(std::span<const std::byte> bytes) {
    const Json root = parse_json(bytes);
    if (!root.is_object()) fail("the header is ", a_type(root), ", not a JSON object");
    Header header;
    for (const auto& [name, value] : root.items()) {
      if (name == "__metadata__") {
        header.metadata = parse_metadata(value);
      } else {
        header.tensors.push_back(parse_entry(name, value));
      }
    }
    check_tiling(header.tensors);
    return header;
  }

 private:
  // The header must be what the reference reader takes: UTF-8 JSON text, optionally surrounded
  // by JSON whitespace (its writer pads with spaces). nlohmann would skip a byte-order mark and
  // end the text at a NUL byte, so both are refused here first.
  Json parse_json(std::span<const std::byte> bytes) {
    constexpr std::array<std::byte, 3> kByteOrderMark = {std::byte{0xEF}, std::byte{0xBB},
                                                         std::byte{0xBF}};
    if (bytes.size() >= 3 &&
        std::equal(kByteOrderMark.begin(), kByteOrderMark.end(), bytes.begin())) {
      fail(
          "the header starts with a UTF-8 byte-order mark (EF BB BF); safetensors headers "
          "must not have one");
    }
    if (const auto nul = std::find(bytes.begin(), bytes.end(), std::byte{0}); nul != bytes.end()) {
      fail("the header holds a NUL byte at offset ", nul - bytes.begin(),
           " (JSON text cannot contain one; pad a header with spaces)");
    }
    JsonBuilder builder([this](std::string message) { fail(message); });
    const char* begin = reinterpret_cast<const char*>(bytes.data());
    try {
      Json::sax_parse(begin, begin + bytes.size(), &builder);
    } catch (const Json::exception& e) {
      fail("the header is not valid JSON: ", e.what());
    }
    return builder.take();
  }

  Metadata parse_metadata(const Json& value) const {
    if (!value.is_object()) {
      fail("__metadata__ is ", a_type(value), ", not an object of strings");
    }
    Metadata metadata;
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) {
        fail("__metadata__ entry '", shorten(key), "' is ", a_type(text), ", not a string");
      }
      metadata.emplace(key, text.get<std::string>());
    }
    return metadata;
  }

  TensorEntry parse_entry(const std::string& name, const Json& value) const {
    const std::string quoted = "tensor '" + shorten(name) + "'";
    if (!value.is_object()) {
      fail(quoted, " is ", a_type(value), ", not an object with dtype, shape and data_offsets");
    }
    for (const auto& [field, ignored] : value.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        fail(quoted, " has an unknown field '", shorten(field),
             "' (expected dtype, shape and data_offsets)");
      }
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) fail(quoted, " has no ", field);
    }
    TensorEntry entry{name, parse_dtype(quoted, value["dtype"]), Shape{}, 0, 0};
    const std::uint64_t elements = parse_shape(quoted, value["shape"], entry.shape);
    parse_offsets(quoted, value["data_offsets"], entry);

    std::uint64_t needed = 0;
    const bool overflow = __builtin_mul_overflow(elements, dtype_size(entry.dtype), &needed);
    const std::string described =
        entry.shape.to_string() + " " + std::string(safetensors_dtype_name(entry.dtype, op_));
    if (overflow) fail(quoted, " has shape ", described, ", 2^64 bytes or more");
    if (entry.end - entry.begin != needed) {
      fail(quoted, " has data_offsets [", entry.begin, ", ", entry.end, "] but shape ", described,
           " needs ", needed, " bytes");
    }
    return entry;
  }

  DType parse_dtype(const std::string& quoted, const Json& value) const {
    if (!value.is_string()) fail(quoted, " has a dtype that is ", a_type(value), ", not a string");
    const std::string& name = value.get_ref<const std::string&>();
    if (const std::optional<DType> dtype = dtype_from_safetensors_name(name)) return *dtype;
    if (is_foreign_safetensors_dtype(name)) {
      fail<UnsupportedDType>(quoted, " has dtype ", name, ", which kiln cannot hold");
    }
    fail(quoted, " has unknown dtype '", shorten(name), "'");
  }

  // Fills shape; returns the element count. The product of the non-zero dims must fit in
  // int64, so Shape's own arithmetic can never overflow, even for shapes holding a zero.
  std::uint64_t parse_shape(const std::string& quoted, const Json& value, Shape& shape) const {
    if (!value.is_array()) fail(quoted, " has a shape that is ", a_type(value), ", not an array");
    kiln::detail::DimVector dims;
    std::uint64_t product = 1;
    bool has_zero = false;
    for (std::size_t i = 0; i < value.size(); ++i) {
      const Json& dim = value[i];
      if (dim.is_number_integer() && !dim.is_number_unsigned()) {
        if (dim.get<std::int64_t>() < 0) {
          fail(quoted, " has the negative dim ", dim.get<std::int64_t>(), " at position ", i,
               " of its shape ", excerpt(value));
        }
      }
      const std::optional<std::uint64_t> extent = as_count(dim);
      if (!extent) {
        fail(quoted, " has ", excerpt(dim), " at position ", i, " of its shape ", excerpt(value),
             ", not a non-negative integer");
      }
      if (*extent == 0) {
        has_zero = true;
      } else if (__builtin_mul_overflow(product, *extent, &product) || product > kMaxDim) {
        fail(quoted, " has shape ", excerpt(value), ", 2^63 elements or more");
      }
      dims.push_back(static_cast<std::int64_t>(*extent));
    }
    shape = Shape(std::move(dims));
    return has_zero ? 0 : product;
  }

  void parse_offsets(const std::string& quoted, const Json& value, TensorEntry& entry) const {
    std::optional<std::uint64_t> begin, end;
    if (value.is_array() && value.size() == 2) {
      begin = as_count(value[0]);
      end = as_count(value[1]);
    }
    if (!begin || !end) {
      fail(quoted, " has data_offsets ", excerpt(value),
           ", not an array of two non-negative integers");
    }
    if (*begin > *end) {
      fail(quoted, " has reversed data_offsets [", *begin, ", ", *end, "]");
    }
    if (*end > data_size_) {
      fail(quoted, " has data_offsets [", *begin, ", ", *end, "] past the end of the ", data_size_,
           "-byte data buffer (a truncated file?)");
    }
    entry.begin = *begin;
    entry.end = *end;
  }

  // The reference accepts a file only if its tensors cover the data buffer exactly once.
  void check_tiling(std::vector<TensorEntry>& tensors) const {
    std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t covered = 0;
    const TensorEntry* previous = nullptr;
    for (const TensorEntry& t : tensors) {
      if (t.begin < covered) {
        fail("tensor '", shorten(t.name), "' at data_offsets [", t.begin, ", ", t.end,
             "] overlaps tensor '", shorten(previous->name), "' at [", previous->begin, ", ",
             previous->end, "]");
      }
      if (t.begin > covered) {
        fail("bytes [", covered, ", ", t.begin, ") of the data buffer belong to no tensor");
      }
      covered = t.end;
      previous = &t;
    }
    if (covered != data_size_) {
      fail("the data buffer has ", data_size_, " bytes but the tensors cover only ", covered,
           " (trailing bytes)");
    }
  }

  std::uint64_t data_size_;
  std::string_view op_;
  std::string_view origin_;
};

}  // namespace

void check_prefix(std::uint64_t file_size, std::string_view op, std::string_view origin) {
  if (file_size < 8) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": the file has ", file_size,
                                        " bytes, too few for the 8-byte header length "
                                        "(truncated, or not a safetensors file)");
  }
}

std::uint64_t check_header_length(std::uint64_t header_length, std::uint64_t file_size,
                                  std::string_view op, std::string_view origin) {
  check_prefix(file_size, op, origin);
  if (header_length > kMaxSafetensorsHeaderBytes) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": the header length ", header_length,
                                        " is over the limit of ", kMaxSafetensorsHeaderBytes,
                                        " bytes (corrupt, or not a safetensors file)");
  }
  if (header_length > file_size - 8) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": the header length ", header_length,
                                        " runs past the end of the ", file_size,
                                        "-byte file (truncated?)");
  }
  return file_size - 8 - header_length;
}

Header parse_header(std::span<const std::byte> json, std::uint64_t data_size, std::string_view op,
                    std::string_view origin) {
  return HeaderParser(data_size, op, origin).parse(json);
}

void check_bool_bytes(const TensorEntry& entry, std::span<const std::byte> bytes,
                      std::string_view op, std::string_view origin) {
  if (entry.dtype != DType::Bool) return;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != std::byte{0} && bytes[i] != std::byte{1}) {
      kiln::detail::fail<InvalidArgument>(op, origin, ": BOOL tensor '", shorten(entry.name),
                                          "' holds the byte ", static_cast<int>(bytes[i]),
                                          " at element ", i, " (must be 0 or 1)");
    }
  }
}

}  // namespace kiln::record::detail

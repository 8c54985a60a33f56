// The building blocks of kiln's binary formats: little-endian fixed-width fields, counts and
// lengths checked against what is left before anything is allocated or read. ir::serialize
// (op_ir.h) writes programs with them, the remote protocol (src/remote/protocol.h) its frames.
// A malformed buffer is a ProtocolError naming the byte offset and what was wrong.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/op_ir.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::ir::wire {

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
  // u8 dtype, [QFloat: scheme, axes], shape (layout in op_ir.h); defined below.
  void type(const TensorType& t);

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

class Reader {
 public:
  // where: the bracketed name errors start with ("ir::deserialize", "remote").
  Reader(std::span<const std::byte> bytes, std::size_t base,
         std::string_view where = "ir::deserialize")
      : bytes_(bytes), base_(base), where_(where) {}

  std::size_t left() const noexcept { return bytes_.size() - position_; }
  std::size_t offset() const noexcept { return base_ + position_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw ProtocolError(kiln::detail::concat("[", where_, "] at byte ", offset(),
                                             context_.empty() ? "" : " (", context_,
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
  TensorType type(std::string_view what);

 private:
  std::span<const std::byte> bytes_;
  std::size_t base_;
  std::size_t position_ = 0;
  std::string_view where_;
  std::string context_;
};

// One op: u32 byte length, then its code, inputs, attributes and outputs (layout in op_ir.h).
void write_op(Writer& out, const Op& op);
// Reads one op written by write_op, checking every field against ops.def's signature of its code
// (not its ids: those are the reader's to check). position names it in errors.
Op read_op(Reader& in, std::size_t position);
// A TensorData: u8 dtype, [QFloat: its scheme], its shape, u64 byte length, the bytes.
void write_data(Writer& out, const TensorData& data);
TensorData read_data(Reader& in);
// A QuantScheme: u8 kind, i64 block size; read_scheme refuses one check_quant_scheme refuses.
void write_scheme(Writer& out, const QuantScheme& scheme);
QuantScheme read_scheme(Reader& in);
// The part of write_data before the byte length (a reply or an upload sends the bytes after it).
inline void write_data_head(Writer& out, const TensorData& data) {
  out.u8(static_cast<std::uint8_t>(data.dtype()));
  if (data.dtype() == DType::QFloat) write_scheme(out, data.scheme());
  out.ints(data.shape().dims());
}

inline void Writer::type(const TensorType& t) {
  u8(static_cast<std::uint8_t>(t.dtype));
  if (t.dtype == DType::QFloat) {
    write_scheme(*this, t.scheme);
    ints(t.axes);
  }
  ints(t.shape.dims());
}

inline TensorType Reader::type(std::string_view what) {
  TensorType t;
  t.dtype = dtype(what);
  if (t.dtype == DType::QFloat) {
    t.scheme = read_scheme(*this);
    t.axes = ints(what);
  }
  t.shape = shape(what);
  return t;
}

}  // namespace kiln::ir::wire

// TensorData: host bytes plus dtype and shape, the currency between a user and a backend.
//
//   auto data = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2});
//   std::vector<float> values = data.to_vec<float>();     // DTypeMismatch if not F32
//   TensorData as_half = data.convert(DType::F16);
//
// Quantized data (dtype QFloat) holds the raw blocks of a QuantScheme (<kiln/quant.h>) and
// the logical shape of the values they encode:
//   TensorData q = data.quantize(quant_scheme(QuantScheme::Kind::Q8_0));  // last dim % 32 == 0
//   q.dtype() == DType::QFloat; q.scheme().kind; q.bytes();   // the blocks, as GGUF stores them
//   TensorData f = q.dequantize();                             // F32, same shape
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kiln/detail/format.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/options.h"
#include "kiln/shape.h"

namespace kiln {

class TensorData {
 public:
  TensorData() = default;
  // Takes raw bytes; throws ShapeMismatch if their count disagrees with shape and dtype, and
  // UnsupportedDType for QFloat, whose bytes need a scheme (TensorData::quantized).
  TensorData(std::vector<std::byte> bytes, Shape shape, DType dtype);
  // Takes the raw blocks of a QFloat tensor of the given logical shape. InvalidArgument for a
  // malformed scheme, ShapeMismatch if the last dim is not a whole number of blocks (or the
  // shape is a scalar) or the byte count is not the one the scheme needs for shape.
  static TensorData quantized(std::vector<std::byte> bytes, Shape shape, QuantScheme scheme);

  template <class T>
  static TensorData from_vec(const std::vector<T>& values, Shape shape) {
    check_count("TensorData::from_vec", values.size(), shape);
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::byte> bytes(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) bytes[i] = std::byte(values[i] ? 1 : 0);
      return TensorData(std::move(bytes), std::move(shape), DType::Bool);
    } else {
      std::vector<std::byte> bytes(values.size() * sizeof(T));
      if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
      return TensorData(std::move(bytes), std::move(shape), dtype_of_v<T>);
    }
  }
  // A 1-D tensor of the values.
  template <class T>
  static TensorData from_vec(const std::vector<T>& values) {
    return from_vec(values, Shape{static_cast<std::int64_t>(values.size())});
  }
  // Every element set to value (converted to dtype).
  static TensorData full(Shape shape, double value, DType dtype);

  DType dtype() const noexcept { return dtype_; }
  // The block layout of QFloat data; DTypeMismatch for any other dtype.
  const QuantScheme& scheme() const;
  const Shape& shape() const noexcept { return shape_; }
  std::int64_t num_elements() const noexcept { return shape_.num_elements(); }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  std::span<std::byte> bytes() noexcept { return bytes_; }
  std::vector<std::byte> into_bytes() && { return std::move(bytes_); }

  // The elements as T; throws DTypeMismatch unless T is exactly the stored dtype.
  template <class T>
  std::vector<T> to_vec() const {
    check_dtype(dtype_of_v<T>);
    std::vector<T> out(static_cast<std::size_t>(num_elements()));
    if constexpr (std::is_same_v<T, bool>) {
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes_[i] != std::byte(0);
    } else if (!out.empty()) {
      std::memcpy(out.data(), bytes_.data(), bytes_.size());
    }
    return out;
  }
  // A typed view of the elements; throws DTypeMismatch like to_vec.
  template <class T>
  std::span<const T> as_span() const {
    check_dtype(dtype_of_v<T>);
    return {reinterpret_cast<const T*>(bytes_.data()), static_cast<std::size_t>(num_elements())};
  }
  // The elements converted to double (any dtype; QFloat is dequantized): for tests, printing.
  std::vector<double> to_f64_vec() const;
  // A copy converted to dtype (floats round to nearest even; float to int truncates; QFloat
  // is dequantized first). UnsupportedDType for dtype QFloat: quantize names a scheme.
  TensorData convert(DType dtype) const;

  // QFloat data decoded to F32 values of the same shape, bit for bit as llama.cpp's reference
  // decodes GGUF blocks. DTypeMismatch unless the data is QFloat.
  TensorData dequantize() const;
  // Float data (any float dtype, converted to F32 first) encoded in scheme's blocks along the
  // last dim. DTypeMismatch for non-float data, ShapeMismatch as for quantized(), InvalidArgument
  // for a NaN or infinite value, UnsupportedOperation for a scheme kiln can decode but not
  // encode (Q2_K, Q3_K, Q5_K, Q8_K; can_quantize).
  TensorData quantize(const QuantScheme& scheme) const;

  std::string to_string() const;

 private:
  static void check_count(const char* op, std::size_t count, const Shape& shape);
  void check_dtype(DType requested) const;

  std::vector<std::byte> bytes_;
  Shape shape_;
  DType dtype_ = DType::F32;
  QuantScheme scheme_{};  // meaningful only for QFloat
};

}  // namespace kiln

#include "kiln/data.h"

#include <cmath>
#include <sstream>

#include "core/checked.h"
#include "core/dtype_dispatch.h"
#include "kiln/quant.h"
#include "quant/blocks.h"

namespace kiln {

TensorData::TensorData(std::vector<std::byte> bytes, Shape shape, DType dtype)
    : bytes_(std::move(bytes)), shape_(std::move(shape)), dtype_(dtype) {
  if (dtype == DType::QFloat) {
    detail::fail<UnsupportedDType>("TensorData",
                                   "qfloat bytes need their scheme: use TensorData::quantized");
  }
  for (std::int64_t d : shape_.dims()) {
    if (d < 0)
      detail::fail<ShapeMismatch>("TensorData", "negative dimension in ", shape_.to_string());
  }
  // Checked: [0] bytes must not pass for a shape like [2^32, 2^32] whose count wraps to 0.
  const std::size_t expected = checked::dense_bytes(shape_, dtype, "TensorData");
  if (bytes_.size() != expected) {
    detail::fail<ShapeMismatch>("TensorData", bytes_.size(), " bytes given but shape ",
                                shape_.to_string(), " of ", dtype_name(dtype), " needs ", expected);
  }
}

TensorData TensorData::quantized(std::vector<std::byte> bytes, Shape shape, QuantScheme scheme) {
  constexpr std::string_view kOp = "TensorData::quantized";
  const std::size_t expected = quantized_bytes(shape, scheme, kOp);
  if (bytes.size() != expected) {
    detail::fail<ShapeMismatch>(kOp, bytes.size(), " bytes given but shape ", shape.to_string(),
                                " in ", quant_kind_name(scheme.kind), " needs ", expected);
  }
  TensorData data;
  data.bytes_ = std::move(bytes);
  data.shape_ = std::move(shape);
  data.dtype_ = DType::QFloat;
  data.scheme_ = scheme;
  return data;
}

const QuantScheme& TensorData::scheme() const {
  if (dtype_ != DType::QFloat) {
    detail::fail<DTypeMismatch>("TensorData::scheme", "only qfloat data has a scheme, this is ",
                                dtype_name(dtype_));
  }
  return scheme_;
}

TensorData TensorData::dequantize() const {
  if (dtype_ != DType::QFloat) {
    detail::fail<DTypeMismatch>("TensorData::dequantize", "the data is ", dtype_name(dtype_),
                                ", not qfloat");
  }
  std::vector<float> values(static_cast<std::size_t>(num_elements()));
  if (!values.empty()) {
    const quant::BlockSize block = quant::block_size(scheme_, shape_.dims().back());
    quant::dequantize_blocks(scheme_.kind, block, bytes_.data(), num_elements() / block.values,
                             values.data());
  }
  return from_vec(values, shape_);
}

TensorData TensorData::quantize(const QuantScheme& scheme) const {
  constexpr std::string_view kOp = "TensorData::quantize";
  if (!is_float(dtype_)) {
    detail::fail<DTypeMismatch>(kOp, "quantizes float data, not ", dtype_name(dtype_));
  }
  const std::size_t bytes = quantized_bytes(shape_, scheme, kOp);
  if (!can_quantize(scheme)) {
    detail::fail<UnsupportedOperation>(kOp, "kiln decodes ", quant_kind_name(scheme.kind),
                                       " but does not encode it");
  }
  const TensorData f32 = convert(DType::F32);
  const std::span<const float> values = f32.as_span<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      detail::fail<InvalidArgument>(kOp, "value ", values[i], " at flat index ", i,
                                    " cannot be quantized");
    }
  }
  std::vector<std::byte> out(bytes);
  if (!values.empty()) {
    const quant::BlockSize block = quant::block_size(scheme, shape_.dims().back());
    quant::quantize_blocks(scheme.kind, block, values.data(), num_elements() / block.values,
                           out.data());
  }
  return quantized(std::move(out), shape_, scheme);
}

void TensorData::check_count(const char* op, std::size_t count, const Shape& shape) {
  for (std::int64_t d : shape.dims()) {
    if (d < 0) detail::fail<ShapeMismatch>(op, "negative dimension in ", shape.to_string());
  }
  if (static_cast<std::int64_t>(count) != checked::num_elements(shape, op)) {
    detail::fail<ShapeMismatch>(op, count, " values given but shape ", shape.to_string(), " holds ",
                                shape.num_elements());
  }
}

void TensorData::check_dtype(DType requested) const {
  if (requested != dtype_) {
    detail::fail<DTypeMismatch>("TensorData::to_vec", "requested ", dtype_name(requested),
                                " but the data holds ", dtype_name(dtype_));
  }
}

TensorData TensorData::full(Shape shape, double value, DType dtype) {
  const std::size_t n = static_cast<std::size_t>(checked::num_elements(shape, "TensorData::full"));
  std::vector<std::byte> bytes(checked::dense_bytes(shape, dtype, "TensorData::full"));
  visit_dtype(dtype, "TensorData::full", [&]<class T>(type_tag<T>) {
    const T v = convert_element<T>(value);
    T* out = reinterpret_cast<T*>(bytes.data());
    for (std::size_t i = 0; i < n; ++i) out[i] = v;
  });
  return TensorData(std::move(bytes), std::move(shape), dtype);
}

std::vector<double> TensorData::to_f64_vec() const {
  if (dtype_ == DType::QFloat) return dequantize().to_f64_vec();
  const std::size_t n = static_cast<std::size_t>(num_elements());
  std::vector<double> out(n);
  visit_dtype(dtype_, "TensorData::to_f64_vec", [&]<class T>(type_tag<T>) {
    const T* in = reinterpret_cast<const T*>(bytes_.data());
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<double>(static_cast<compute_t<T>>(in[i]));
  });
  return out;
}

TensorData TensorData::convert(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (dtype == DType::QFloat) {
    detail::fail<UnsupportedDType>("TensorData::convert",
                                   "converting to qfloat needs a scheme: use quantize(scheme)");
  }
  if (dtype_ == DType::QFloat) return dequantize().convert(dtype);
  const std::size_t n = static_cast<std::size_t>(num_elements());
  std::vector<std::byte> bytes(n * dtype_size(dtype));
  visit_dtype(dtype_, "TensorData::convert", [&]<class From>(type_tag<From>) {
    visit_dtype(dtype, "TensorData::convert", [&]<class To>(type_tag<To>) {
      const From* in = reinterpret_cast<const From*>(bytes_.data());
      To* out = reinterpret_cast<To*>(bytes.data());
      for (std::size_t i = 0; i < n; ++i) out[i] = convert_element<To>(in[i]);
    });
  });
  return TensorData(std::move(bytes), shape_, dtype);
}

std::string TensorData::to_string() const {
  std::ostringstream out;
  out << "TensorData(" << dtype_name(dtype_);
  if (dtype_ == DType::QFloat) out << " " << quant_kind_name(scheme_.kind);
  out << ", " << shape_ << ", [";
  const std::vector<double> values = to_f64_vec();
  const std::size_t shown = std::min<std::size_t>(values.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << values[i];
  if (shown < values.size()) out << ", ...";
  out << "])";
  return out.str();
}

}  // namespace kiln

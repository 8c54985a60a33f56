#include "kiln/data.h"

#include <sstream>

#include "core/checked.h"
#include "core/dtype_dispatch.h"

namespace kiln {

TensorData::TensorData(std::vector<std::byte> bytes, Shape shape, DType dtype)
    : bytes_(std::move(bytes)), shape_(std::move(shape)), dtype_(dtype) {
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
  out << "TensorData(" << dtype_name(dtype_) << ", " << shape_ << ", [";
  const std::vector<double> values = to_f64_vec();
  const std::size_t shown = std::min<std::size_t>(values.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << values[i];
  if (shown < values.size()) out << ", ...";
  out << "])";
  return out.str();
}

}  // namespace kiln

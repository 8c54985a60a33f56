// Creation: from host data, constants, ranges and random values.
#include <cmath>

#include "tensor/common.h"

namespace kiln::detail {

namespace {

DType creation_dtype(std::optional<DType> dtype, const Device& device, Kind kind, const char* op) {
  const DType d = dtype ? *dtype : default_dtype(device, kind);
  if (kind_of(d) != kind) {
    fail<DTypeMismatch>(op, "dtype ", dtype_name(d), " is not of the ", kind_name(kind),
                        " kind of the tensor");
  }
  return d;
}

void check_dims(const Shape& shape, const char* op) {
  // Element counts past 2^48 cannot be allocated anywhere; refusing them early also keeps every
  // later size computation (elements * bytes per element) free of overflow.
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
  std::int64_t elements = 1;
  for (std::int64_t d : shape.dims()) {
    if (d < 0) fail<InvalidArgument>(op, "negative dimension in shape ", shape.to_string());
    if (d != 0 && elements > kMaxElements / d) {
      fail<OutOfMemory>(op, "shape ", shape.to_string(), " has more than 2^48 elements");
    }
    elements *= d;
  }
}

}  // namespace

Primitive from_data(TensorData data, Device device, Kind kind, std::size_t rank) {
  if (data.shape().rank() != rank) {
    fail<ShapeMismatch>("from_data", "data of shape ", data.shape().to_string(), " has rank ",
                        data.shape().rank(), " but the tensor type has rank ", rank);
  }
  if (kind_of(data.dtype()) != kind) {
    fail<DTypeMismatch>("from_data", "data of dtype ", dtype_name(data.dtype()),
                        " cannot make a ", kind_name(kind), " tensor");
  }
  settings_for(device);  // first use fixes the device settings
  return backend_for(device).from_data(std::move(data), device);
}

Primitive full(Shape shape, Scalar value, std::optional<DType> dtype, Device device, Kind kind) {
  check_dims(shape, "full");
  const DType d = creation_dtype(dtype, device, kind, "full");
  return backend_for(device).full(std::move(shape), value, d, device);
}

Primitive empty(Shape shape, std::optional<DType> dtype, Device device, Kind kind) {
  check_dims(shape, "empty");
  const DType d = creation_dtype(dtype, device, kind, "empty");
  return backend_for(device).empty(std::move(shape), d, device);
}

Primitive arange(std::int64_t start, std::int64_t end, std::int64_t step,
                 std::optional<DType> dtype, Device device, Kind kind) {
  if (step == 0) fail<InvalidArgument>("arange", "step cannot be 0");
  const DType d = creation_dtype(dtype, device, kind, "arange");
  return backend_for(device).arange(start, end, step, d, device);
}

Primitive linspace(double start, double end, std::int64_t count, std::optional<DType> dtype,
                   Device device) {
  if (count < 0) fail<InvalidArgument>("linspace", "negative count ", count);
  const DType d = creation_dtype(dtype, device, Kind::Float, "linspace");
  Backend& backend = backend_for(device);
  // start + i * step, computed in f64 and converted once.
  Primitive index = backend.arange(0, count, 1, DType::F64, device);
  const double step = count > 1 ? (end - start) / static_cast<double>(count - 1) : 0.0;
  Primitive values = backend.add_scalar(backend.mul_scalar(std::move(index), step), start);
  return backend.cast(std::move(values), d);
}

Primitive eye(std::int64_t rows, std::int64_t columns, std::optional<DType> dtype, Device device,
              Kind kind) {
  if (rows < 0 || columns < 0) fail<InvalidArgument>("eye", "negative size ", rows, "x", columns);
  const DType d = creation_dtype(dtype, device, kind, "eye");
  Backend& backend = backend_for(device);
  Primitive r = backend.reshape(backend.arange(0, rows, 1, DType::I64, device), Shape{rows, 1});
  Primitive c = backend.reshape(backend.arange(0, columns, 1, DType::I64, device), Shape{1, columns});
  return backend.cast(backend.equal(std::move(r), std::move(c)), d);
}

Primitive random(Shape shape, Distribution distribution, std::optional<DType> dtype, Device device,
                 Kind kind) {
  check_dims(shape, "random");
  distribution.check("random");
  const DType d = creation_dtype(dtype, device, kind, "random");
  return backend_for(device).random(std::move(shape), distribution, d, device);
}

}  // namespace kiln::detail

// Creation: from host data, constants, ranges and random values.
#include <cmath>
#include <map>
#include <mutex>

#include "core/checked.h"
#include "runtime/registry.h"
#include "tensor/common.h"

namespace kiln::detail {

namespace {

DType creation_dtype(std::optional<DType> dtype, const Device& device, Kind kind, const char* op) {
  const DType d = dtype ? *dtype : default_dtype(device, kind);
  if (d == DType::QFloat) {
    fail<UnsupportedDType>(op,
                           "a qfloat tensor holds the blocks of a scheme: make it with "
                           "quantize(scheme) or from quantized TensorData");
  }
  if (kind_of(d) != kind) {
    fail<DTypeMismatch>(op, "dtype ", dtype_name(d), " is not of the ", kind_name(kind),
                        " kind of the tensor");
  }
  return d;
}

// A negative dim is InvalidArgument; a shape no machine could hold is OutOfMemory, refused
// before any backend computes a size from it.
void check_dims(const Shape& shape, DType dtype, const char* op) {
  (void)checked::dense_bytes(shape, dtype, op);
}

}  // namespace

Primitive from_data(TensorData data, Device device, Kind kind, std::size_t rank) {
  if (data.shape().rank() != rank) {
    fail<ShapeMismatch>("from_data", "data of shape ", data.shape().to_string(), " has rank ",
                        data.shape().rank(), " but the tensor type has rank ", rank);
  }
  if (kind_of(data.dtype()) != kind) {
    fail<DTypeMismatch>("from_data", "data of dtype ", dtype_name(data.dtype()), " cannot make a ",
                        kind_name(kind), " tensor");
  }
  settings_for(device);  // first use fixes the device settings
  return backend_for(device).from_data(std::move(data), device);
}

Primitive full(Shape shape, Scalar value, std::optional<DType> dtype, Device device, Kind kind) {
  const DType d = creation_dtype(dtype, device, kind, "full");
  check_dims(shape, d, "full");
  return backend_for(device).full(std::move(shape), value, d, device);
}

Primitive empty(Shape shape, std::optional<DType> dtype, Device device, Kind kind) {
  const DType d = creation_dtype(dtype, device, kind, "empty");
  check_dims(shape, d, "empty");
  return backend_for(device).empty(std::move(shape), d, device);
}

Primitive placeholder(std::size_t rank, Kind kind) {
  static std::mutex mutex;
  static auto& made = *new std::map<std::pair<std::size_t, Kind>, Primitive>();
  std::lock_guard lock(mutex);
  Primitive& slot = made[{rank, kind}];
  // Made outside any capture's view: the placeholder is never an op of a region.
  if (slot == nullptr) {
    const Device cpu = Device::cpu();
    slot =
        hardware_backend_for(cpu).empty(Shape(std::vector<std::int64_t>(rank, 0)),
                                        creation_dtype(std::nullopt, cpu, kind, "Tensor()"), cpu);
  }
  return slot;
}

Primitive arange(std::int64_t start, std::int64_t end, std::int64_t step,
                 std::optional<DType> dtype, Device device, Kind kind) {
  (void)checked::arange_length(start, end, step, "arange");
  const DType d = creation_dtype(dtype, device, kind, "arange");
  return backend_for(device).arange(start, end, step, d, device);
}

Primitive linspace(double start, double end, std::int64_t count, std::optional<DType> dtype,
                   Device device) {
  if (count < 0) fail<InvalidArgument>("linspace", "negative count ", count);
  (void)checked::arange_length(0, count, 1, "linspace");
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
  check_dims(Shape{rows, columns}, d, "eye");
  Backend& backend = backend_for(device);
  Primitive r = backend.reshape(backend.arange(0, rows, 1, DType::I64, device), Shape{rows, 1});
  Primitive c =
      backend.reshape(backend.arange(0, columns, 1, DType::I64, device), Shape{1, columns});
  return backend.cast(backend.equal(std::move(r), std::move(c)), d);
}

Primitive random(Shape shape, Distribution distribution, std::optional<DType> dtype, Device device,
                 Kind kind) {
  distribution.check("random");
  const DType d = creation_dtype(dtype, device, kind, "random");
  check_dims(shape, d, "random");
  return backend_for(device).random(std::move(shape), distribution, d, device);
}

}  // namespace kiln::detail

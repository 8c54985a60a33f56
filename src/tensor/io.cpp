// Reading, moving between devices, dtype and kind conversion, rank checks, printing.
#include <sstream>

#include "core/dtype_dispatch.h"
#include "tensor/common.h"

namespace kiln::detail {

void check_primitive(const Primitive& p, std::size_t rank, Kind kind, const char* op) {
  if (!p) fail<InvalidArgument>(op, "null primitive");
  if (p->rank() != rank) {
    fail<ShapeMismatch>(op, "a tensor of shape ", p->shape().to_string(), " has rank ", p->rank(),
                        ", expected rank ", rank);
  }
  if (kind_of(p->dtype()) != kind) {
    fail<DTypeMismatch>(op, "a ", dtype_name(p->dtype()), " tensor is not of the ", kind_name(kind),
                        " kind");
  }
}

std::int64_t normalize_dim(std::int64_t dim, std::size_t rank, const char* op) {
  const std::int64_t r = static_cast<std::int64_t>(rank);
  if (dim < -r || dim >= r) {
    fail<InvalidArgument>(op, "dim ", dim, " is out of range for rank ", rank);
  }
  return dim < 0 ? dim + r : dim;
}

TensorData into_data(Primitive x) {
  Backend& backend = backend_of(x);
  return backend.into_data(std::move(x)).get();
}

Scalar into_scalar(const Primitive& x) {
  const std::int64_t count = x->shape().num_elements();
  if (count != 1) {
    fail<InvalidArgument>("into_scalar", "a tensor of shape ", x->shape().to_string(), " has ",
                          count, " elements; into_scalar needs exactly one");
  }
  Primitive value = x;
  check_any_kind(value, "into_scalar");
  const TensorData data = into_data(std::move(value));
  return visit_dtype(data.dtype(), "into_scalar", [&]<class T>(type_tag<T>) -> Scalar {
    const T value = data.as_span<T>()[0];
    if constexpr (std::is_arithmetic_v<T>) {
      return Scalar(value);
    } else {
      return Scalar(static_cast<double>(static_cast<float>(value)));  // half, bfloat16
    }
  });
}

std::future<TensorData> into_data_async(Primitive x) {
  Backend& backend = backend_of(x);
  return backend.into_data(std::move(x));
}

std::vector<TensorData> read_many(Prims xs) {
  if (xs.empty()) return {};
  Backend& backend = backend_of(xs.front());
  for (const Primitive& p : xs) backend_of(xs.front(), p, "read_many");
  return backend.read_many(std::move(xs)).get();
}

void assign(const Primitive& dst, Primitive src) {
  const char* op = "assign";
  if (dst->dtype() == DType::QFloat) {
    fail<UnsupportedDType>(op,
                           "a qfloat tensor is not written in place: quantize the new values "
                           "into a tensor of their own");
  }
  check_any_kind(src, op);
  if (!dst->device().same_hardware(src->device())) {
    fail<DeviceMismatch>(op, "cannot write a tensor on ", src->device().to_string(),
                         " into a tensor on ", dst->device().to_string(),
                         " in place; move it first (to_device)");
  }
  if (dst->dtype() != src->dtype()) {
    fail<DTypeMismatch>(op, "cannot write ", dtype_name(src->dtype()), " values into a ",
                        dtype_name(dst->dtype()), " tensor in place; cast them first");
  }
  if (dst->shape() != src->shape()) {
    fail<ShapeMismatch>(op, "cannot write values of shape ", src->shape().to_string(),
                        " into a tensor of shape ", dst->shape().to_string(), " in place");
  }
  // Only decorator flags may differ: the values come to dst's form of the device.
  if (src->device() != dst->device()) src = to_device(std::move(src), dst->device());
  backend_of(dst).assign(dst, std::move(src));
}

Primitive to_device(Primitive x, Device device) {
  if (x->device() == device) return x;
  if (x->device().same_hardware(device)) {
    // Only decorator flags change; each decorator's to_device wraps (as a constant) or unwraps.
    // Autodiff comes off first and goes on last, fusion in between (autodiff<fusion<hw>>).
    const Device from = x->device();
    if (from.is_autodiff() && (!device.is_autodiff() || from.is_fused() != device.is_fused())) {
      x = backend_for(from).to_device(std::move(x), from.without_autodiff());
    }
    if (x->device().is_fused() != device.is_fused()) {
      const Device plain = device.without_autodiff();
      x = backend_for(plain.fused()).to_device(std::move(x), plain);
    }
    if (x->device() != device) x = backend_for(device).to_device(std::move(x), device);
    return x;
  }
  settings_for(device);
  Backend& backend = backend_of(x);
  Primitive moved = backend.to_device(std::move(x), device);
  // A backend that copies between its own devices directly may hand back the plain tensor: the
  // decorator flags are then put on, on the new hardware.
  return moved->device() == device ? moved : to_device(std::move(moved), device);
}

Primitive cast(Primitive x, DType dtype) {
  if (x->dtype() == dtype) return x;
  if (dtype == DType::QFloat) {
    fail<UnsupportedDType>("cast", "cannot cast to qfloat: quantize(scheme) names the blocks");
  }
  check_any_kind(x, "cast");
  if (x->dtype() == dtype) return x;
  Backend& backend = backend_of(x);
  if (!backend.dtype_usage(dtype).contains(DTypeUsage::Storage)) {
    fail<UnsupportedDType>("cast", backend.name(), " cannot store ", dtype_name(dtype));
  }
  return backend.cast(std::move(x), dtype);
}

Primitive to_kind(Primitive x, Kind kind) {
  if (kind_of(x->dtype()) == kind) return x;
  // The dtype first: arguments are evaluated in an unspecified order, and clang moves x into
  // the first parameter before reading x->device() for the second.
  const DType dtype = default_dtype(x->device(), kind);
  return cast(std::move(x), dtype);
}

std::string to_string(const Primitive& x) {
  const TensorData data = into_data(x);
  std::ostringstream out;
  out << "Tensor(" << dtype_name(data.dtype()) << ", shape " << data.shape().to_string() << ", "
      << x->device().to_string() << ")\n";
  const std::vector<double> values = data.to_f64_vec();
  const Shape& shape = data.shape();
  const std::size_t limit = 64;
  // Nested brackets per dim, elements in row-major order.
  std::vector<std::int64_t> index(shape.rank(), 0);
  const std::size_t shown = std::min(values.size(), limit);
  if (shape.rank() == 0 || values.empty()) {
    out << "[]";
    return out.str();
  }
  for (std::size_t n = 0; n < shown; ++n) {
    std::size_t opened = 0;
    for (std::size_t d = shape.rank(); d-- > 0;) {
      if (index[d] != 0) break;
      ++opened;
    }
    for (std::size_t k = 0; k < opened; ++k) out << '[';
    out << values[n];
    std::size_t d = shape.rank();
    std::size_t closed = 0;
    while (d-- > 0) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
      ++closed;
    }
    for (std::size_t k = 0; k < closed; ++k) out << ']';
    if (n + 1 < shown) {
      // A new row starts under the first element of its enclosing brackets, as PyTorch prints.
      if (closed > 0)
        out << ",\n" << std::string(shape.rank() - closed, ' ');
      else
        out << ", ";
    }
  }
  if (shown < values.size()) out << " ... (" << values.size() << " elements)";
  return out.str();
}

}  // namespace kiln::detail

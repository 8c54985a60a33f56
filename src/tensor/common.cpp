#include "tensor/common.h"

#include <algorithm>

namespace kiln {

std::string_view kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::Float:
      return "float";
    case Kind::Int:
      return "int";
    case Kind::Bool:
      return "bool";
  }
  return "?";
}

namespace detail {

Kind kind_of(DType dtype) noexcept {
  if (is_float(dtype) || dtype == DType::QFloat) return Kind::Float;
  if (is_int(dtype)) return Kind::Int;
  return Kind::Bool;
}

Backend& backend_of(const Primitive& a, const Primitive& b, const char* op) {
  const Device da = a->device();
  const Device db = b->device();
  if (!da.same_hardware(db)) {
    fail<DeviceMismatch>(op, "operands are on different devices: ", da.to_string(), " and ",
                         db.to_string(), "; move one with to_device()");
  }
  return backend_for(joined(da, db));
}

void check_kind(Primitive& p, bool float_ok, bool int_ok, bool bool_ok, const char* op,
                Requantize* requantize) {
  const DType d = p->dtype();
  if (d == DType::QFloat && float_ok) [[unlikely]] {
    if (requantize != nullptr) requantize->note(p);
    dequantize_operand(p);
    return;
  }
  const bool ok = (float_ok && is_float(d)) || (int_ok && is_int(d)) || (bool_ok && is_bool(d));
  if (!ok) {
    std::string expected;
    auto add = [&](bool yes, const char* name) {
      if (!yes) return;
      if (!expected.empty()) expected += " or ";
      expected += name;
    };
    add(float_ok, "float");
    add(int_ok, "int");
    add(bool_ok, "bool");
    fail<DTypeMismatch>(op, "expected a ", expected, " tensor, got ", dtype_name(d));
  }
}

DType wider_float(DType a, DType b) noexcept {
  auto rank = [](DType d) { return d == DType::F64 ? 3 : d == DType::F32 ? 2 : 1; };
  if (a == b) return a;
  const int ra = rank(a), rb = rank(b);
  return ra == rb ? DType::F32 : (ra > rb ? a : b);
}

namespace {

DType wider_int(DType a, DType b) {
  const bool sa = is_signed_int(a), sb = is_signed_int(b);
  if (sa == sb) return dtype_size(a) >= dtype_size(b) ? a : b;
  const DType s = sa ? a : b;  // signed one
  const DType u = sa ? b : a;  // unsigned one
  if (dtype_size(s) > dtype_size(u)) return s;
  switch (dtype_size(u)) {
    case 1:
      return DType::I16;
    case 2:
      return DType::I32;
    default:
      return DType::I64;
  }
}

}  // namespace

void promote(Primitive& a, Primitive& b, const char* op) {
  const DType da = a->dtype(), db = b->dtype();
  if (da == db) return;
  const Kind ka = kind_of(da), kb = kind_of(db);
  if (ka != kb) {
    fail<DTypeMismatch>(op, "operands have dtypes ", dtype_name(da), " and ", dtype_name(db),
                        " of different kinds; convert one first");
  }
  DType target = da;
  if (ka == Kind::Float) {
    target = wider_float(da, db);
  } else if (ka == Kind::Int) {
    target = wider_int(da, db);
  }
  if (da != target) a = backend_of(a).cast(std::move(a), target);
  if (db != target) b = backend_of(b).cast(std::move(b), target);
}

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  if (a.rank() != b.rank()) {
    fail<ShapeMismatch>(op, "shapes ", a.to_string(), " and ", b.to_string(),
                        " have different ranks");
  }
  DimVector out(a.rank());
  for (std::size_t i = 0; i < a.rank(); ++i) {
    if (a[i] != b[i] && a[i] != 1 && b[i] != 1) {
      fail<ShapeMismatch>(op, "shapes ", a.to_string(), " and ", b.to_string(),
                          " cannot be broadcast (dim ", i, ": ", a[i], " vs ", b[i], ")");
    }
    out[i] = a[i] == 1 ? b[i] : a[i];
  }
  return Shape(std::move(out));
}

void check_scalar_fits(const Primitive& p, const Scalar& s, const char* op) {
  if (is_int(p->dtype()) && s.is_float() && s.to_double() != static_cast<double>(s.to_int())) {
    fail<DTypeMismatch>(op, "scalar ", s.to_double(), " is not an integer but the tensor is ",
                        dtype_name(p->dtype()), "; convert the tensor with .float_() first");
  }
}

DType default_dtype(const Device& device, Kind kind) {
  const DeviceSettings s = settings_for(device);
  switch (kind) {
    case Kind::Float:
      return s.float_dtype;
    case Kind::Int:
      return s.int_dtype;
    case Kind::Bool:
      return s.bool_dtype;
  }
  return s.float_dtype;
}

ResolvedSlice resolve_slice(const Slice& slice, std::int64_t n, const char* op) {
  if (slice.step == 0) fail<InvalidArgument>(op, "slice step cannot be 0");
  auto resolve = [&](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  const std::int64_t start = resolve(slice.start);
  const std::int64_t end = slice.end ? resolve(*slice.end) : n;
  // |step| in unsigned arithmetic: INT64_MIN has no positive int64 counterpart.
  const std::uint64_t magnitude = slice.step > 0 ? static_cast<std::uint64_t>(slice.step)
                                                 : 0 - static_cast<std::uint64_t>(slice.step);
  ResolvedSlice r;
  r.step = slice.step;
  r.length =
      end > start
          ? static_cast<std::int64_t>(static_cast<std::uint64_t>(end - start - 1) / magnitude) + 1
          : 0;
  // A negative step walks the same range backwards, from its last element.
  r.start = r.length == 0 ? 0 : (slice.step > 0 ? start : end - 1);
  return r;
}

void check_not_empty(const Primitive& x, const char* op) {
  if (x->shape().num_elements() == 0) {
    fail<InvalidArgument>(op, "cannot reduce an empty tensor of shape ", x->shape().to_string());
  }
}

void check_dim_not_empty(const Primitive& x, std::int64_t dim, const char* op) {
  if (x->shape()[static_cast<std::size_t>(dim)] == 0) {
    fail<InvalidArgument>(op, "cannot reduce dim ", dim, " of size 0 (shape ",
                          x->shape().to_string(), ")");
  }
}

}  // namespace detail
}  // namespace kiln

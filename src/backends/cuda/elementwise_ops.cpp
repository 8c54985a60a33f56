#include "backends/cuda/elementwise_ops.h"

#include <cstring>

#include "core/dtype_dispatch.h"

namespace kiln::cuda {

namespace {

// x's memory can hold the result: nobody else sees it, and it is laid out as a fresh output.
bool reusable(const Primitive& x, const Shape& shape, DType dtype) {
  return can_mut(x) && x->dtype() == dtype && x->shape() == shape && as_cuda(x).is_contiguous();
}

TensorPtr output_for(CudaBackend& backend, std::initializer_list<const Primitive*> candidates,
                     const Shape& shape, DType dtype, const char* op) {
  for (const Primitive* c : candidates) {
    if (reusable(*c, shape, dtype)) return std::static_pointer_cast<CudaTensor>(*c);
  }
  return backend.make_tensor(dtype, shape, op);
}

template <class T>
std::uint64_t to_bits(T value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

}  // namespace

void check_accepts(DType dtype, Accepts accepts, const char* op) {
  bool ok = true;
  switch (accepts) {
    case Accepts::Float:
      ok = is_float(dtype);
      break;
    case Accepts::Int:
      ok = is_int(dtype);
      break;
    case Accepts::Numeric:
      ok = is_float(dtype) || is_int(dtype);
      break;
    case Accepts::Bool:
      ok = is_bool(dtype);
      break;
    case Accepts::Any:
      ok = dtype != DType::QFloat;
      break;
  }
  if (!ok) detail::fail<UnsupportedDType>(op, "dtype ", dtype_name(dtype), " is not accepted");
}

DType raw_dtype(DType dtype) {
  switch (dtype_size(dtype)) {
    case 8:
      return DType::U64;
    case 4:
      return DType::U32;
    case 2:
      return DType::U16;
    default:
      return DType::U8;
  }
}

std::uint64_t element_bits(const Scalar& value, DType dtype) {
  return visit_dtype(dtype, "full", [&]<class T>(type_tag<T>) -> std::uint64_t {
    // As Backend::full: integers from a fractional scalar convert as a cast does.
    const T v = std::is_integral_v<T> && value.is_float()
                    ? convert_element<T>(value.to_double())
                    : convert_element<T>(value.as<compute_t<T>>());
    if constexpr (std::is_same_v<T, bool>)
      return v ? 1 : 0;
    else
      return to_bits(v);
  });
}

std::uint64_t compute_bits(const Scalar& value, DType dtype) {
  return visit_dtype(dtype, "scalar", [&]<class T>(type_tag<T>) -> std::uint64_t {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<C, bool>)
      return value.as<bool>() ? 1 : 0;
    else
      return to_bits(value.as<C>());
  });
}

Primitive map_unary(CudaBackend& backend, Primitive x, const char* op, Accepts accepts,
                    Expression expression, std::optional<DType> result) {
  const DType dtype = x->dtype();
  check_accepts(dtype, accepts, op);
  const DType out_dtype = result.value_or(dtype);
  TensorPtr out = output_for(backend, {&x}, x->shape(), out_dtype, op);
  ElementwiseOp spec{op, std::move(expression), {dtype}, out_dtype, out_dtype, {}, nullptr};
  const CudaTensor* inputs[] = {&as_cuda(x)};
  launch_elementwise(backend.runtime(), spec, *out, inputs);
  return out;
}

Primitive map_binary(CudaBackend& backend, Primitive lhs, Primitive rhs, const char* op,
                     Accepts accepts, Expression expression, std::optional<DType> result,
                     const char* failure) {
  const DType dtype = lhs->dtype();
  check_accepts(dtype, accepts, op);
  const DType out_dtype = result.value_or(dtype);
  Shape broadcast;  // only when the shapes differ: no copy of the common case's shape
  const Shape* shape = &lhs->shape();
  if (!(lhs->shape() == rhs->shape())) {
    broadcast = broadcast_shapes(lhs->shape(), rhs->shape(), op);
    shape = &broadcast;
  }
  TensorPtr out = output_for(backend, {&lhs, &rhs}, *shape, out_dtype, op);
  ElementwiseOp spec{op,     std::move(expression), {dtype, rhs->dtype()}, out_dtype, out_dtype, {},
                     failure};
  const CudaTensor* inputs[] = {&as_cuda(lhs), &as_cuda(rhs)};
  launch_elementwise(backend.runtime(), spec, *out, inputs);
  return out;
}

Primitive map_scalar(CudaBackend& backend, Primitive x, const char* op, Accepts accepts,
                     Expression expression, std::initializer_list<Scalar> scalars,
                     std::optional<DType> result, const char* failure) {
  const DType dtype = x->dtype();
  check_accepts(dtype, accepts, op);
  const DType out_dtype = result.value_or(dtype);
  TensorPtr out = output_for(backend, {&x}, x->shape(), out_dtype, op);
  DTypeList scalar_types;
  std::uint64_t bits[kMaxScalars] = {};
  for (const Scalar& s : scalars) {
    scalar_types.push_back(dtype);
    bits[scalar_types.size() - 1] = compute_bits(s, dtype);
  }
  ElementwiseOp spec{op,        std::move(expression), {dtype}, out_dtype,
                     out_dtype, scalar_types,          failure};
  const CudaTensor* inputs[] = {&as_cuda(x)};
  launch_elementwise(backend.runtime(), spec, *out, inputs,
                     std::span<const std::uint64_t>(bits, scalar_types.size()));
  return out;
}

}  // namespace kiln::cuda

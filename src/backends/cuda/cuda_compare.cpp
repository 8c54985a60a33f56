// Comparisons (Bool results), NaN/inf tests, logic on Bool, bitwise ops on integers, and the
// mask selections, as generated elementwise kernels.
#include "backends/cuda/elementwise_ops.h"

namespace kiln::cuda {

namespace {

// Expressions are literals (referenced, not copied: no allocation per op).
Primitive compare(CudaBackend& b, Primitive l, Primitive r, const char* op,
                  const char* expression) {
  return map_binary(b, std::move(l), std::move(r), op, Accepts::Any, expression, DType::Bool);
}

// Integers against a fractional scalar compare in double, so 2 >= 2.5 stays false (as the CPU).
Primitive compare_elem(CudaBackend& b, Primitive x, Scalar v, const char* op,
                       const char* expression, const char* in_double) {
  const DType dtype = x->dtype();
  check_accepts(dtype, Accepts::Any, op);
  if (is_int(dtype) && v.is_float()) {
    TensorPtr out = b.make_tensor(DType::Bool, x->shape(), op);
    ElementwiseOp spec{op, in_double, {dtype}, DType::Bool, DType::Bool, {DType::F64}, nullptr};
    const CudaTensor* inputs[] = {&as_cuda(x)};
    const std::uint64_t bits[] = {scalar_bits(v.to_double(), DType::F64)};
    launch_elementwise(b.runtime(), spec, *out, inputs, bits);
    return out;
  }
  return map_scalar(b, std::move(x), op, Accepts::Any, expression, {v}, DType::Bool);
}

}  // namespace

Primitive CudaBackend::equal(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "equal", "a == b");
}
Primitive CudaBackend::not_equal(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "not_equal", "a != b");
}
Primitive CudaBackend::greater(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "greater", "a > b");
}
Primitive CudaBackend::greater_equal(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "greater_equal", "a >= b");
}
Primitive CudaBackend::lower(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "lower", "a < b");
}
Primitive CudaBackend::lower_equal(Primitive l, Primitive r) {
  return compare(*this, std::move(l), std::move(r), "lower_equal", "a <= b");
}
Primitive CudaBackend::equal_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "equal_elem", "a == s0", "(double)a == s0");
}
Primitive CudaBackend::not_equal_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "not_equal_elem", "a != s0", "(double)a != s0");
}
Primitive CudaBackend::greater_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "greater_elem", "a > s0", "(double)a > s0");
}
Primitive CudaBackend::greater_equal_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "greater_equal_elem", "a >= s0", "(double)a >= s0");
}
Primitive CudaBackend::lower_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "lower_elem", "a < s0", "(double)a < s0");
}
Primitive CudaBackend::lower_equal_elem(Primitive x, Scalar v) {
  return compare_elem(*this, std::move(x), v, "lower_equal_elem", "a <= s0", "(double)a <= s0");
}
Primitive CudaBackend::is_nan(Primitive x) {
  return map_unary(*this, std::move(x), "is_nan", Accepts::Float, "a != a", DType::Bool);
}
Primitive CudaBackend::is_inf(Primitive x) {
  return map_unary(*this, std::move(x), "is_inf", Accepts::Float, "k_isinf(a)", DType::Bool);
}

Primitive CudaBackend::logical_not(Primitive x) {
  return map_unary(*this, std::move(x), "logical_not", Accepts::Bool, "!a");
}
Primitive CudaBackend::logical_and(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "logical_and", Accepts::Bool, "a && b");
}
Primitive CudaBackend::logical_or(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "logical_or", Accepts::Bool, "a || b");
}
Primitive CudaBackend::logical_xor(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "logical_xor", Accepts::Bool, "a != b");
}

Primitive CudaBackend::bitwise_and(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "bitwise_and", Accepts::Int, "a & b");
}
Primitive CudaBackend::bitwise_or(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "bitwise_or", Accepts::Int, "a | b");
}
Primitive CudaBackend::bitwise_xor(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "bitwise_xor", Accepts::Int, "a ^ b");
}
Primitive CudaBackend::bitwise_not(Primitive x) {
  return map_unary(*this, std::move(x), "bitwise_not", Accepts::Int, "~a");
}
Primitive CudaBackend::bitwise_left_shift(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "bitwise_left_shift", Accepts::Int,
                    "k_shl(a, b)");
}
Primitive CudaBackend::bitwise_right_shift(Primitive l, Primitive r) {
  return map_binary(*this, std::move(l), std::move(r), "bitwise_right_shift", Accepts::Int,
                    "k_shr(a, b)");
}
Primitive CudaBackend::bitwise_and_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "bitwise_and_scalar", Accepts::Int, "a & s0", {v});
}
Primitive CudaBackend::bitwise_or_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "bitwise_or_scalar", Accepts::Int, "a | s0", {v});
}
Primitive CudaBackend::bitwise_xor_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "bitwise_xor_scalar", Accepts::Int, "a ^ s0", {v});
}
Primitive CudaBackend::bitwise_left_shift_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "bitwise_left_shift_scalar", Accepts::Int, "k_shl(a, s0)",
                    {v});
}
Primitive CudaBackend::bitwise_right_shift_scalar(Primitive x, Scalar v) {
  return map_scalar(*this, std::move(x), "bitwise_right_shift_scalar", Accepts::Int, "k_shr(a, s0)",
                    {v});
}

Primitive CudaBackend::mask_where(Primitive x, Primitive mask, Primitive values) {
  const char* op = "mask_where";
  const Shape shape =
      broadcast_shapes(broadcast_shapes(x->shape(), mask->shape(), op), values->shape(), op);
  const DType raw = raw_dtype(x->dtype());
  TensorPtr out = make_tensor(x->dtype(), shape, op);
  ElementwiseOp spec{op, "b ? c : a", {raw, DType::Bool, raw}, raw, raw, {}, nullptr};
  const CudaTensor* inputs[] = {&as_cuda(x), &as_cuda(mask), &as_cuda(values)};
  launch_elementwise(runtime(), spec, *out, inputs);
  return out;
}

Primitive CudaBackend::mask_fill(Primitive x, Primitive mask, Scalar value) {
  const char* op = "mask_fill";
  const Shape shape = broadcast_shapes(x->shape(), mask->shape(), op);
  const DType raw = raw_dtype(x->dtype());
  TensorPtr out = make_tensor(x->dtype(), shape, op);
  // The CPU converts the scalar with convert_element<T>(value.as<compute_t<T>>()).
  const std::uint64_t bits[] = {element_bits(
      value.is_float() && is_int(x->dtype()) ? Scalar(value.as<std::int64_t>()) : value,
      x->dtype())};
  ElementwiseOp spec{op, "b ? s0 : a", {raw, DType::Bool}, raw, raw, {raw}, nullptr};
  const CudaTensor* inputs[] = {&as_cuda(x), &as_cuda(mask)};
  launch_elementwise(runtime(), spec, *out, inputs, bits);
  return out;
}

}  // namespace kiln::cuda

// Quantization at the tensor layer: quantize, dequantize, and the dequantization behind the rule
// that gives every other op its QFloat operands as float values (check_kind, common.h).
#include "kiln/autodiff.h"
#include "kiln/quant.h"
#include "tensor/common.h"

namespace kiln::detail {

namespace {

// x can be encoded in scheme's blocks (a QFloat x arrives dequantized and is encoded again).
void check_encodable(Primitive& x, const QuantScheme& scheme, const char* op) {
  check_float(x, op);
  (void)quantized_bytes(x->shape(), scheme, op);
  if (!can_quantize(scheme)) {
    fail<UnsupportedOperation>(op, "kiln decodes ", quant_kind_name(scheme.kind),
                               " but does not encode it");
  }
}

}  // namespace

Primitive quantize(Primitive x, QuantScheme scheme) {
  check_encodable(x, scheme, "quantize");
  return backend_of(x).quantize(std::move(x), scheme);
}

Primitive dequantize(Primitive x, DType dtype) {
  const char* op = "dequantize";
  if (x->dtype() != DType::QFloat) {
    fail<DTypeMismatch>(op, "the tensor is ", dtype_name(x->dtype()), ", not qfloat");
  }
  if (!is_float(dtype)) {
    fail<DTypeMismatch>(op, "dequantizes to a float dtype, not ", dtype_name(dtype));
  }
  return backend_of(x).dequantize(std::move(x), dtype);
}

Primitive fake_quantize(Primitive x, QuantScheme scheme) {
  check_encodable(x, scheme, "fake_quantize");
  const DType dtype = x->dtype();
  const Device device = x->device();
  // A device that holds no blocks (cuda) has them made on the CPU.
  const bool holds_blocks = device.dtype_usage(DType::QFloat).contains(DTypeUsage::Storage);
  Primitive constant = detach(x);
  if (!holds_blocks) constant = to_device(std::move(constant), Device::cpu());
  Primitive values = dequantize(quantize(std::move(constant), scheme), dtype);
  if (!holds_blocks) values = to_device(std::move(values), device);
  if (!is_require_grad(x)) return values;
  // The straight-through estimator: the blocks' values forward, the identity's gradient back.
  // x - detach(x) is exactly zero (quantize refused non-finite values), so the sum is exactly
  // the decoded values.
  return add(sub(x, detach(x)), std::move(values));
}

void Requantize::note(const Primitive& operand) {
  const QuantScheme* scheme = operand->quant_scheme();
  if (noted_ || scheme == nullptr ||
      operand->device().quant_propagation() != QuantPropagation::Requantize) {
    return;
  }
  kind_ = scheme->kind;
  block_size_ = scheme->block_size;
  noted_ = true;
}

void Requantize::encode(Primitive& result) const {
  const QuantScheme scheme_{kind_, block_size_};
  const Shape& shape = result->shape();
  if (!is_float(result->dtype()) || shape.rank() == 0 || is_require_grad(result) ||
      !can_quantize(scheme_)) {
    return;
  }
  const std::int64_t last = shape[shape.rank() - 1];
  if (scheme_.kind == QuantScheme::Kind::Int8Channel ? last > 0 : last % scheme_.block_size == 0) {
    result = quantize(std::move(result), scheme_);
  }
}

void dequantize_operand(Primitive& x) { x = dequantize(std::move(x), DType::F32); }

}  // namespace kiln::detail

// Quantization at the tensor layer: quantize, dequantize, and the dequantization behind the rule
// that gives every other op its QFloat operands as float values (check_kind, common.h).
#include "kiln/quant.h"
#include "tensor/common.h"

namespace kiln::detail {

Primitive quantize(Primitive x, QuantScheme scheme) {
  const char* op = "quantize";
  check_float(x, op);  // a QFloat x arrives dequantized and is encoded again
  (void)quantized_bytes(x->shape(), scheme, op);
  if (!can_quantize(scheme)) {
    fail<UnsupportedOperation>(op, "kiln decodes ", quant_kind_name(scheme.kind),
                               " but does not encode it");
  }
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

void dequantize_operand(Primitive& x) { x = dequantize(std::move(x), DType::F32); }

}  // namespace kiln::detail

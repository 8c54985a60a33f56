// Defaults of the quantized ops: through the host, where TensorData encodes and decodes the blocks
// (src/quant/); a backend with kernels of its own overrides them (the CPU's cpu_quant.cpp).
#include "contract/backend.h"

namespace kiln {

Primitive Backend::quantize(Primitive x, QuantScheme scheme) {
  const Device device = x->device();
  const TensorData values = into_data(std::move(x)).get();
  return from_data(values.quantize(scheme), device);
}

Primitive Backend::dequantize(Primitive x, DType dtype) {
  const Device device = x->device();
  TensorData values = into_data(std::move(x)).get();
  // A backend may read a view whose blocks no longer run along its last dim back decoded.
  if (values.dtype() == DType::QFloat) values = values.dequantize();
  if (values.dtype() != dtype) values = values.convert(dtype);
  return from_data(std::move(values), device);
}

}  // namespace kiln

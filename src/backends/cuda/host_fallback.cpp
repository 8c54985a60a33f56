// The REQUIRED ops of kHostFallbackOps (host_fallback.h), each a one-line call of on_host: the
// tensor arguments go to the CPU backend, its op runs, the results come back to this GPU.
#include "backends/cuda/host_fallback.h"

#include "backend/registry.h"
#include "backends/cuda/cuda_backend.h"

namespace kiln::cuda {

namespace {

Primitive to_host(CudaBackend& b, const Primitive& x) {
  return backend_for(Device::cpu()).from_data(b.into_data(x).get(), Device::cpu());
}
OptionalPrimitive to_host(CudaBackend& b, const OptionalPrimitive& x) {
  return x ? OptionalPrimitive(to_host(b, *x)) : std::nullopt;
}
template <class T>
T to_host(CudaBackend&, T value) {
  return value;
}

Primitive to_gpu(CudaBackend& b, const Primitive& x) {
  return b.from_data(backend_for(Device::cpu()).into_data(x).get(), b.device());
}

template <class Result, class... Params, class... Args>
Result on_host(CudaBackend& self, Result (Backend::*method)(Params...), Args&&... args) {
  Backend& cpu = backend_for(Device::cpu());
  return to_gpu(self, (cpu.*method)(to_host(self, std::forward<Args>(args))...));
}

}  // namespace

Primitive CudaBackend::conv(Primitive x, Primitive w, OptionalPrimitive b, ConvOptions o) {
  return on_host(*this, &Backend::conv, x, w, b, o);
}
Primitive CudaBackend::conv_transpose(Primitive x, Primitive w, OptionalPrimitive b, ConvTransposeOptions o) {
  return on_host(*this, &Backend::conv_transpose, x, w, b, o);
}

}  // namespace kiln::cuda

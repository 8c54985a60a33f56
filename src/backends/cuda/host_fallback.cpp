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
[[maybe_unused]] OptionalPrimitive to_host(CudaBackend& b, const OptionalPrimitive& x) {
  return x ? OptionalPrimitive(to_host(b, *x)) : std::nullopt;
}
template <class T>
T to_host(CudaBackend&, T value) {
  return value;
}

Primitive to_gpu(CudaBackend& b, const Primitive& x) {
  return b.from_data(backend_for(Device::cpu()).into_data(x).get(), b.device());
}
PrimitivePair to_gpu(CudaBackend& b, const PrimitivePair& x) {
  return {to_gpu(b, x.first), to_gpu(b, x.second)};
}

template <class Result, class... Params, class... Args>
Result on_host(CudaBackend& self, Result (Backend::*method)(Params...), Args&&... args) {
  Backend& cpu = backend_for(Device::cpu());
  return to_gpu(self, (cpu.*method)(to_host(self, std::forward<Args>(args))...));
}

}  // namespace

Primitive CudaBackend::scatter(std::int64_t d, Primitive x, Primitive i, Primitive v, IndexingUpdate u) {
  return on_host(*this, &Backend::scatter, d, x, i, v, u);
}
Primitive CudaBackend::avg_pool(Primitive x, PoolOptions o) { return on_host(*this, &Backend::avg_pool, x, o); }
Primitive CudaBackend::avg_pool_backward(Primitive x, Primitive g, PoolOptions o) {
  return on_host(*this, &Backend::avg_pool_backward, x, g, o);
}
Primitive CudaBackend::adaptive_avg_pool(Primitive x, Axes s) { return on_host(*this, &Backend::adaptive_avg_pool, x, s); }
Primitive CudaBackend::adaptive_avg_pool_backward(Primitive x, Primitive g) {
  return on_host(*this, &Backend::adaptive_avg_pool_backward, x, g);
}
PrimitivePair CudaBackend::max_pool_with_indices(Primitive x, PoolOptions o, DType i) {
  return on_host(*this, &Backend::max_pool_with_indices, x, o, i);
}
Primitive CudaBackend::max_pool_with_indices_backward(Primitive x, Primitive g, Primitive i, PoolOptions o) {
  return on_host(*this, &Backend::max_pool_with_indices_backward, x, g, i, o);
}
Primitive CudaBackend::interpolate(Primitive x, Axes s, InterpolateOptions o) {
  return on_host(*this, &Backend::interpolate, x, s, o);
}
Primitive CudaBackend::interpolate_backward(Primitive x, Primitive g, Axes s, InterpolateOptions o) {
  return on_host(*this, &Backend::interpolate_backward, x, g, s, o);
}

}  // namespace kiln::cuda

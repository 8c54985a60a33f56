// Creation, reads, device moves and casts.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/random.h"
#include "core/buffer.h"
#include "core/checked.h"
#include "core/dtype_dispatch.h"
#include "runtime/registry.h"

namespace kiln {

using namespace cpu;

namespace {

void check_storage_dtype(const CpuBackend& backend, DType dtype, const char* op) {
  if (!backend.dtype_usage(dtype).contains(DTypeUsage::Storage)) {
    detail::fail<UnsupportedDType>(op, "the cpu backend cannot store ", dtype_name(dtype));
  }
}

template <class T>
void fill(T* out, std::int64_t n, T value) {
  parallel_for(n, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[i] = value;
  });
}

}  // namespace

Primitive CpuBackend::from_data(TensorData data, Device) {
  check_storage_dtype(*this, data.dtype(), "from_data");
  auto out = make_tensor(data.dtype(), data.shape());
  const auto bytes = data.bytes();
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return out;
}

Primitive CpuBackend::empty(Shape shape, DType dtype, Device) {
  check_storage_dtype(*this, dtype, "empty");
  return make_tensor(dtype, shape);
}

Primitive CpuBackend::full(Shape shape, Scalar value, DType dtype, Device) {
  check_storage_dtype(*this, dtype, "full");
  auto out = make_tensor(dtype, shape);
  visit_dtype(dtype, "full", [&]<class T>(type_tag<T>) {
    fill(out->data_as<T>(), shape.num_elements(), convert_element<T>(value.as<compute_t<T>>()));
  });
  return out;
}

Primitive CpuBackend::arange(std::int64_t start, std::int64_t end, std::int64_t step, DType dtype,
                             Device) {
  const std::int64_t count = checked::arange_length(start, end, step, "arange");
  auto out = make_tensor(dtype, Shape{count});
  visit_dtype(dtype, "arange", [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    for (std::int64_t i = 0; i < count; ++i) {
      o[i] = convert_element<T>(checked::arange_value(start, step, i));
    }
  });
  return out;
}

Primitive CpuBackend::random(Shape shape, Distribution distribution, DType dtype, Device) {
  check_storage_dtype(*this, dtype, "random");
  auto out = make_tensor(dtype, shape);
  const std::int64_t n = shape.num_elements();
  const std::uint64_t seed = random_seed();
  const std::uint64_t first = take_random_counter(static_cast<std::uint64_t>(n));
  visit_dtype(dtype, "random", [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    parallel_for(n, 4096, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const std::uint64_t c = first + static_cast<std::uint64_t>(i);
        double v = 0;
        switch (distribution.kind) {
          case Distribution::Kind::Default:
            v = uniform01(seed, c);
            break;
          case Distribution::Kind::Uniform:
            v = distribution.a + (distribution.b - distribution.a) * uniform01(seed, c);
            if constexpr (std::is_integral_v<T>) v = std::floor(v);
            break;
          case Distribution::Kind::Normal:
            v = distribution.a + distribution.b * standard_normal(seed, c);
            break;
          case Distribution::Kind::Bernoulli:
            v = uniform01(seed, c) < distribution.a ? 1 : 0;
            break;
        }
        o[i] = convert_element<T>(v);
      }
    });
  });
  return out;
}

ReadFuture CpuBackend::into_data(Primitive x) {
  auto c = contiguous(x);
  const std::size_t bytes =
      static_cast<std::size_t>(c->shape().num_elements()) * dtype_size(c->dtype());
  std::vector<std::byte> host = detail::allocate_bytes(bytes);
  if (bytes != 0) std::memcpy(host.data(), c->data(), bytes);
  std::promise<TensorData> promise;
  promise.set_value(TensorData(std::move(host), c->shape(), c->dtype()));
  return promise.get_future();
}

Primitive CpuBackend::to_device(Primitive x, Device device) {
  if (device.kind() == DeviceKind::Cpu) return x;
  return Backend::to_device(std::move(x), device);
}

Primitive CpuBackend::cast(Primitive x, DType dtype) {
  if (x->dtype() == dtype) return x;
  check_storage_dtype(*this, dtype, "cast");
  return convert(std::move(x), dtype);
}

namespace cpu {

Primitive convert(Primitive x, DType dtype) {
  if (x->dtype() == dtype) return x;
  // f16 and bf16 reach f32 kernels through the driver's tiles: every conversion from or to them
  // goes through float, as convert_element does.
  return visit_kernel(x->dtype(), "cast", [&]<class From>(type_tag<From>) -> Primitive {
    return visit_kernel(dtype, "cast", [&]<class To>(type_tag<To>) -> Primitive {
      constexpr auto f = [](From v) { return convert_element<To>(v); };
      return run_unary(std::move(x), dtype, make_unary_kernel<To, From>(f), "cast");
    });
  });
}

}  // namespace cpu

}  // namespace kiln

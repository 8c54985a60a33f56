// Creation, reads, device moves and casts.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/random.h"
#include "backends/cpu/vector_math.h"
#include "core/buffer.h"
#include "core/checked.h"
#include "core/dtype_dispatch.h"
#include "runtime/registry.h"

namespace kiln {

using namespace cpu;

namespace {

void check_storage_dtype(const CpuBackend& backend, DType dtype, const char* op) {
  if (dtype == DType::QFloat) {
    detail::fail<UnsupportedDType>(op,
                                   "a qfloat tensor is made by quantize(scheme) or from "
                                   "quantized TensorData");
  }
  if (!backend.dtype_usage(dtype).contains(DTypeUsage::Storage)) {
    detail::fail<UnsupportedDType>(op, "the cpu backend cannot store ", dtype_name(dtype));
  }
}

// The bytes of t's elements laid out densely.
std::size_t dense_bytes(const CpuTensor& t) {
  return static_cast<std::size_t>(t.shape().num_elements()) * dtype_size(t.dtype());
}

template <class T>
void fill(T* out, std::int64_t n, T value) {
  parallel_for(n, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[i] = value;
  });
}

}  // namespace

Primitive CpuBackend::from_data(TensorData data, Device) {
  if (data.dtype() == DType::QFloat) return quantized_from_data(data);
  check_storage_dtype(*this, data.dtype(), "from_data");
  auto out = make_tensor(data.dtype(), data.shape());
  const auto bytes = data.bytes();
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return out;
}

std::span<std::byte> CpuBackend::host_bytes(const Primitive& fresh) {
  const auto* tensor = dynamic_cast<const CpuTensor*>(fresh.get());
  if (tensor == nullptr || !tensor->is_contiguous() || tensor->dtype() == DType::QFloat) return {};
  return {tensor->data(), dense_bytes(*tensor)};
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
  const std::optional<RandomStream> pinned = take_pinned_random();
  check_storage_dtype(*this, dtype, "random");
  auto out = make_tensor(dtype, shape);
  const std::int64_t n = shape.num_elements();
  const RandomStream at = pinned ? *pinned : *reserve_random(static_cast<std::uint64_t>(n));
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  parallel_for(n, 4096, [&](std::int64_t b, std::int64_t e) {
    draw_random(out->data() + b * size, dtype, distribution, at, b, e - b);
  });
  return out;
}

ReadFuture CpuBackend::into_data(Primitive x) {
  if (x->dtype() == DType::QFloat) {
    std::promise<TensorData> promise;
    promise.set_value(quantized_into_data(*this, x));
    return promise.get_future();
  }
  auto c = contiguous(x);
  const std::size_t bytes = dense_bytes(*c);
  // Copied in as the buffer is made: no zeroing pass first.
  std::vector<std::byte> host = detail::allocate_bytes(bytes, {c->data(), bytes});
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

void draw_random(std::byte* out, DType dtype, const Distribution& distribution, RandomStream at,
                 std::int64_t begin, std::int64_t count) {
  const std::uint64_t seed = at.seed;
  const std::uint64_t first = at.first + static_cast<std::uint64_t>(begin);
  visit_dtype(dtype, "random", [&]<class T>(type_tag<T>) {
    T* o = reinterpret_cast<T*>(out);
    // One loop per kind, each value through the same formula whatever part of the draw asks.
    const auto draw = [&](auto value_at) {
      for (std::int64_t i = 0; i < count; ++i) {
        o[i] = convert_element<T>(value_at(first + static_cast<std::uint64_t>(i)));
      }
    };
    const double a = distribution.a, b = distribution.b;
    switch (distribution.kind) {
      case Distribution::Kind::Default:
        draw([&](std::uint64_t c) { return uniform01(seed, c); });
        break;
      case Distribution::Kind::Uniform:
        draw([&](std::uint64_t c) {
          const double v = a + (b - a) * uniform01(seed, c);
          if constexpr (std::is_integral_v<T>) return std::floor(v);
          return v;
        });
        break;
      case Distribution::Kind::Normal: {
        // Box-Muller over a chunk at a time, its logarithms and cosines through the vector
        // functions (the scalar ones made a BERT-base's initialisation take seconds). Every
        // value, a chunk's tail included, goes through the same function, so a value does not
        // depend on where a piece or thread starts.
        constexpr std::int64_t kChunk = 256;
        double radius[kChunk], angle[kChunk];
        for (std::int64_t at = 0; at < count; at += kChunk) {
          const std::int64_t m = std::min(kChunk, count - at);
          for (std::int64_t i = 0; i < m; ++i) {
            const std::uint64_t c = first + static_cast<std::uint64_t>(at + i);
            radius[i] = 1.0 - uniform01(seed, 2 * c);  // (0, 1]
            angle[i] = 6.283185307179586 * uniform01(seed, 2 * c + 1);
          }
          if (!vector_map(VectorFunction::Log, radius, radius, m))
            for (std::int64_t i = 0; i < m; ++i) radius[i] = std::log(radius[i]);
          if (!vector_map(VectorFunction::Cos, angle, angle, m))
            for (std::int64_t i = 0; i < m; ++i) angle[i] = std::cos(angle[i]);
          for (std::int64_t i = 0; i < m; ++i)
            o[at + i] = convert_element<T>(a + b * (std::sqrt(-2.0 * radius[i]) * angle[i]));
        }
        break;
      }
      case Distribution::Kind::Bernoulli:
        draw([&](std::uint64_t c) { return uniform01(seed, c) < a ? 1.0 : 0.0; });
        break;
    }
  });
}

namespace {

// f16 and bf16 reach f32 kernels through the driver's tiles: every conversion from or to them
// goes through float, as convert_element does.
void make_cast(DType from, DType to, OwnedKernel& k) {
  visit_kernel(from, "cast", [&]<class From>(type_tag<From>) {
    visit_kernel(to, "cast", [&]<class To>(type_tag<To>) {
      k.unary<To, From>([](From v) { return convert_element<To>(v); });
    });
  });
}

}  // namespace

Primitive convert(Primitive x, DType dtype) {
  if (x->dtype() == dtype) return x;
  OwnedKernel k;
  make_cast(x->dtype(), dtype, k);
  return run_unary(std::move(x), dtype, k.kernel(), "cast");
}

bool cast_step_kernel(OpCode op, DType dtype, const StepParams& params, bool, OwnedKernel& k) {
  if (op != OpCode::cast) return false;
  make_cast(dtype, params.dtype, k);
  return true;
}

}  // namespace cpu

}  // namespace kiln

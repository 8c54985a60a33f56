// Defaults of creation and movement: constants and ranges are built on the host and uploaded
// with from_data; moving between devices is a read followed by an upload on the target.
#include <cstring>

#include "contract/backend.h"
#include "core/dtype_dispatch.h"
#include "runtime/registry.h"

namespace kiln {

Primitive Backend::full(Shape shape, Scalar value, DType dtype, Device device) {
  // Built element by element so 64-bit integers keep every bit (a double would round them).
  // A fractional scalar converts to an integer dtype as a cast does (truncates, saturates,
  // NaN -> 0).
  const std::size_t n = static_cast<std::size_t>(shape.num_elements());
  std::vector<std::byte> bytes(n * dtype_size(dtype));
  visit_dtype(dtype, "full", [&]<class T>(type_tag<T>) {
    const T v = std::is_integral_v<T> && value.is_float()
                    ? convert_element<T>(value.to_double())
                    : convert_element<T>(value.as<compute_t<T>>());
    for (std::size_t i = 0; i < n; ++i) std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  });
  return from_data(TensorData(std::move(bytes), std::move(shape), dtype), device);
}

Primitive Backend::zeros(Shape shape, DType dtype, Device device) {
  return full(std::move(shape), 0, dtype, device);
}

Primitive Backend::ones(Shape shape, DType dtype, Device device) {
  return full(std::move(shape), 1, dtype, device);
}

Primitive Backend::arange(std::int64_t start, std::int64_t end, std::int64_t step, DType dtype,
                          Device device) {
  // Counted in unsigned arithmetic so ranges spanning most of int64 do not overflow.
  std::uint64_t count = 0;
  if (step > 0 && end > start) {
    const std::uint64_t span = static_cast<std::uint64_t>(end) - static_cast<std::uint64_t>(start);
    count = (span - 1) / static_cast<std::uint64_t>(step) + 1;
  } else if (step < 0 && start > end) {
    const std::uint64_t span = static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(end);
    count = (span - 1) / (0 - static_cast<std::uint64_t>(step)) + 1;
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * dtype_size(dtype));
  visit_dtype(dtype, "arange", [&]<class T>(type_tag<T>) {
    T* out = reinterpret_cast<T*>(bytes.data());
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto value = static_cast<std::int64_t>(static_cast<std::uint64_t>(start) +
                                                   i * static_cast<std::uint64_t>(step));
      out[i] = convert_element<T>(value);
    }
  });
  return from_data(TensorData(std::move(bytes), Shape{static_cast<std::int64_t>(count)}, dtype),
                   device);
}

Primitive Backend::to_device(Primitive x, Device device) {
  if (x->device() == device) return x;
  TensorData data = into_data(std::move(x)).get();
  return backend_for(device).from_data(std::move(data), device);
}

}  // namespace kiln

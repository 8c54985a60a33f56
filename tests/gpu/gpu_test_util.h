// Helpers for the raw-pointer GPU tests: device detection (tests skip without one), RAII device
// buffers with cudaMalloc, copies, and host conversions for the 16-bit floats.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/check.h"
#include "kiln/dtype.h"
#include "kiln/half.h"

namespace kiln::gpu_test {

// Empty when a device is usable; otherwise why not.
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return cudaGetErrorString(status);
  }
  if (count == 0) return "no CUDA device present";
  return {};
}

#define KILN_REQUIRE_GPU()                                                       \
  do {                                                                           \
    const std::string kiln_reason = ::kiln::gpu_test::no_device_reason();        \
    if (!kiln_reason.empty()) GTEST_SKIP() << "no CUDA device: " << kiln_reason; \
  } while (0)

// A device allocation of `bytes`, poisoned with 0xff so unwritten outputs show up.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    KILN_CUDA_CHECK("test", cudaMalloc(&data_, bytes_));
    KILN_CUDA_CHECK("test", cudaMemset(data_, 0xff, bytes_));
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_ != 0) {
      KILN_CUDA_CHECK("test", cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  template <class T>
  std::vector<T> read(std::size_t count) const {
    std::vector<T> host(count);
    if (count != 0) {
      KILN_CUDA_CHECK("test", cudaDeviceSynchronize());
      KILN_CUDA_CHECK("test",
                      cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// T is the host type of a float dtype (half and bfloat16 included).
template <class T>
inline constexpr bool kHostFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// A host value as double (the 16-bit floats through float).
template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Runs f(dtype, T{}) for every float dtype with its host type T.
template <class F>
void for_each_float_dtype(F&& f) {
  f(DType::F64, double{});
  f(DType::F32, float{});
  f(DType::F16, half{});
  f(DType::BF16, bfloat16{});
}

// Runs f(dtype, T{}) for every numeric dtype (floats, then integers) with its host type T.
template <class F>
void for_each_numeric_dtype(F&& f) {
  for_each_float_dtype(f);
  f(DType::I64, std::int64_t{});
  f(DType::I32, std::int32_t{});
  f(DType::I16, std::int16_t{});
  f(DType::I8, std::int8_t{});
  f(DType::U64, std::uint64_t{});
  f(DType::U32, std::uint32_t{});
  f(DType::U16, std::uint16_t{});
  f(DType::U8, std::uint8_t{});
}

}  // namespace kiln::gpu_test

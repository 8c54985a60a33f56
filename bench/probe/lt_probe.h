// What the cuBLASLt probes share (lt_algos.cu, lt_epilogues.cu): a check that exits on the first
// failing CUDA or cuBLASLt call, and random matrices filled on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    const auto status_ = (call);                                                            \
    if (static_cast<int>(status_) != 0) {                                                   \
      std::fprintf(stderr, "%s failed (%d) at line %d\n", #call, static_cast<int>(status_), \
                   __LINE__);                                                               \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

// Uniform in [-1, 1) from 24 bits of a hash, as torch.rand * 2 - 1 draws it.
template <class T>
__global__ void fill(T* out, std::uint64_t count, std::uint64_t seed) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out[i] = static_cast<T>(static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

template <class T>
T* random_matrix(std::uint64_t count, std::uint64_t seed) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  fill<T><<<1024, 256>>>(p, count, seed);
  CHECK(cudaGetLastError());
  return p;
}

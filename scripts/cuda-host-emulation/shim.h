// Just enough of CUDA for generated kernels to compile as host C++. Called directly, a kernel
// runs as one thread (blockDim = gridDim = 1, so grid-stride loops walk every item; atomics are
// plain read-modify-writes). Through emu_launch, each block's threads run as real threads, one
// block after another, so __syncthreads, __shared__ (static: one block at a time) and warp
// shuffles (a per-warp exchange between two barriers) behave as on a GPU.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct emu_dim3 {
  unsigned x;
};
static thread_local emu_dim3 blockIdx{0}, threadIdx{0};
static emu_dim3 blockDim{1}, gridDim{1};
struct EmuWarp {
  std::barrier<> barrier{32};
  unsigned long long slot[32];
};
static std::barrier<>* emu_block_barrier = nullptr;
static std::vector<std::unique_ptr<EmuWarp>> emu_warps;
inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
template <class T>
T emu_shuffle(T v, int source) {
  EmuWarp& w = *emu_warps[threadIdx.x / 32];
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  w.slot[threadIdx.x % 32] = bits;
  w.barrier.arrive_and_wait();
  bits = w.slot[source];
  w.barrier.arrive_and_wait();
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
T __shfl_down_sync(unsigned, T v, int delta) {
  const int lane = threadIdx.x % 32;
  return emu_shuffle(v, lane + delta < 32 ? lane + delta : lane);
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu_shuffle(v, (threadIdx.x % 32) ^ mask);
}
// Runs kernel on grid blocks of block threads (block a multiple of 32).
template <class P>
void emu_launch(void (*kernel)(P), unsigned grid, unsigned block, const P& p) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    std::barrier<> barrier(block);
    emu_block_barrier = &barrier;
    emu_warps.clear();
    for (unsigned w = 0; w < block / 32; ++w) emu_warps.push_back(std::make_unique<EmuWarp>());
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
      threads.emplace_back([=, &p] {
        blockIdx.x = b;
        threadIdx.x = t;
        kernel(p);
      });
    }
    for (auto& thread : threads) thread.join();
  }
  gridDim.x = 1;
  blockDim.x = 1;
}
using std::floor;
using std::fmax;
using std::fmin;
using std::max;
using std::min;
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline float __uint_as_float(unsigned v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline unsigned __float_as_uint(float v) {
  unsigned f;
  std::memcpy(&f, &v, 4);
  return f;
}
// The prelude's k_erfinv names CUDA's erfinv; no emulated kernel calls it, so Newton's method
// on std::erf is enough.
inline double erfinv(double y) {
  if (!(y > -1 && y < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
  double x = 0;
  for (int i = 0; i < 100; ++i) x -= (std::erf(x) - y) * 0.886226925452758 * std::exp(x * x);
  return x;
}
inline float erfinvf(float y) { return static_cast<float>(erfinv(y)); }
inline double __longlong_as_double(long long v) {
  double f;
  std::memcpy(&f, &v, 8);
  return f;
}
template <class T>
T atomicAdd(T* a, T v) {
  T o = *a;
  *a = o + v;
  return o;
}
template <class T>
T atomicMin(T* a, T v) {
  T o = *a;
  *a = v < o ? v : o;
  return o;
}
template <class T>
T atomicMax(T* a, T v) {
  T o = *a;
  *a = v > o ? v : o;
  return o;
}
template <class T>
T atomicCAS(T* a, T cmp, T v) {
  T o = *a;
  if (o == cmp) *a = v;
  return o;
}

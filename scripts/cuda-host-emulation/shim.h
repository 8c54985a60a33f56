// Just enough of CUDA for generated kernels to compile as host C++ (one thread: blockDim = gridDim
// = 1, so grid-stride loops walk every item; atomics are plain read-modify-writes).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
struct emu_dim3 {
  unsigned x;
};
static emu_dim3 blockIdx{0}, blockDim{1}, threadIdx{0}, gridDim{1};
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

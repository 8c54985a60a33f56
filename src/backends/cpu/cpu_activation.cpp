// Activations: elementwise ones as typed maps, softmax and log_softmax one row at a time
// (max, exponentials and their sum, normalisation, all while the row is in cache), rows spread
// over threads. Every formula is stable over the whole float range.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/stream_store.h"
#include "backends/cpu/vector_math.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

template <class C>
C stable_sigmoid(C v) {
  if (v >= C(0)) return C(1) / (C(1) + std::exp(-v));
  const C e = std::exp(v);  // v < 0, or NaN, which stays NaN
  return e / (C(1) + e);
}

// The kernel of a float function f of one value.
template <class F>
void make_float_map(DType dtype, const char* op, F f, OwnedKernel& k) {
  visit_float_kernel(dtype, op, [&]<class T>(type_tag<T>) { k.unary<T, T>(f); });
}

// gelu, sigmoid and silu on contiguous f32/f64 runs through libmvec: a chunk's argument to erfc or
// exp, the vector function over it, then the rest, in loops the compiler vectorises; the same
// formulas and special values as the scalar forms, with libmvec's accuracy (within 4 ulp).
enum class VectorActivation : std::uint8_t { Gelu, Sigmoid, Silu };

template <class T, VectorActivation kind>
void vector_activation_loop(std::int64_t n, char* const* data, const std::int64_t*, const void*) {
  constexpr std::int64_t kChunk = 256;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const T* in = reinterpret_cast<const T*>(data[1]);
  T* out = reinterpret_cast<T*>(data[0]);  // may be in: each element is read before it is written
  T t[kChunk];
  for (std::int64_t at = 0; at < n; at += kChunk) {
    const std::int64_t m = std::min(kChunk, n - at);
    const T* x = in + at;
    T* y = out + at;
    if constexpr (kind == VectorActivation::Gelu) {
      for (std::int64_t i = 0; i < m; ++i) t[i] = -x[i] * static_cast<T>(std::numbers::sqrt2 / 2);
      vector_map(VectorFunction::Erfc, t, t, m);
      for (std::int64_t i = 0; i < m; ++i) y[i] = x[i] == -kInf ? T(0) : x[i] * T(0.5) * t[i];
    } else {
      // stable_sigmoid: e = exp(-|v|), then 1 / (1 + e) or e / (1 + e) by the sign.
      for (std::int64_t i = 0; i < m; ++i) t[i] = -std::fabs(x[i]);
      vector_map(VectorFunction::Exp, t, t, m);
      for (std::int64_t i = 0; i < m; ++i) {
        const T e = t[i];
        const T s = (x[i] >= T(0) ? T(1) : e) / (T(1) + e);
        if constexpr (kind == VectorActivation::Sigmoid) {
          y[i] = s;
        } else {
          y[i] = x[i] == -kInf ? T(0) : x[i] * s;
        }
      }
    }
  }
}

// The vector loop of kind where libmvec has one and the runs are contiguous f32/f64; else
// scalar f element by element.
template <VectorActivation kind, class F>
void make_activation(DType dtype, const char* op, bool contiguous, F f, OwnedKernel& k) {
  if (vector_math_available() && contiguous && (dtype == DType::F32 || dtype == DType::F64)) {
    // Costs like a transcendental: threads pay off on runs four times shorter.
    if (dtype == DType::F32) {
      k.set(&vector_activation_loop<float, kind>, kind, dtype, dtype, 4);
    } else {
      k.set(&vector_activation_loop<double, kind>, kind, dtype, dtype, 4);
    }
    return;
  }
  make_float_map(dtype, op, f, k);
}

// The elementwise activations, each a maker of its kernel (the ones with a parameter read it from
// params' first scalar). Both their CpuBackend methods and their fused steps' kernels use these.
void make_relu(DType dtype, const StepParams&, bool, OwnedKernel& k) {
  make_float_map(
      dtype, "relu", [](auto v) { return v <= decltype(v)(0) ? decltype(v)(0) : v; }, k);
}
void make_leaky_relu(DType dtype, const StepParams& params, bool, OwnedKernel& k) {
  const double slope = params.scalars[0].to_double();
  make_float_map(
      dtype, "leaky_relu",
      [slope](auto v) {
        using C = decltype(v);
        return v < C(0) ? v * static_cast<C>(slope) : v;
      },
      k);
}
void make_gelu(DType dtype, const StepParams&, bool contiguous, OwnedKernel& k) {
  // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation in the left tail.
  make_activation<VectorActivation::Gelu>(
      dtype, "gelu", contiguous,
      [](auto v) {
        using C = decltype(v);
        if (v == -std::numeric_limits<C>::infinity()) return C(0);
        return v * C(0.5) * std::erfc(-v * static_cast<C>(std::numbers::sqrt2 / 2));
      },
      k);
}
void make_sigmoid(DType dtype, const StepParams&, bool contiguous, OwnedKernel& k) {
  make_activation<VectorActivation::Sigmoid>(
      dtype, "sigmoid", contiguous, [](auto v) { return stable_sigmoid(v); }, k);
}
void make_silu(DType dtype, const StepParams&, bool contiguous, OwnedKernel& k) {
  make_activation<VectorActivation::Silu>(
      dtype, "silu", contiguous,
      [](auto v) {
        using C = decltype(v);
        if (v == -std::numeric_limits<C>::infinity()) return C(0);
        return v * stable_sigmoid(v);
      },
      k);
}
void make_log_sigmoid(DType dtype, const StepParams&, bool, OwnedKernel& k) {
  make_float_map(
      dtype, "log_sigmoid",
      [](auto v) {
        using C = decltype(v);
        return (v < C(0) ? v : C(0)) - std::log1p(std::exp(-std::fabs(v)));
      },
      k);
}
// grad where output > 0, else 0 (a NaN output passes its grad, as relu passes NaN): the default's
// compare and mask_fill in one pass, with no bool tensor between them.
void make_relu_backward(DType dtype, const StepParams&, bool, OwnedKernel& k) {
  visit_float_kernel(dtype, "relu_backward", [&]<class T>(type_tag<T>) {
    k.binary<T, T>([](T out, T g) { return out <= T(0) ? T(0) : g; });
  });
}

Primitive run_activation(Primitive x, const char* op,
                         void (*make)(DType, const StepParams&, bool, OwnedKernel&),
                         const StepParams& params = {}) {
  const DType dtype = x->dtype();
  OwnedKernel k;
  make(dtype, params, as_cpu(x).is_contiguous(), k);  // the vector forms take contiguous runs
  return run_unary(std::move(x), dtype, k.kernel(), op);
}

StepParams with_scalar(Scalar value) {
  StepParams params;
  params.scalars[0] = value;
  return params;
}

}  // namespace

// clang-format off
#define KILN_CPU_ACTIVATIONS(X) X(relu) X(gelu) X(sigmoid) X(silu) X(log_sigmoid)
// clang-format on
#define KILN_CPU_ACTIVATION_METHOD(name)                     \
  Primitive CpuBackend::name(Primitive x) {                  \
    return run_activation(std::move(x), #name, make_##name); \
  }
KILN_CPU_ACTIVATIONS(KILN_CPU_ACTIVATION_METHOD)
#undef KILN_CPU_ACTIVATION_METHOD

Primitive CpuBackend::leaky_relu(Primitive x, Scalar negative_slope) {
  return run_activation(std::move(x), "leaky_relu", make_leaky_relu, with_scalar(negative_slope));
}

Primitive CpuBackend::relu_backward(Primitive output, Primitive grad) {
  const DType dtype = grad->dtype();
  if (output->dtype() != dtype) return Backend::relu_backward(std::move(output), std::move(grad));
  OwnedKernel k;
  make_relu_backward(dtype, {}, true, k);
  return run_binary(std::move(output), std::move(grad), dtype, k.kernel(), "relu_backward");
}

namespace cpu {

bool activation_step_kernel(OpCode op, DType dtype, const StepParams& params, bool contiguous,
                            OwnedKernel& k) {
  switch (op) {
    KILN_CPU_ACTIVATIONS(KILN_CPU_STEP_KERNEL_CASE)
    KILN_CPU_STEP_KERNEL_CASE(leaky_relu)
    KILN_CPU_STEP_KERNEL_CASE(relu_backward)
    default:
      return false;
  }
}

}  // namespace cpu

namespace {

// The sum of v[0 .. n) in Acc, over 8 independent partial sums (as lanes_max, for the adds'
// latency), added in a fixed order: the same row always gives the same sum.
template <class Acc, class C>
Acc lanes_sum(const C* v, std::int64_t n) {
  constexpr int kLanes = 8;
  Acc lanes[kLanes] = {};
  std::int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<Acc>(v[k + j]);
  }
  Acc sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; k < n; ++k) sum += static_cast<Acc>(v[k]);
  return sum;
}

// Softmax (or log_softmax) of every line of x along dim into a new contiguous tensor.
template <bool kLog>
Primitive softmax_rows(Primitive x, std::int64_t dim, const char* op) {
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  auto out = make_tensor(dtype, shape);
  const std::int64_t total = shape.num_elements();
  if (total == 0) return out;
  const CpuTensor& in = as_cpu(x);
  const std::size_t d = static_cast<std::size_t>(dim);
  const std::int64_t length = shape[d];
  const std::int64_t lines = total / length;
  // The other dims, innermost last, to find where each line starts.
  std::vector<std::int64_t> sizes, in_strides, out_strides;
  for (std::size_t k = 0; k < shape.rank(); ++k) {
    if (k == d) continue;
    sizes.push_back(shape[k]);
    in_strides.push_back(in.strides()[k]);
    out_strides.push_back(out->strides()[k]);
  }
  const std::int64_t in_step = in.strides()[d], out_step = out->strides()[d];
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < shape.rank(); ++k) inner *= shape[k];
  visit_float_dtype(dtype, op, [&]<class T>(type_tag<T>) {
    using C = compute_t<T>;
    // Sums in double: a row of a million f32 terms keeps every bit that matters.
    using Acc = double;
    const T* src = in.data_as<T>();
    T* dst = out->data_as<T>();
    if (in.is_contiguous() && inner > 1) {
      // dim is not the innermost: its lines interleave in memory, so a tile of adjacent lines
      // is done at once, each pass walking contiguous runs of the tile's width.
      constexpr std::int64_t kTile = 64;
      const std::int64_t tiles_per_outer = (inner + kTile - 1) / kTile;
      const std::int64_t outer = total / (length * inner);
      const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / (length * kTile));
      parallel_for(outer * tiles_per_outer, grain, [&](std::int64_t begin, std::int64_t end) {
        detail::Buffer<C> tile(static_cast<std::size_t>(length * kTile));
        C top[kTile];
        Acc sum[kTile];
        for (std::int64_t t = begin; t < end; ++t) {
          const std::int64_t first = (t % tiles_per_outer) * kTile;
          const std::int64_t width = std::min(kTile, inner - first);
          const std::int64_t base = (t / tiles_per_outer) * length * inner + first;
          std::fill_n(top, width, -std::numeric_limits<C>::infinity());
          std::fill_n(sum, width, Acc(0));
          for (std::int64_t k = 0; k < length; ++k) {
            const T* a = src + base + k * inner;
            C* row = tile.data() + k * kTile;
            for (std::int64_t j = 0; j < width; ++j) {
              row[j] = static_cast<C>(a[j]);
              if (row[j] > top[j]) top[j] = row[j];
            }
          }
          for (std::int64_t k = 0; k < length; ++k) {
            C* row = tile.data() + k * kTile;
            for (std::int64_t j = 0; j < width; ++j) {
              row[j] -= top[j];
              const C e = std::exp(row[j]);
              sum[j] += static_cast<Acc>(e);
              if constexpr (!kLog) row[j] = e;
            }
          }
          for (std::int64_t j = 0; j < width; ++j) {
            sum[j] = kLog ? static_cast<Acc>(std::log(sum[j])) : Acc(1) / sum[j];
          }
          for (std::int64_t k = 0; k < length; ++k) {
            const C* row = tile.data() + k * kTile;
            T* o = dst + base + k * inner;
            for (std::int64_t j = 0; j < width; ++j) {
              if constexpr (kLog) {
                o[j] = static_cast<T>(row[j] - static_cast<C>(sum[j]));
              } else {
                o[j] = static_cast<T>(static_cast<C>(row[j] * sum[j]));
              }
            }
          }
        }
      });
      return;
    }
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / length);
    // An output larger than the caches is streamed past them (stream_store.h).
    const bool stream = total * static_cast<std::int64_t>(sizeof(T)) >= kStreamOutputBytes;
    // Lines of a contiguous x along its last dim follow one another, in x as in the output: their
    // starts need no divisions (three per dim were a third of a 128-element row's time).
    const bool back_to_back = in.is_contiguous() && inner == 1;
    parallel_for(lines, grain, [&](std::int64_t begin, std::int64_t end) {
      detail::Buffer<C> row(static_cast<std::size_t>(length));
      detail::Buffer<C> exps(static_cast<std::size_t>(length));
      for (std::int64_t line = begin; line < end; ++line) {
        std::int64_t in_offset = 0, out_offset = 0;
        if (back_to_back) {
          in_offset = out_offset = line * length;
        } else {
          std::int64_t rest = line;
          for (std::size_t k = sizes.size(); k-- > 0;) {
            const std::int64_t i = rest % sizes[k];
            rest /= sizes[k];
            in_offset += i * in_strides[k];
            out_offset += i * out_strides[k];
          }
        }
        const T* a = src + in_offset;
        T* o = dst + out_offset;
        if constexpr (std::is_same_v<T, float>) {
          // A contiguous f32 line (softmax along the last dim): read where it lies, its
          // exponentials and their sum in one vector pass into the output (or a buffer, when the
          // output is streamed past the caches or log_softmax needs only the sum), then one pass
          // to scale.
          Acc sum = 0;
          const float top = in_step == 1 && out_step == 1 ? lanes_max(a, length) : 0.0f;
          // log_softmax needs the sum alone: the exponentials are not stored.
          float* e = kLog ? nullptr : stream ? exps.data() : o;
          // The next line's reads start during this one's exponentials (back to back: where
          // this one ends).
          const float* next = back_to_back && line + 1 < end ? a + length : nullptr;
          if (in_step == 1 && out_step == 1 && vector_exp_sum(a, top, e, length, sum, next)) {
            if constexpr (kLog) {
              // logf of the rounded sum: a double log per row was a sixth of the time.
              const float log_sum = std::log(static_cast<float>(sum));
              for (std::int64_t k = 0; k < length; ++k) o[k] = (a[k] - top) - log_sum;
            } else {
              const float inverse = static_cast<float>(Acc(1) / sum);
              if (stream) {
                stream_scaled_unfenced(o, e, inverse, length);
              } else {
                for (std::int64_t k = 0; k < length; ++k) e[k] *= inverse;
              }
            }
            continue;
          }
        }
        for (std::int64_t k = 0; k < length; ++k) {
          row[static_cast<std::size_t>(k)] = static_cast<C>(a[k * in_step]);
        }
        const C top = lanes_max(row.data(), length);
        // NaN is never > top, but exp(NaN - top) makes the sum NaN, so the row becomes NaN;
        // a row of -inf gives -inf - -inf = NaN, as the composed default does.
        for (std::int64_t k = 0; k < length; ++k) row[static_cast<std::size_t>(k)] -= top;
        // The exponentials through libmvec's vector exp where available.
        if (!vector_math_available() ||
            !vector_map(VectorFunction::Exp, row.data(), exps.data(), length)) {
          for (std::int64_t k = 0; k < length; ++k) {
            exps[static_cast<std::size_t>(k)] = std::exp(row[static_cast<std::size_t>(k)]);
          }
        }
        const Acc sum = lanes_sum<Acc>(exps.data(), length);
        if constexpr (kLog) {
          const C log_sum = static_cast<C>(std::log(sum));
          for (std::int64_t k = 0; k < length; ++k) {
            o[k * out_step] = static_cast<T>(row[static_cast<std::size_t>(k)] - log_sum);
          }
        } else if constexpr (std::is_same_v<T, C>) {
          const C inverse = static_cast<C>(Acc(1) / sum);
          C* e = exps.data();
          for (std::int64_t k = 0; k < length; ++k) e[k] *= inverse;
          if (stream && out_step == 1) {
            stream_bytes_unfenced(o, e, length * static_cast<std::int64_t>(sizeof(T)));
          } else {
            for (std::int64_t k = 0; k < length; ++k) o[k * out_step] = e[k];
          }
        } else {
          const C inverse = static_cast<C>(Acc(1) / sum);
          for (std::int64_t k = 0; k < length; ++k) {
            o[k * out_step] = static_cast<T>(exps[static_cast<std::size_t>(k)] * inverse);
          }
        }
      }
      if (stream) stream_fence();  // once per range: a fence per row waits for its lines
    });
  });
  return out;
}

}  // namespace

Primitive CpuBackend::softmax(Primitive x, std::int64_t dim) {
  return softmax_rows<false>(std::move(x), dim, "softmax");
}

Primitive CpuBackend::log_softmax(Primitive x, std::int64_t dim) {
  return softmax_rows<true>(std::move(x), dim, "log_softmax");
}

}  // namespace kiln

// Shared pieces of the CPU spatial kernels (conv, pooling, fold, interpolate): window geometry
// right-aligned into three spatial dims (so one kernel serves 1d, 2d and 3d), im2col / col2im,
// a typed row-major gemm over OpenBLAS, and the compute dtype path (f16/bf16 run in f32).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "backends/cpu/cpu_tensor.h"
#include "contract/spatial_shape.h"
#include "core/dtype_dispatch.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln {
class CpuBackend;
}

namespace kiln::cpu {

using Dims3 = std::array<std::int64_t, 3>;

// Right-aligns values (one per spatial dim, at most three) into three, the rest being fill.
inline Dims3 align3(std::span<const std::int64_t> values, std::int64_t fill) {
  Dims3 out{fill, fill, fill};
  const std::size_t lead = 3 - values.size();
  for (std::size_t i = 0; i < values.size(); ++i) out[lead + i] = values[i];
  return out;
}
// The spatial dims (2..) of a channels-first shape, right-aligned.
inline Dims3 spatial3(const Shape& shape) { return align3(shape.dims().subspan(2), 1); }
inline std::int64_t product3(const Dims3& d) { return d[0] * d[1] * d[2]; }

// One sliding window over an image: `in` is the image, `out` the grid of window positions;
// window position o covers image positions o * stride - padding + j * dilation, j < kernel.
struct Window {
  Dims3 in{1, 1, 1};
  Dims3 out{1, 1, 1};
  Dims3 kernel{1, 1, 1};
  Dims3 stride{1, 1, 1};
  Dims3 padding{0, 0, 0};
  Dims3 dilation{1, 1, 1};
  bool operator==(const Window&) const = default;

  std::int64_t in_size() const { return product3(in); }
  std::int64_t out_size() const { return product3(out); }
  std::int64_t kernel_size() const { return product3(kernel); }
  // The window is the identity map (1x1 kernel, stride 1, no padding): columns == image.
  bool is_pointwise() const {
    for (std::size_t d = 0; d < 3; ++d) {
      if (kernel[d] != 1 || stride[d] != 1 || padding[d] != 0 || in[d] != out[d]) return false;
    }
    return true;
  }
};

// Ceiling division for a positive divisor.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -spatial::floor_div(-a, b); }

// The window positions o in [0, out) whose tap at offset (j * dilation) lands inside [0, in):
// 0 <= o * stride - padding + offset < in. Returned as [first, last) (empty when first >= last).
inline std::pair<std::int64_t, std::int64_t> valid_positions(std::int64_t in, std::int64_t out,
                                                             std::int64_t stride,
                                                             std::int64_t padding,
                                                             std::int64_t offset) {
  const std::int64_t first = std::max<std::int64_t>(0, ceil_div(padding - offset, stride));
  const std::int64_t last = std::min<std::int64_t>(out, ceil_div(in + padding - offset, stride));
  return {first, std::max(first, last)};
}

// columns[(c, kd, kh, kw), (od, oh, ow)] = image[c, od*s - p + kd*d, ...] or 0 in the padding.
// image is [channels, in...] and columns [channels * kernel_size, out_size], both contiguous;
// multi-threaded over the rows.
template <class T>
void im2col(const T* image, std::int64_t channels, const Window& w, T* columns);
// The adjoint of im2col: image[c, pos] = sum of the columns that read pos (image overwritten);
// multi-threaded over the channels.
template <class T>
void col2im(const T* columns, std::int64_t channels, const Window& w, T* image);
// Single-threaded pieces for callers that split the work themselves: im2col of the window
// positions [first, last) only (columns is [channels * kernel_size, last - first]), and col2im.
template <class T>
void im2col_block(const T* image, std::int64_t channels, const Window& w, std::int64_t first,
                  std::int64_t last, T* columns);
template <class T>
void col2im_block(const T* columns, std::int64_t channels, const Window& w, T* image);

// Row-major C[m, n] = alpha * op(A) * op(B) + beta * C, op(A) is [m, k] and op(B) is [k, n].
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  for (std::int64_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > INT_MAX)
      detail::fail<InvalidArgument>("gemm", "matrix size ", v, " exceeds the BLAS limit");
  }
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto i = [](std::int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c,
                i(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c,
                i(ldc));
  }
}

// The dtype spatial kernels compute in: f64 stays, every other float runs in f32.
inline DType compute_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

// Calls f(type_tag<float>) or f(type_tag<double>) for the compute dtype of dtype.
template <class F>
decltype(auto) visit_compute(DType dtype, F&& f) {
  if (dtype == DType::F64) return f(type_tag<double>{});
  return f(type_tag<float>{});
}

// x as a contiguous tensor of its compute dtype (a cast or copy only when needed).
std::shared_ptr<CpuTensor> compute_input(CpuBackend& backend, const Primitive& x);
// result (of a compute dtype) converted back to dtype.
Primitive from_compute(CpuBackend& backend, Primitive result, DType dtype);

}  // namespace kiln::cpu

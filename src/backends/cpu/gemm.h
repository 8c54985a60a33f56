// Matrix products on strided views, shared by matmul, linear and attention. Float and double go
// to OpenBLAS directly on the caller's memory whenever BLAS can read the layout (row-major, or
// transposed through CblasTrans); other views are copied first. Integers use a blocked kernel
// of our own.
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_tensor.h"
#include "core/dtype_dispatch.h"

namespace kiln::cpu {

// One matrix inside strided memory: element (r, c) is data[r * row_stride + c * col_stride].
template <class T>
struct MatrixRef {
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
};

// Products below this many multiply-adds run on one thread inside OpenBLAS (its own
// GEMM_MULTITHREAD_THRESHOLD); above it OpenBLAS threads them itself, so callers parallelise
// their outer loops only over products at most this large.
inline constexpr std::int64_t kBlasSingleThreadWork = 262144;
// Multiply-adds below which handing work to another thread costs more than it saves.
inline constexpr std::int64_t kMinThreadWork = 65536;

// The matrix of x's last two dims that starts `offset` elements into x's data (one matrix of a
// batch).
template <class T>
MatrixRef<const T> matrix_at(const CpuTensor& x, std::int64_t offset = 0) {
  const std::size_t r = x.rank();
  return {x.data_as<const T>() + offset, x.shape()[r - 2], x.shape()[r - 1], x.strides()[r - 2],
          x.strides()[r - 1]};
}

// c = alpha * a b + beta * c for T = float or double. a and b may have any strides (including 0
// and negative); c must be row-major (col_stride 1, row_stride >= cols, at most 2^30). beta == 0
// ignores c's contents (NaN included).
template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, T alpha, T beta);

// A vector added to every row of a product (linear's bias): element j is data[j * stride].
template <class T>
struct RowBias {
  const T* data = nullptr;
  std::int64_t stride = 1;
};

// c = alpha * a b + beta * c, then bias added to every row of c. Each block of the parallel
// product adds it to its rows while they are still in cache; writing the bias into c first for
// BLAS to read back (beta 1) costs a pass over c from memory and back.
template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, T alpha, T beta,
          RowBias<T> bias);

// The row stride that walks rows spread over several dims (outer to inner, each a size and a
// stride) as one matrix dim, or -1 when they do not collapse. With at most one row, any stride
// works and `fallback` is returned.
std::int64_t collapsed_row_stride(const std::int64_t* sizes, const std::int64_t* strides,
                                  std::size_t count, std::int64_t fallback);

// dst (f16 or bf16) = src (f32), both contiguous of one shape: the single rounding of the
// 16-bit float paths, which compute in f32.
void round_from_f32(const CpuTensor& src, CpuTensor& dst);

// A contiguous copy of src converted to dtype (src itself when it already is both).
std::shared_ptr<CpuTensor> contiguous_as(const Primitive& src, DType dtype);

}  // namespace kiln::cpu

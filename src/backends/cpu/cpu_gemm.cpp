// BLAS calls on strided views: pick CblasNoTrans / CblasTrans from the strides, copy only when
// neither reads the view, and split dims that do not fit BLAS's int. Float products go to
// oneDNN's sgemm where kiln was built with it, double ones to OpenBLAS.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

#if KILN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/dnnl_team.h"
#endif

#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "core/buffer.h"

namespace kiln::cpu {

namespace {

// Largest dim or leading dimension passed to BLAS (its integers are 32-bit).
constexpr std::int64_t kMaxBlasDim = INT_MAX / 2;
// The parallel product's blocks: up to kBlocksPerThread per thread, kLongBlocksPerThread for
// products of kLongProduct multiply-adds or more; none narrower than kMinBlockExtent.
constexpr std::int64_t kBlocksPerThread = 4;
constexpr std::int64_t kLongBlocksPerThread = 2;
constexpr std::int64_t kLongProduct = std::int64_t{1} << 30;
constexpr std::int64_t kMinBlockExtent = 64;

struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  std::int64_t ld;
};

// How BLAS reads a rows x cols matrix with these strides, if it can. Strides of size-1 dims
// are free, so a vector is readable whatever its stride there.
std::optional<BlasOperand> blas_operand(std::int64_t rows, std::int64_t cols,
                                        std::int64_t row_stride, std::int64_t col_stride) {
  if (cols == 1 || col_stride == 1) {
    const std::int64_t ld = rows == 1 ? std::max<std::int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<std::int64_t>(cols, 1) && ld <= kMaxBlasDim) {
      return BlasOperand{CblasNoTrans, ld};
    }
  }
  if (rows == 1 || row_stride == 1) {
    const std::int64_t ld = cols == 1 ? std::max<std::int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<std::int64_t>(rows, 1) && ld <= kMaxBlasDim) {
      return BlasOperand{CblasTrans, ld};
    }
  }
  return std::nullopt;
}

// A row-major copy of m in buffer; returns the view of the copy.
template <class T>
MatrixRef<const T> packed(MatrixRef<const T> m, detail::Buffer<T>& buffer) {
  buffer.resize(static_cast<std::size_t>(m.rows * m.cols));
  for (std::int64_t r = 0; r < m.rows; ++r) {
    const T* src = m.data + r * m.row_stride;
    T* dst = buffer.data() + r * m.cols;
    for (std::int64_t c = 0; c < m.cols; ++c) dst[c] = src[c * m.col_stride];
  }
  return {buffer.data(), m.rows, m.cols, m.cols, 1};
}

#if KILN_HAVE_DNNL
// oneDNN's sgemm: its kernels use the widest vectors the machine has, where the environment may
// hold OpenBLAS to narrower ones (OPENBLAS_CORETYPE=Haswell on AVX-512 machines: half the FMA
// rate). It threads with OpenMP, so the calling thread asks for a team of one for the call:
// kiln's own pool splits products (thread_pool.h), and nested OpenMP teams would oversubscribe
// the cores. Returns false where oneDNN refuses the arguments, for OpenBLAS to take them.
bool dnnl_product(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b,
                  std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  SingleThreadedDnnl team;
  return dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, alpha, a,
                    lda, b, ldb, beta, c, ldc) == dnnl_success;
}
#endif

template <class T>
void blas_call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n,
               std::int64_t k, T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb,
               T beta, T* c, std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
#if KILN_HAVE_DNNL
    if (dnnl_product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
#endif
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  }
}

template <class T>
MatrixRef<T> rows_of(MatrixRef<T> m, std::int64_t begin, std::int64_t count) {
  return {m.data + begin * m.row_stride, count, m.cols, m.row_stride, m.col_stride};
}
template <class T>
MatrixRef<T> cols_of(MatrixRef<T> m, std::int64_t begin, std::int64_t count) {
  return {m.data + begin * m.col_stride, m.rows, count, m.row_stride, m.col_stride};
}

// The bias from column `by` on (none stays none).
template <class T>
RowBias<T> shifted(RowBias<T> bias, std::int64_t by) {
  return {bias.data != nullptr ? bias.data + by * bias.stride : nullptr, bias.stride};
}

// rows x cols of c (row stride ldc) += bias along each row.
template <class T>
void add_bias(T* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols, RowBias<T> bias) {
  if (bias.data == nullptr) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = c + r * ldc;
    if (bias.stride == 1) {
      for (std::int64_t j = 0; j < cols; ++j) row[j] += bias.data[j];
    } else {
      for (std::int64_t j = 0; j < cols; ++j) row[j] += bias.data[j * bias.stride];
    }
  }
}

}  // namespace

template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, T alpha, T beta) {
  gemm(a, b, c, alpha, beta, RowBias<T>{});
}

template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, T alpha, T beta,
          RowBias<T> bias) {
  const std::int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    // No products to add: c = beta * c (beta 0 overwrites, as BLAS does).
    for (std::int64_t r = 0; r < m; ++r) {
      T* row = c.data + r * c.row_stride;
      for (std::int64_t j = 0; j < n; ++j) row[j] = beta == T(0) ? T(0) : beta * row[j];
    }
    add_bias(c.data, c.row_stride, m, n, bias);
    return;
  }
  // Dims beyond BLAS's int range are split into halves (the bias with the columns; added once,
  // after the second half of k).
  if (m > kMaxBlasDim) {
    const std::int64_t h = m / 2;
    gemm(rows_of(a, 0, h), b, rows_of(c, 0, h), alpha, beta, bias);
    gemm(rows_of(a, h, m - h), b, rows_of(c, h, m - h), alpha, beta, bias);
    return;
  }
  if (n > kMaxBlasDim) {
    const std::int64_t h = n / 2;
    gemm(a, cols_of(b, 0, h), cols_of(c, 0, h), alpha, beta, bias);
    gemm(a, cols_of(b, h, n - h), cols_of(c, h, n - h), alpha, beta, shifted(bias, h));
    return;
  }
  if (k > kMaxBlasDim) {
    const std::int64_t h = k / 2;
    gemm(cols_of(a, 0, h), rows_of(b, 0, h), c, alpha, beta, RowBias<T>{});
    gemm(cols_of(a, h, k - h), rows_of(b, h, k - h), c, alpha, T(1), bias);
    return;
  }
  detail::Buffer<T> a_copy, b_copy;
  std::optional<BlasOperand> oa = blas_operand(m, k, a.row_stride, a.col_stride);
  if (!oa) {
    a = packed(a, a_copy);
    oa = BlasOperand{CblasNoTrans, k};
  }
  std::optional<BlasOperand> ob = blas_operand(k, n, b.row_stride, b.col_stride);
  if (!ob) {
    b = packed(b, b_copy);
    ob = BlasOperand{CblasNoTrans, n};
  }
  const std::int64_t ldc = m == 1 ? n : c.row_stride;
  // Large products are split over kiln's threads (thread_pool.h), each running a single-threaded
  // BLAS on a block of rows (or columns) of c: one thread pool, so OpenBLAS's own threads never
  // compete with kiln's workers for the cores.
  const bool split_rows = m >= n;
  const std::int64_t extent = split_rows ? m : n;
  std::int64_t parts = 1;
  if (!in_parallel_region() && m * n * k >= 2 * kBlasSingleThreadWork) {
    parts = std::min<std::int64_t>({thread_count(), extent, m * n * k / kBlasSingleThreadWork});
  }
  auto block = [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t count = end - begin;
    if (split_rows) {
      // Row r of op(a) starts at r * ld untransposed, at r when a is stored transposed.
      const T* a_rows = a.data + begin * (oa->trans == CblasNoTrans ? oa->ld : 1);
      blas_call<T>(oa->trans, ob->trans, count, n, k, alpha, a_rows, oa->ld, b.data, ob->ld, beta,
                   c.data + begin * ldc, ldc);
      add_bias(c.data + begin * ldc, ldc, count, n, bias);
    } else {
      const T* b_cols = b.data + begin * (ob->trans == CblasNoTrans ? 1 : ob->ld);
      blas_call<T>(oa->trans, ob->trans, m, count, k, alpha, a.data, oa->ld, b_cols, ob->ld, beta,
                   c.data + begin, ldc);
      add_bias(c.data + begin, ldc, m, count, shifted(bias, begin));
    }
  };
  if (parts <= 1) {
    block(0, extent);
    return;
  }
  // A few blocks per thread, handed out as threads come free: when another process takes one of
  // the cores, the thread left running does most of the blocks instead of waiting for the
  // descheduled one to finish half of the product (bench/transformer_bench's bert_contention:
  // the 95th percentile beside a CPU hog went from 3.2 to 2.9 times the quiet median). Blocks
  // stay at least 64 rows or columns, where the BLAS kernel runs at full speed. Each block packs
  // the whole of the other operand again, so a long product, whose tail is a small part of its
  // time, is cut into fewer (BERT-base's feed-forward products, 2.4e9 multiply-adds: 2-4 %
  // faster with two blocks per thread than with four).
  const std::int64_t per_thread =
      m * n * k < kLongProduct ? kBlocksPerThread : kLongBlocksPerThread;
  const std::int64_t blocks = std::max<std::int64_t>(
      parts, std::min<std::int64_t>({parts * per_thread, extent / kMinBlockExtent,
                                     m * n * k / kBlasSingleThreadWork}));
  run_tasks(static_cast<int>(parts), blocks,
            [&](std::int64_t p) { block(extent * p / blocks, extent * (p + 1) / blocks); });
}

template void gemm<float>(MatrixRef<const float>, MatrixRef<const float>, MatrixRef<float>, float,
                          float);
template void gemm<double>(MatrixRef<const double>, MatrixRef<const double>, MatrixRef<double>,
                           double, double);
template void gemm<float>(MatrixRef<const float>, MatrixRef<const float>, MatrixRef<float>, float,
                          float, RowBias<float>);
template void gemm<double>(MatrixRef<const double>, MatrixRef<const double>, MatrixRef<double>,
                           double, double, RowBias<double>);

std::int64_t collapsed_row_stride(const std::int64_t* sizes, const std::int64_t* strides,
                                  std::size_t count, std::int64_t fallback) {
  std::int64_t stride = -1;   // stride of the innermost dim of size > 1
  std::int64_t expected = 0;  // what the next outer dim's stride must be
  for (std::size_t i = count; i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (sizes[i] == 0) return fallback;
    if (stride < 0) {
      stride = strides[i];
    } else if (strides[i] != expected) {
      return -1;
    }
    expected = strides[i] * sizes[i];
  }
  return stride < 0 ? fallback : stride;
}

void round_from_f32(const CpuTensor& src, CpuTensor& dst) {
  const float* in = src.data_as<float>();
  auto round = [&]<class Half>(Half* out) {
    parallel_for(src.shape().num_elements(), kParallelGrain,
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t i = begin; i < end; ++i) out[i] = Half(in[i]);
                 });
  };
  if (dst.dtype() == DType::F16) {
    round(dst.data_as<half>());
  } else {
    round(dst.data_as<bfloat16>());
  }
}

std::shared_ptr<CpuTensor> contiguous_as(const Primitive& src, DType dtype) {
  if (src->dtype() == dtype) return contiguous(src);
  return std::static_pointer_cast<CpuTensor>(convert(src, dtype));
}

}  // namespace kiln::cpu

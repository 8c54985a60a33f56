// matmul (batched, broadcasting leading dims) and cross.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/integer_math.h"
#include "backends/cpu/loops.h"

namespace kiln {

using namespace cpu;

namespace {

// Where each matrix of a batched product lives: batch dims of the output and, for each
// operand, its element strides over them (0 where it is broadcast).
struct BatchPlan {
  Shape batch;  // broadcast leading dims
  Strides lhs, rhs;
  std::int64_t count = 1;

  // Element offsets in lhs and rhs of matrix `index` (row-major over batch; the output's is
  // index * M * N).
  void offsets(std::int64_t index, std::int64_t& l, std::int64_t& r) const {
    l = r = 0;
    for (std::size_t d = batch.rank(); d-- > 0;) {
      const std::int64_t i = index % batch[d];
      index /= batch[d];
      l += i * lhs[d];
      r += i * rhs[d];
    }
  }
};

// Strides of x's leading (batch) dims as seen from the broadcast batch shape.
Strides batch_strides(const CpuTensor& x, const Shape& batch) {
  Strides out(batch.rank(), 0);
  const std::size_t own = x.rank() - 2;
  const std::size_t lead = batch.rank() - own;
  for (std::size_t i = 0; i < own; ++i) {
    out[lead + i] = x.shape()[i] == 1 ? 0 : x.strides()[i];
  }
  return out;
}

Shape leading_dims(const Shape& s) {
  return Shape(std::span<const std::int64_t>(s.dims().data(), s.rank() - 2));
}

BatchPlan plan_batch(const CpuTensor& lhs, const CpuTensor& rhs) {
  BatchPlan plan;
  plan.batch = broadcast_shapes(leading_dims(lhs.shape()), leading_dims(rhs.shape()), "matmul");
  plan.lhs = batch_strides(lhs, plan.batch);
  plan.rhs = batch_strides(rhs, plan.batch);
  plan.count = plan.batch.num_elements();
  return plan;
}

// With one rhs shared by the batch and lhs rows that walk as one matrix, lhs as that matrix
// [batch * M, K]: the batch folds into M (one big product, as for x [B, S, in] @ w [in, out]).
template <class T>
std::optional<MatrixRef<const T>> folded_lhs(const CpuTensor& lhs, const BatchPlan& plan) {
  const bool rhs_shared =
      std::all_of(plan.rhs.begin(), plan.rhs.end(), [](auto s) { return s == 0; });
  if (plan.count <= 1 || !rhs_shared) return std::nullopt;
  const std::size_t rl = lhs.rank();
  const std::int64_t m = lhs.shape()[rl - 2], k = lhs.shape()[rl - 1];
  detail::DimVector sizes(plan.batch.vector()), strides(plan.lhs);
  sizes.push_back(m);
  strides.push_back(lhs.strides()[rl - 2]);
  const std::int64_t row_stride =
      collapsed_row_stride(sizes.data(), strides.data(), sizes.size(), k);
  if (row_stride < 0) return std::nullopt;
  return MatrixRef<const T>{lhs.data_as<const T>(), plan.count * m, k, row_stride,
                            lhs.strides()[rl - 1]};
}

// out (contiguous [batch..., M, N]) = lhs @ rhs through BLAS, T = float or double.
template <class T>
void blas_matmul(const CpuTensor& lhs, const CpuTensor& rhs, CpuTensor& out,
                 const BatchPlan& plan) {
  const std::size_t rl = lhs.rank();
  const std::int64_t m = lhs.shape()[rl - 2], k = lhs.shape()[rl - 1];
  const std::int64_t n = rhs.shape()[rhs.rank() - 1];
  T* o = out.data_as<T>();
  if (const std::optional<MatrixRef<const T>> a = folded_lhs<T>(lhs, plan)) {
    gemm<T>(*a, matrix_at<T>(rhs, 0), {o, plan.count * m, n, n, 1}, T(1), T(0));
    return;
  }
  auto one = [&](std::int64_t index) {
    std::int64_t l, r;
    plan.offsets(index, l, r);
    gemm<T>(matrix_at<T>(lhs, l), matrix_at<T>(rhs, r), {o + index * m * n, m, n, n, 1}, T(1),
            T(0));
  };
  const std::int64_t work = m * n * k;
  if (work <= kBlasSingleThreadWork || plan.count >= thread_count()) {
    // Small matrices (OpenBLAS runs each on one thread), or at least a matrix per thread: spread
    // the batch over our threads, each product on one. Otherwise every product would open a
    // parallel region of its own (gemm splits a large one): attention's q kT over 96 heads
    // forked and joined the team 96 times.
    const std::int64_t grain =
        std::max<std::int64_t>(1, kMinThreadWork / std::max<std::int64_t>(work, 1));
    parallel_for(plan.count, grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) one(i);
    });
  } else {
    for (std::int64_t i = 0; i < plan.count; ++i) one(i);
  }
}

// out = lhs @ rhs for bf16 on oneDNN (bf16_gemm.h), batched as blas_matmul; false (nothing
// written) where bf16_gemm declines the layout.
bool bf16_matmul(const CpuTensor& lhs, const CpuTensor& rhs, CpuTensor& out,
                 const BatchPlan& plan) {
  const std::size_t rl = lhs.rank();
  const std::int64_t m = lhs.shape()[rl - 2], n = rhs.shape()[rhs.rank() - 1];
  bfloat16* o = out.data_as<bfloat16>();
  if (const std::optional<MatrixRef<const bfloat16>> a = folded_lhs<bfloat16>(lhs, plan)) {
    return bf16_gemm(*a, matrix_at<bfloat16>(rhs, 0), o, n);
  }
  auto one = [&](std::int64_t index) {
    std::int64_t l, r;
    plan.offsets(index, l, r);
    return bf16_gemm(matrix_at<bfloat16>(lhs, l), matrix_at<bfloat16>(rhs, r), o + index * m * n,
                     n);
  };
  // Every matrix has the first one's layout: if it is taken, all are.
  if (!one(0)) return false;
  parallel_for(plan.count - 1, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) one(i + 1);
  });
  return true;
}

// Integer products wrap around like the dtype: accumulating in the unsigned type of at least
// 32 bits and truncating gives the same bits as wrapping at every step, without signed overflow.
template <class T>
using IntAccumulator = std::conditional_t<(sizeof(T) <= 4), std::uint32_t, std::uint64_t>;

// out = lhs @ rhs for an integer T; lhs and rhs are row-major copies in IntAccumulator<T>.
template <class T>
void int_matmul(const CpuTensor& lhs, const CpuTensor& rhs, CpuTensor& out, const BatchPlan& plan) {
  using U = IntAccumulator<T>;
  constexpr std::int64_t kRowBlock = 16, kColBlock = 256, kDepthBlock = 128;
  const std::size_t rl = lhs.rank();
  const std::int64_t m = lhs.shape()[rl - 2], k = lhs.shape()[rl - 1];
  const std::int64_t n = rhs.shape()[rhs.rank() - 1];
  const std::int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock;
  const std::int64_t task_work = std::min(m, kRowBlock) * n * k;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kMinThreadWork / std::max<std::int64_t>(task_work, 1));
  parallel_for(plan.count * row_blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<U> acc(static_cast<std::size_t>(kRowBlock * std::min(n, kColBlock)));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t index = task / row_blocks;
      const std::int64_t i0 = (task % row_blocks) * kRowBlock;
      const std::int64_t rows = std::min(kRowBlock, m - i0);
      std::int64_t l, r;
      plan.offsets(index, l, r);
      const U* a = lhs.data_as<const U>() + l + i0 * k;
      const U* b = rhs.data_as<const U>() + r;
      T* o = out.data_as<T>() + index * m * n + i0 * n;
      for (std::int64_t j0 = 0; j0 < n; j0 += kColBlock) {
        const std::int64_t cols = std::min(kColBlock, n - j0);
        std::fill(acc.begin(), acc.end(), U(0));
        for (std::int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
          const std::int64_t k1 = std::min(k, k0 + kDepthBlock);
          for (std::int64_t i = 0; i < rows; ++i) {
            U* accumulators = acc.data() + i * cols;
            for (std::int64_t p = k0; p < k1; ++p) {
              const U av = a[i * k + p];
              const U* brow = b + p * n + j0;
              for (std::int64_t j = 0; j < cols; ++j) accumulators[j] += av * brow[j];
            }
          }
        }
        for (std::int64_t i = 0; i < rows; ++i) {
          for (std::int64_t j = 0; j < cols; ++j)
            o[i * n + j0 + j] = static_cast<T>(acc[i * cols + j]);
        }
      }
    }
  });
}

template <class T>
constexpr DType accumulator_dtype() {
  return sizeof(T) <= 4 ? DType::U32 : DType::U64;
}

}  // namespace

Primitive CpuBackend::matmul(Primitive lhs, Primitive rhs) {
  if (rhs->dtype() == DType::QFloat) [[unlikely]] {
    // A quantized weight: the product reads its blocks; a batch of them is decoded first.
    if (rhs->rank() == 2) return quantized_product(*this, std::move(lhs), rhs, std::nullopt);
    rhs = dequantize(std::move(rhs), lhs->dtype());
  }
  const DType dtype = lhs->dtype();
  const Shape& sl = lhs->shape();
  const Shape& sr = rhs->shape();
  const BatchPlan plan = plan_batch(as_cpu(lhs), as_cpu(rhs));
  detail::DimVector dims(plan.batch.vector());
  dims.push_back(sl[sl.rank() - 2]);
  dims.push_back(sr[sr.rank() - 1]);
  const Shape out_shape(std::move(dims));
  auto out = make_tensor(dtype, out_shape);
  if (out_shape.num_elements() == 0) return out;
  if (sl[sl.rank() - 1] == 0) {
    // K = 0: every entry is an empty sum.
    std::memset(out->data(), 0,
                static_cast<std::size_t>(out_shape.num_elements()) * dtype_size(dtype));
    return out;
  }
  switch (dtype) {
    case DType::F32:
      blas_matmul<float>(as_cpu(lhs), as_cpu(rhs), *out, plan);
      return out;
    case DType::F64:
      blas_matmul<double>(as_cpu(lhs), as_cpu(rhs), *out, plan);
      return out;
    case DType::BF16:
      if (bf16_matmul(as_cpu(lhs), as_cpu(rhs), *out, plan)) return out;
      [[fallthrough]];
    case DType::F16: {
      // 16-bit floats: products in f32, rounded once at the end.
      auto a = contiguous_as(lhs, DType::F32);
      auto b = contiguous_as(rhs, DType::F32);
      auto result = make_tensor(DType::F32, out_shape);
      blas_matmul<float>(*a, *b, *result, plan_batch(*a, *b));
      round_from_f32(*result, *out);
      return out;
    }
    default:
      break;
  }
  visit_int_dtype(dtype, "matmul", [&]<class T>(type_tag<T>) {
    auto a = contiguous_as(lhs, accumulator_dtype<T>());
    auto b = contiguous_as(rhs, accumulator_dtype<T>());
    int_matmul<T>(*a, *b, *out, plan_batch(*a, *b));
  });
  return out;
}

// out = lhs x rhs along dim (size 3), broadcasting the other dims.
Primitive CpuBackend::cross(Primitive lhs, Primitive rhs, std::int64_t dim) {
  const DType dtype = lhs->dtype();
  const Shape shape = broadcast_shapes(lhs->shape(), rhs->shape(), "cross");
  auto out = make_tensor(dtype, shape);
  if (shape.num_elements() == 0) return out;
  const CpuTensor& x = as_cpu(lhs);
  const CpuTensor& y = as_cpu(rhs);
  const Strides sx = broadcast_strides(x, shape);
  const Strides sy = broadcast_strides(y, shape);
  const auto d = static_cast<std::size_t>(dim);
  const std::array<std::int64_t, 3> component{out->strides()[d], sx[d], sy[d]};
  // Walk every position with the component dim pinned to 0; each visit computes all three.
  Shape outer = shape;
  outer[d] = 1;
  const LoopPlan loop = plan_loop(outer, {&out->strides(), &sx, &sy});
  visit_numeric_dtype(dtype, "cross", [&]<class T>(type_tag<T>) {
    using C = compute_t<T>;
    T* o = out->data_as<T>();
    const T* a = x.data_as<const T>();
    const T* b = y.data_as<const T>();
    run_loop<3>(
        loop,
        [&](std::int64_t count, const std::array<std::int64_t, 3>& off,
            const std::array<std::int64_t, 3>& st) {
          for (std::int64_t i = 0; i < count; ++i) {
            T* po = o + off[0] + i * st[0];
            const T* pa = a + off[1] + i * st[1];
            const T* pb = b + off[2] + i * st[2];
            const C a0 = pa[0], a1 = pa[component[1]], a2 = pa[2 * component[1]];
            const C b0 = pb[0], b1 = pb[component[2]], b2 = pb[2 * component[2]];
            po[0] = static_cast<T>(wrap_sub(wrap_mul(a1, b2), wrap_mul(a2, b1)));
            po[component[0]] = static_cast<T>(wrap_sub(wrap_mul(a2, b0), wrap_mul(a0, b2)));
            po[2 * component[0]] = static_cast<T>(wrap_sub(wrap_mul(a0, b1), wrap_mul(a1, b0)));
          }
        },
        kParallelGrain / 3);
  });
  return out;
}

}  // namespace kiln

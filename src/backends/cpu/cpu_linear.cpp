// linear: x [..., in] @ weight [in, out] + bias [out], as one gemm over the flattened rows.
#include <algorithm>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/gemm.h"

namespace kiln {

using namespace cpu;

namespace {

// The rows of x [..., in] as one matrix [rows, in]: its leading dims collapse, else a contiguous
// copy, kept in holder.
template <class T>
MatrixRef<const T> input_rows(const CpuTensor& x, std::int64_t rows,
                              std::shared_ptr<CpuTensor>& holder) {
  const std::size_t rank = x.rank();
  const std::int64_t in = x.shape()[rank - 1];
  const CpuTensor* source = &x;
  std::int64_t row_stride = in;
  if (rank > 1) {
    row_stride = collapsed_row_stride(x.shape().dims().data(), x.strides().data(), rank - 1, in);
    if (row_stride < 0) {
      holder = copy(x);
      source = holder.get();
      row_stride = in;
    }
  }
  return {source->data_as<const T>(), rows, in, row_stride, source->strides()[rank - 1]};
}

// out [rows, out] = x [rows, in] @ w + bias, T = float or double; each block of the product adds
// the bias to its rows in cache (gemm's RowBias).
template <class T>
void linear_into(const CpuTensor& x, const CpuTensor& w, const CpuTensor* bias, CpuTensor& out) {
  const std::size_t rank = x.rank();
  const std::int64_t in = x.shape()[rank - 1];
  const std::int64_t cols = w.shape()[1];
  const std::int64_t rows = out.shape().num_elements() / std::max<std::int64_t>(cols, 1);
  const RowBias<T> row_bias =
      bias != nullptr ? RowBias<T>{bias->data_as<const T>(), bias->strides()[0]} : RowBias<T>{};
  std::shared_ptr<CpuTensor> holder;
  const MatrixRef<const T> a = input_rows<T>(x, rows, holder);
  const MatrixRef<const T> b{w.data_as<const T>(), in, cols, w.strides()[0], w.strides()[1]};
  gemm<T>(a, b, {out.data_as<T>(), rows, cols, cols, 1}, T(1), T(0), row_bias);
}

// out = x @ w + bias for bf16 on oneDNN, the bias added before the one rounding; false (nothing
// written) where bf16_gemm declines, or the bias is a view with gaps.
bool bf16_linear(const CpuTensor& x, const CpuTensor& w, const CpuTensor* bias, CpuTensor& out) {
  if (bias != nullptr && bias->shape()[0] > 1 && bias->strides()[0] != 1) return false;
  const std::int64_t in = x.shape()[x.rank() - 1], cols = w.shape()[1];
  const std::int64_t rows = out.shape().num_elements() / std::max<std::int64_t>(cols, 1);
  std::shared_ptr<CpuTensor> holder;
  const MatrixRef<const bfloat16> b{w.data_as<const bfloat16>(), in, cols, w.strides()[0],
                                    w.strides()[1]};
  return bf16_gemm(input_rows<bfloat16>(x, rows, holder), b, out.data_as<bfloat16>(), cols,
                   bias != nullptr ? bias->data_as<const bfloat16>() : nullptr);
}

}  // namespace

Primitive CpuBackend::linear(Primitive x, Primitive weight, OptionalPrimitive bias) {
  if (weight->dtype() == DType::QFloat) [[unlikely]]
    return quantized_product(*this, std::move(x), weight, std::move(bias));
  const DType dtype = x->dtype();
  detail::DimVector dims(x->shape().vector());
  dims.back() = weight->shape()[1];
  const Shape out_shape(std::move(dims));
  auto out = make_tensor(dtype, out_shape);
  if (out_shape.num_elements() == 0) return out;
  switch (dtype) {
    case DType::F32:
      linear_into<float>(as_cpu(x), as_cpu(weight), bias ? &as_cpu(*bias) : nullptr, *out);
      return out;
    case DType::F64:
      linear_into<double>(as_cpu(x), as_cpu(weight), bias ? &as_cpu(*bias) : nullptr, *out);
      return out;
    case DType::BF16:
      if (bf16_linear(as_cpu(x), as_cpu(weight), bias ? &as_cpu(*bias) : nullptr, *out)) {
        return out;
      }
      break;
    default:
      break;
  }
  // 16-bit floats: compute in f32, round once.
  auto xf = contiguous_as(x, DType::F32);
  auto wf = contiguous_as(weight, DType::F32);
  std::shared_ptr<CpuTensor> bf = bias ? contiguous_as(*bias, DType::F32) : nullptr;
  auto result = make_tensor(DType::F32, out_shape);
  linear_into<float>(*xf, *wf, bf.get(), *result);
  round_from_f32(*result, *out);
  return out;
}

}  // namespace kiln

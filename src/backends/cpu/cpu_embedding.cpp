// embedding (row gather) and its backward (row scatter-add).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"
#include "core/buffer.h"

namespace kiln {

using namespace cpu;

namespace {

// The indices (row-major) as int64, each checked against [0, rows).
std::vector<std::int64_t> checked_indices(const Primitive& indices, std::int64_t rows,
                                          const char* op) {
  auto flat = contiguous(indices);
  std::vector<std::int64_t> out(static_cast<std::size_t>(flat->shape().num_elements()));
  visit_int_dtype(flat->dtype(), op, [&]<class I>(type_tag<I>) {
    const I* d = flat->data_as<const I>();
    for (std::size_t i = 0; i < out.size(); ++i) {
      const I v = d[i];
      bool ok;
      if constexpr (std::is_signed_v<I>) {
        ok = v >= 0 && static_cast<std::int64_t>(v) < rows;
      } else {
        ok = static_cast<std::uint64_t>(v) < static_cast<std::uint64_t>(rows);
      }
      if (!ok) {
        detail::fail<InvalidArgument>(op, "index ", +v, " at position ", i, " is out of range for ",
                                      rows, " rows");
      }
      out[i] = static_cast<std::int64_t>(v);
    }
  });
  return out;
}

}  // namespace

Primitive CpuBackend::embedding(Primitive weights, Primitive indices) {
  if (weights->dtype() == DType::QFloat) [[unlikely]] {
    const CpuQuantTensor& table = as_quantized(weights);
    if (table.in_stored_order()) {
      return quantized_rows(table, checked_indices(indices, table.shape()[0], "embedding"),
                            indices->shape());
    }
    weights = dequantize(std::move(weights), DType::F32);
  }
  const DType dtype = weights->dtype();
  const CpuTensor& w = as_cpu(weights);
  const std::int64_t rows = w.shape()[0], width = w.shape()[1];
  detail::DimVector dims(indices->shape().vector());
  dims.push_back(width);
  auto out = make_tensor(dtype, Shape(std::move(dims)));
  const std::vector<std::int64_t> index = checked_indices(indices, rows, "embedding");
  if (out->shape().num_elements() == 0) return out;
  const std::size_t element = dtype_size(dtype);
  const std::int64_t rs = w.strides()[0], cs = w.strides()[1];
  const auto n = static_cast<std::int64_t>(index.size());
  visit_float_dtype(dtype, "embedding", [&]<class T>(type_tag<T>) {
    const T* src = w.data_as<const T>();
    T* dst = out->data_as<T>();
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / width);
    parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const T* row = src + index[static_cast<std::size_t>(i)] * rs;
        T* o = dst + i * width;
        if (cs == 1) {
          std::memcpy(o, row, static_cast<std::size_t>(width) * element);
        } else {
          for (std::int64_t j = 0; j < width; ++j) o[j] = row[j * cs];
        }
      }
    });
  });
  return out;
}

Primitive CpuBackend::embedding_backward(Primitive weights, Primitive output_grad,
                                         Primitive indices) {
  const DType dtype = output_grad->dtype();
  const std::int64_t rows = weights->shape()[0], width = weights->shape()[1];
  const Shape shape{rows, width};
  const std::vector<std::int64_t> index = checked_indices(indices, rows, "embedding_backward");
  auto grad = contiguous(output_grad);
  return visit_float_dtype(dtype, "embedding_backward", [&]<class T>(type_tag<T>) -> Primitive {
    // Accumulate in the compute type (f32 for the 16-bit floats). Each thread owns a range of
    // destination rows and scans every index, so sums are race-free and deterministic.
    using C = compute_t<T>;
    std::shared_ptr<CpuTensor> out = make_tensor(dtype, shape);
    detail::Buffer<C> wide;
    C* acc;
    if constexpr (std::is_same_v<C, T>) {
      acc = out->data_as<T>();
    } else {
      wide.resize(static_cast<std::size_t>(rows * width));
      acc = wide.data();
    }
    std::fill(acc, acc + rows * width, C(0));
    const T* g = grad->data_as<const T>();
    const auto n = static_cast<std::int64_t>(index.size());
    const std::int64_t work = std::max<std::int64_t>(n * width, 1);
    const std::int64_t grain = std::max<std::int64_t>(1, rows * kParallelGrain / work);
    parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = index[static_cast<std::size_t>(i)];
        if (r < begin || r >= end) continue;
        C* dst = acc + r * width;
        const T* src = g + i * width;
        for (std::int64_t j = 0; j < width; ++j) dst[j] += static_cast<C>(src[j]);
      }
    });
    if constexpr (!std::is_same_v<C, T>) {
      T* o = out->data_as<T>();
      for (std::int64_t i = 0; i < rows * width; ++i) o[i] = T(acc[i]);
    }
    return out;
  });
}

}  // namespace kiln

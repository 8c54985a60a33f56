// Reductions along a dim as generated kernels (reduce.cpp). Full reductions are one line of
// every element: a contiguous tensor through the defaults (flatten is a view, then the dim
// form), a permuted or flipped one read in place as the block of memory it covers.
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/reduce.h"

namespace kiln::cuda {

namespace {

Primitive run(CudaBackend& b, const Primitive& x, std::int64_t dim, const Reducer& r,
              Accepts accepts, const char* op, std::optional<DType> out_dtype = std::nullopt) {
  check_accepts(x->dtype(), accepts, op);
  return reduce_dim(b.runtime(), as_cuda(x), dim, r, out_dtype.value_or(x->dtype()), op);
}

void check_index_dtype(DType index_dtype, const char* op) {
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
}

// x's elements as one stride-1 line of shape [n] when they fill a block of memory without gaps
// or repeats, in any order of dims and directions; nullopt otherwise (the default copies).
std::optional<Primitive> dense_line(const Primitive& x) {
  const CudaTensor& t = as_cuda(x);
  if (t.is_contiguous() || t.shape().num_elements() == 0)
    return std::nullopt;                                    // the default is a view
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (|stride|, size)
  std::int64_t offset = t.offset();
  for (std::size_t k = 0; k < t.rank(); ++k) {
    const std::int64_t size = t.shape()[k], stride = t.strides()[k];
    if (size == 1) continue;
    if (stride == 0) return std::nullopt;
    if (stride < 0) offset += (size - 1) * stride;
    dims.emplace_back(stride < 0 ? -stride : stride, size);
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return std::nullopt;
    expected *= size;
  }
  return make_view(t, Shape{t.shape().num_elements()}, Strides{1}, offset);
}

}  // namespace

Primitive CudaBackend::sum_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Sum, Accepts::Numeric, "sum_dim");
}
Primitive CudaBackend::mean_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Mean, Accepts::Float, "mean_dim");
}
Primitive CudaBackend::prod_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Prod, Accepts::Numeric, "prod_dim");
}
Primitive CudaBackend::max_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Max, Accepts::Numeric, "max_dim");
}
Primitive CudaBackend::min_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Min, Accepts::Numeric, "min_dim");
}
Primitive CudaBackend::logsumexp_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::LogSumExp, Accepts::Float, "logsumexp_dim");
}
Primitive CudaBackend::any_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::Any, Accepts::Any, "any_dim", DType::Bool);
}
Primitive CudaBackend::all_dim(Primitive x, std::int64_t dim) {
  return run(*this, x, dim, Reducer::All, Accepts::Any, "all_dim", DType::Bool);
}
Primitive CudaBackend::argmax(Primitive x, std::int64_t dim, DType index_dtype) {
  check_index_dtype(index_dtype, "argmax");
  return run(*this, x, dim, Reducer::ArgMax, Accepts::Numeric, "argmax", index_dtype);
}
Primitive CudaBackend::argmin(Primitive x, std::int64_t dim, DType index_dtype) {
  check_index_dtype(index_dtype, "argmin");
  return run(*this, x, dim, Reducer::ArgMin, Accepts::Numeric, "argmin", index_dtype);
}

Primitive CudaBackend::sum(Primitive x) {
  if (auto line = dense_line(x)) return sum_dim(std::move(*line), 0);
  return Backend::sum(std::move(x));
}
Primitive CudaBackend::mean(Primitive x) {
  if (auto line = dense_line(x)) return mean_dim(std::move(*line), 0);
  return Backend::mean(std::move(x));
}
Primitive CudaBackend::prod(Primitive x) {
  if (auto line = dense_line(x)) return prod_dim(std::move(*line), 0);
  return Backend::prod(std::move(x));
}
Primitive CudaBackend::max(Primitive x) {
  if (auto line = dense_line(x)) return max_dim(std::move(*line), 0);
  return Backend::max(std::move(x));
}
Primitive CudaBackend::min(Primitive x) {
  if (auto line = dense_line(x)) return min_dim(std::move(*line), 0);
  return Backend::min(std::move(x));
}
Primitive CudaBackend::any(Primitive x) {
  if (auto line = dense_line(x)) return any_dim(std::move(*line), 0);
  return Backend::any(std::move(x));
}
Primitive CudaBackend::all(Primitive x) {
  if (auto line = dense_line(x)) return all_dim(std::move(*line), 0);
  return Backend::all(std::move(x));
}

}  // namespace kiln::cuda

// Reductions along a dim as generated kernels (reduce.cpp). Full reductions come from the
// defaults (flatten, then the dim form), which land here.
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/reduce.h"

namespace kiln::cuda {

namespace {

Primitive run(CudaBackend& b, const Primitive& x, std::int64_t dim, Reducer r, Accepts accepts,
              const char* op, std::optional<DType> out_dtype = std::nullopt) {
  check_accepts(x->dtype(), accepts, op);
  return reduce_dim(b.runtime(), as_cuda(x), dim, r, out_dtype.value_or(x->dtype()), op);
}

void check_index_dtype(DType index_dtype, const char* op) {
  if (!is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
}

}  // namespace

Primitive CudaBackend::sum_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Sum, Accepts::Numeric, "sum_dim"); }
Primitive CudaBackend::mean_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Mean, Accepts::Float, "mean_dim"); }
Primitive CudaBackend::prod_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Prod, Accepts::Numeric, "prod_dim"); }
Primitive CudaBackend::max_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Max, Accepts::Numeric, "max_dim"); }
Primitive CudaBackend::min_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Min, Accepts::Numeric, "min_dim"); }
Primitive CudaBackend::any_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::Any, Accepts::Any, "any_dim", DType::Bool); }
Primitive CudaBackend::all_dim(Primitive x, std::int64_t dim) { return run(*this, x, dim, Reducer::All, Accepts::Any, "all_dim", DType::Bool); }
Primitive CudaBackend::argmax(Primitive x, std::int64_t dim, DType index_dtype) {
  check_index_dtype(index_dtype, "argmax");
  return run(*this, x, dim, Reducer::ArgMax, Accepts::Numeric, "argmax", index_dtype);
}
Primitive CudaBackend::argmin(Primitive x, std::int64_t dim, DType index_dtype) {
  check_index_dtype(index_dtype, "argmin");
  return run(*this, x, dim, Reducer::ArgMin, Accepts::Numeric, "argmin", index_dtype);
}

}  // namespace kiln::cuda

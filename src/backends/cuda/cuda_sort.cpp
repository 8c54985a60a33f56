// sort, sort_with_indices, argsort and topk_with_indices on the GPU through kiln_cuda_lib's CUB row
// sort (lib/sort.h), whose order is exactly the CPU backend's: stable, NaN the largest value
// (last ascending, first descending), topk ties by the lower index. The dim is moved last and the
// input made contiguous (a strided copy only when it is not already), the rows are sorted, and the
// results are viewed with the dim back in its place. The library writes i64 or i32 indices; other
// integer index dtypes are cast from i32 (the CPU writes static_cast<index type>(position) too).
// Rows longer than 2^31 - 1 (beyond the library's 32-bit positions) take the host default.
#include <limits>

#include "backends/cuda/lib/sort.h"
#include "backends/cuda/lib_call.h"

namespace kiln::cuda {

namespace {

struct SortRequest {
  bool descending;    // sort: descending order; topk: largest first
  std::int64_t keep;  // topk: how many to keep; -1 for a full sort
  bool want_values;
  bool want_indices;
  DType index_dtype;
};

PrimitivePair run_sort(CudaBackend& b, const Primitive& x, std::int64_t dim, const SortRequest& r,
                       const char* op) {
  if (r.want_indices && !is_int(r.index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(r.index_dtype));
  }
  const std::size_t rank = x->rank();
  const bool last = dim == static_cast<std::int64_t>(rank) - 1;
  Primitive moved = last ? x : b.permute(x, dim_last_axes(rank, dim));
  TensorPtr in = b.contiguous(moved, op);

  const Shape& shape = in->shape();
  const DType native_index =
      (r.index_dtype == DType::I64 || r.index_dtype == DType::I32) ? r.index_dtype : DType::I32;
  lib::SortDesc desc{.dtype = in->dtype(),
                     .rows = 1,
                     .n = shape[rank - 1],
                     .descending = r.descending,
                     .keep = r.keep,
                     .with_indices = r.want_indices,
                     .index_dtype = native_index};
  for (std::size_t d = 0; d + 1 < rank; ++d) desc.rows *= shape[d];
  Shape out_shape = shape;
  out_shape[rank - 1] = r.keep < 0 ? desc.n : r.keep;

  TensorPtr values, indices;
  if (r.want_values) values = b.make_tensor(in->dtype(), out_shape, op);
  if (r.want_indices) indices = b.make_tensor(native_index, out_shape, op);
  Runtime& runtime = b.runtime();
  Workspace workspace(runtime, lib::sort_workspace_bytes(desc), op);  // validates desc
  if (out_shape.num_elements() > 0) {
    cudaStream_t stream = lib_stream(runtime);
    lib::sort_rows(desc, device_address(*in), values ? device_address(*values) : nullptr,
                   indices ? device_address(*indices) : nullptr, workspace.get(), workspace.bytes(),
                   stream);
    runtime.context.note_launch(op);
  }

  Primitive value_result = values;
  Primitive index_result = indices;
  if (index_result && native_index != r.index_dtype) {
    index_result = b.cast(std::move(index_result), r.index_dtype);
  }
  if (!last) {
    const Axes back = dim_back_axes(rank, dim);
    if (value_result) value_result = b.permute(std::move(value_result), back);
    if (index_result) index_result = b.permute(std::move(index_result), back);
  }
  return {std::move(value_result), std::move(index_result)};
}

bool too_long(const Primitive& x, std::int64_t dim) {
  return x->shape()[static_cast<std::size_t>(dim)] > std::numeric_limits<std::int32_t>::max();
}

}  // namespace

Primitive CudaBackend::sort(Primitive x, std::int64_t dim, bool descending) {
  if (too_long(x, dim)) return Backend::sort(std::move(x), dim, descending);
  return run_sort(*this, x, dim, {descending, -1, true, false, DType::I64}, "sort").first;
}

PrimitivePair CudaBackend::sort_with_indices(Primitive x, std::int64_t dim, bool descending,
                                             DType index_dtype) {
  if (too_long(x, dim))
    return Backend::sort_with_indices(std::move(x), dim, descending, index_dtype);
  return run_sort(*this, x, dim, {descending, -1, true, true, index_dtype}, "sort_with_indices");
}

Primitive CudaBackend::argsort(Primitive x, std::int64_t dim, bool descending, DType index_dtype) {
  if (too_long(x, dim)) return Backend::argsort(std::move(x), dim, descending, index_dtype);
  return run_sort(*this, x, dim, {descending, -1, false, true, index_dtype}, "argsort").second;
}

PrimitivePair CudaBackend::topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim,
                                             bool largest, DType index_dtype) {
  if (too_long(x, dim))
    return Backend::topk_with_indices(std::move(x), k, dim, largest, index_dtype);
  return run_sort(*this, x, dim, {largest, k, true, true, index_dtype}, "topk_with_indices");
}

}  // namespace kiln::cuda

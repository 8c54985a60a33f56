// sort, sort_with_indices, argsort and topk_with_indices on the GPU through kiln_cuda_lib's CUB row
// sort (lib/sort.h), whose order is exactly the CPU backend's: stable, NaN the largest value
// (last ascending, first descending), topk ties by the lower index. topk with k up to
// max_select_k (32; 16 for 8- and 64-bit dtypes) selects instead of sorting (topk.h: generated
// kernels, one read of the input), with the same results; larger k keeps the first k of the sorted
// rows. The dim is moved last and the input made contiguous (a strided copy only when it is not
// already), the rows are sorted or selected, and the results are viewed with the dim back in its
// place. The library and the selection write i64 or i32 indices; other integer index dtypes are
// cast from i32 (the CPU writes static_cast<index type>(position) too). Rows longer than
// 2^31 - 1 (beyond 32-bit positions) take the host default.
#include <limits>

#include "backends/cuda/lib/sort.h"
#include "backends/cuda/lib_call.h"
#include "backends/cuda/topk.h"

namespace kiln::cuda {

namespace {

struct SortRequest {
  bool descending;    // sort: descending order; topk: largest first
  std::int64_t keep;  // topk: how many to keep; -1 for a full sort
  bool want_values;
  bool want_indices;
  DType index_dtype;
};

// x with dim moved last, as contiguous rows, and the index dtype the library writes.
struct Rows {
  TensorPtr in;
  std::int64_t rows = 1;
  std::int64_t n = 0;
  DType native_index = DType::I32;

  // The shape of a result keeping `keep` entries per row.
  Shape out_shape(std::int64_t keep) const {
    Shape shape = in->shape();
    shape[shape.rank() - 1] = keep;
    return shape;
  }
};

Rows rows_of(CudaBackend& b, const Primitive& x, std::int64_t dim, bool want_indices,
             DType index_dtype, const char* op) {
  if (want_indices && !is_int(index_dtype)) {
    detail::fail<UnsupportedDType>(op, "index dtype must be an integer dtype, got ",
                                   dtype_name(index_dtype));
  }
  const std::size_t rank = x->rank();
  const bool last = dim == static_cast<std::int64_t>(rank) - 1;
  Rows r;
  r.in = b.contiguous(last ? x : b.permute(x, dim_last_axes(rank, dim)), op);
  const Shape& shape = r.in->shape();
  r.n = shape[rank - 1];
  for (std::size_t d = 0; d + 1 < rank; ++d) r.rows *= shape[d];
  r.native_index =
      (index_dtype == DType::I64 || index_dtype == DType::I32) ? index_dtype : DType::I32;
  return r;
}

// The library's results viewed with the dim back in its place, indices in the requested dtype.
PrimitivePair finish(CudaBackend& b, TensorPtr values, TensorPtr indices, DType index_dtype,
                     std::size_t rank, std::int64_t dim) {
  Primitive value_result = std::move(values);
  Primitive index_result = std::move(indices);
  if (index_result && index_result->dtype() != index_dtype) {
    index_result = b.cast(std::move(index_result), index_dtype);
  }
  if (dim != static_cast<std::int64_t>(rank) - 1) {
    const Axes back = dim_back_axes(rank, dim);
    if (value_result) value_result = b.permute(std::move(value_result), back);
    if (index_result) index_result = b.permute(std::move(index_result), back);
  }
  return {std::move(value_result), std::move(index_result)};
}

PrimitivePair run_sort(CudaBackend& b, const Primitive& x, std::int64_t dim, const SortRequest& r,
                       const char* op) {
  const Rows rows = rows_of(b, x, dim, r.want_indices, r.index_dtype, op);
  lib::SortDesc desc{.dtype = rows.in->dtype(),
                     .rows = rows.rows,
                     .n = rows.n,
                     .descending = r.descending,
                     .keep = r.keep,
                     .with_indices = r.want_indices,
                     .index_dtype = rows.native_index};
  const Shape out_shape = rows.out_shape(r.keep < 0 ? rows.n : r.keep);
  TensorPtr values, indices;
  if (r.want_values) values = b.make_tensor(rows.in->dtype(), out_shape, op);
  if (r.want_indices) indices = b.make_tensor(rows.native_index, out_shape, op);
  Runtime& runtime = b.runtime();
  // Many rows take CUB's segmented sort (lib/sort_kernels.cuh, choose_strategy), which reads
  // sizes back to the host: a CUDA graph cannot hold it.
  const bool segmented = desc.rows > 1 && !(desc.n >= (std::int64_t{1} << 17) && desc.rows <= 64);
  if (segmented && runtime.context.capturing_here()) {
    detail::fail<InvalidArgument>(op, "cannot be captured on cuda: sorting ", desc.rows,
                                  " rows reads sizes back to the host (CUB's segmented sort)");
  }
  Workspace workspace(runtime, lib::sort_workspace_bytes(desc), op);  // validates desc
  if (out_shape.num_elements() > 0) {
    cudaStream_t stream = lib_stream(runtime);
    lib::sort_rows(desc, device_address(*rows.in), values ? device_address(*values) : nullptr,
                   indices ? device_address(*indices) : nullptr, workspace.get(), workspace.bytes(),
                   stream);
    runtime.context.note_launch(op);
  }
  return finish(b, std::move(values), std::move(indices), r.index_dtype, x->rank(), dim);
}

// topk by selection (k <= max_select_k): the generated kernels of topk.h, compiled for the
// dtype's key type and the list length k needs.
PrimitivePair run_select(CudaBackend& b, const Primitive& x, std::int64_t k, std::int64_t dim,
                         bool largest, DType index_dtype, const char* op) {
  const Rows rows = rows_of(b, x, dim, true, index_dtype, op);
  const TopkDesc desc{.dtype = rows.in->dtype(),
                      .rows = rows.rows,
                      .n = rows.n,
                      .k = k,
                      .largest = largest,
                      .index_dtype = rows.native_index};
  const TopkPlan plan = plan_topk(desc);  // validates desc
  const Shape out_shape = rows.out_shape(k);
  TensorPtr values = b.make_tensor(rows.in->dtype(), out_shape, op);
  TensorPtr indices = b.make_tensor(rows.native_index, out_shape, op);
  Runtime& runtime = b.runtime();
  Workspace workspace(runtime, topk_workspace_bytes(desc), op);
  TopkParams p = topk_params(desc, plan);
  p.input = rows.in->data();
  p.values = values->data();
  p.indices = indices->data();
  p.partial = workspace.pointer();
  for (const TopkLaunch& launch : plan.launches) {
    CUfunction function = runtime.compiler.function(
        topk_kernel_key(launch.kernel, desc.dtype, plan.list), topk_kernel_name(launch.kernel),
        [&] { return topk_kernel_source(launch.kernel, desc.dtype, plan.list); });
    runtime.launch(op, function, launch.blocks, kTopkBlock, p);
  }
  return finish(b, std::move(values), std::move(indices), index_dtype, x->rank(), dim);
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
  const char* op = "topk_with_indices";
  if (too_long(x, dim))
    return Backend::topk_with_indices(std::move(x), k, dim, largest, index_dtype);
  if (k <= max_select_k(x->dtype())) {
    return run_select(*this, x, k, dim, largest, index_dtype, op);
  }
  return run_sort(*this, x, dim, {largest, k, true, true, index_dtype}, op);
}

}  // namespace kiln::cuda

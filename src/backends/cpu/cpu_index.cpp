// Indexing kernels: gather and select (index_select), scatter and select_assign with every update
// mode, gather_nd and scatter_nd. Index values are range-checked here, as they are read.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/index_kernels.h"
#include "backends/cpu/loops.h"

namespace kiln {

namespace cpu {

void fail_index(const char* op, std::int64_t dim, std::int64_t size, std::int64_t index) {
  detail::fail<InvalidArgument>(op, "index ", index, " is out of range for dim ", dim, " of size ",
                                size);
}

void fail_index_unsigned(const char* op, std::int64_t dim, std::int64_t size, std::uint64_t index) {
  detail::fail<InvalidArgument>(op, "index ", index, " is out of range for dim ", dim, " of size ",
                                size);
}

}  // namespace cpu

using namespace cpu;

namespace {

// Calls f with the index type of kernels: indices were made i64 by index_operand.
template <class F>
void with_index_type(DType dtype, F&& f) {
  if (dtype != DType::I64) {
    detail::fail<InvalidArgument>("index", "indices reach the kernel as ", dtype_name(dtype));
  }
  f(type_tag<std::int64_t>{});
}

// Index tensors of any integer dtype reach the kernels as i64, widened once here (u64 values past
// the i64 range are reported before they could wrap): the kernels are made for one index type.
// i64 is what PyTorch's gather and scatter take; other dtypes pay one cast.
Primitive index_operand(CpuBackend& backend, Primitive indices, const char* op) {
  const DType dtype = indices->dtype();
  if (dtype == DType::I64) return indices;
  if (dtype == DType::U64) {
    auto c = contiguous(indices);
    const std::uint64_t* p = c->data_as<std::uint64_t>();
    const std::int64_t n = c->shape().num_elements();
    for (std::int64_t i = 0; i < n; ++i) {
      if (p[i] > static_cast<std::uint64_t>(INT64_MAX)) {
        detail::fail<InvalidArgument>(op, "index ", p[i], " is out of range");
      }
    }
  }
  return backend.cast(std::move(indices), DType::I64);
}

// out[p] = x[p with its coordinate along dim replaced by indices[p]] for every p of the shape
// of `indices` (a view whose strides may be 0, which is how select broadcasts its 1-D indices).
Primitive gather_kernel(const char* op, std::int64_t dim, const CpuTensor& x,
                        const CpuTensor& indices) {
  const Shape& shape = indices.shape();
  auto out = make_tensor(x.dtype(), shape);
  if (shape.num_elements() == 0) return out;
  const std::size_t d = static_cast<std::size_t>(dim);
  Strides xs = x.strides();
  const std::int64_t dim_stride = xs[d];
  const std::int64_t dim_size = x.shape()[d];
  xs[d] = 0;  // the coordinate along dim comes from the index, not from the loop
  const LoopPlan plan = plan_loop(shape, {&out->strides(), &indices.strides(), &xs});
  with_index_type(indices.dtype(), [&]<class I>(type_tag<I>) {
    visit_element_size(x.dtype(), [&]<class T>(type_tag<T>) {
      T* o = out->data_as<T>();
      const I* ip = indices.data_as<I>();
      const T* xp = x.data_as<T>();
      run_loop<3>(plan, [&](std::int64_t n, const std::array<std::int64_t, 3>& off,
                            const std::array<std::int64_t, 3>& st) {
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int64_t k = checked_index(ip[off[1] + j * st[1]], dim_size, op, dim);
          o[off[0] + j * st[0]] = xp[off[2] + j * st[2] + k * dim_stride];
        }
      });
    });
  });
  return out;
}

// A contiguous copy of x that the op may write, or x itself when nobody else can see it.
std::shared_ptr<CpuTensor> writable_copy(const Primitive& x) {
  if (reusable_as_output(x, x->shape(), x->dtype())) return std::static_pointer_cast<CpuTensor>(x);
  return copy(as_cpu(x));
}

Strides without(const Strides& strides, std::size_t d) {
  Strides out = strides;
  out.erase(d);
  return out;
}

// out = x; then for every p of the shape of `indices`, out[p with its coordinate along dim
// replaced by indices[p]] = combine(that, values[p]). Each thread owns whole lines along dim and
// walks them in order, so duplicates resolve deterministically (the last one wins in Assign).
Primitive scatter_kernel(const char* op, std::int64_t dim, Primitive x, const CpuTensor& indices,
                         const CpuTensor& values, IndexingUpdate update) {
  std::shared_ptr<CpuTensor> out = writable_copy(x);
  x.reset();
  const Shape& shape = indices.shape();
  if (shape.num_elements() == 0) return out;
  const std::size_t d = static_cast<std::size_t>(dim);
  const std::int64_t line = shape[d];
  const std::int64_t dim_size = out->shape()[d];
  const std::int64_t out_step = out->strides()[d];
  const std::int64_t index_step = indices.strides()[d];
  const std::int64_t value_step = values.strides()[d];
  detail::DimVector outer(shape.vector());
  outer.erase(d);
  const Strides os = without(out->strides(), d);
  const Strides is = without(indices.strides(), d);
  const Strides vs = without(values.strides(), d);
  const LoopPlan plan = plan_loop(Shape(std::move(outer)), {&os, &is, &vs});
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / line);
  auto run = [&]<class T, class I, IndexingUpdate M>() {
    T* o = out->data_as<T>();
    const I* ip = indices.data_as<I>();
    const T* vp = values.data_as<T>();
    run_loop<3>(
        plan,
        [&](std::int64_t n, const std::array<std::int64_t, 3>& off,
            const std::array<std::int64_t, 3>& st) {
          for (std::int64_t j = 0; j < n; ++j) {
            T* ol = o + off[0] + j * st[0];
            const I* il = ip + off[1] + j * st[1];
            const T* vl = vp + off[2] + j * st[2];
            for (std::int64_t k = 0; k < line; ++k) {
              T& dst = ol[checked_index(il[k * index_step], dim_size, op, dim) * out_step];
              dst = combine<M>(dst, vl[k * value_step]);
            }
          }
        },
        grain);
  };
  with_index_type(indices.dtype(), [&]<class I>(type_tag<I>) {
    if (update == IndexingUpdate::Assign) {
      visit_element_size(out->dtype(), [&]<class T>(type_tag<T>) {
        run.template operator()<T, I, IndexingUpdate::Assign>();
      });
      return;
    }
    visit_dtype(out->dtype(), op, [&]<class T>(type_tag<T>) {
      visit_update(update, [&]<IndexingUpdate M>(std::integral_constant<IndexingUpdate, M>) {
        run.template operator()<T, I, M>();
      });
    });
  });
  return out;
}

// A view of 1-D indices as a tensor of `shape` that varies only along dim.
std::shared_ptr<CpuTensor> indices_along(const CpuTensor& indices, const Shape& shape,
                                         std::int64_t dim) {
  Strides strides(shape.rank(), 0);
  strides[static_cast<std::size_t>(dim)] = indices.strides()[0];
  return make_view(indices, shape, std::move(strides), indices.offset());
}

// The element offset in `target` of each row of the [rows, k] index matrix, range-checked
// against target's first k dims.
std::vector<std::int64_t> row_offsets(const char* op, const Primitive& indices,
                                      const CpuTensor& target, std::int64_t rows, std::int64_t k) {
  std::vector<std::int64_t> base(static_cast<std::size_t>(rows));
  auto c = contiguous(indices);
  with_index_type(c->dtype(), [&]<class I>(type_tag<I>) {
    const I* ip = c->data_as<I>();
    parallel_for(rows, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(k, 1)),
                 [&](std::int64_t b, std::int64_t e) {
                   for (std::int64_t r = b; r < e; ++r) {
                     std::int64_t offset = 0;
                     for (std::int64_t j = 0; j < k; ++j) {
                       const std::size_t jd = static_cast<std::size_t>(j);
                       offset += checked_index(ip[r * k + j], target.shape()[jd], op, j) *
                                 target.strides()[jd];
                     }
                     base[static_cast<std::size_t>(r)] = offset;
                   }
                 });
  });
  return base;
}

// Whole blocks along dim, for select and select_assign where both sides are contiguous: the
// elements after dim are `inner` contiguous ones, copied with one memcpy per (outer, index),
// not one element at a time down each line (which strides across rows: 7% of a BERT forward
// that gathers its real tokens).
struct Blocks {
  std::int64_t outer, inner, count;   // before dim, after dim, indices
  std::int64_t dest_dim, source_dim;  // the sizes along dim of the written and the read tensor
};

Blocks blocks_along(const Shape& dest, const Shape& source, std::int64_t dim, std::int64_t count) {
  Blocks b{1, 1, count, dest[static_cast<std::size_t>(dim)], source[static_cast<std::size_t>(dim)]};
  for (std::size_t i = 0; i < dest.rank(); ++i) {
    if (i < static_cast<std::size_t>(dim)) b.outer *= dest[i];
    if (i > static_cast<std::size_t>(dim)) b.inner *= dest[i];
  }
  return b;
}

// For each outer block o and index k, one block copied: the index names the source block
// (select) or, with into_index, the destination block (select_assign). select's copies go to
// distinct places and split between threads as they come; select_assign's split by outer block
// only, each taking its indices in order, so duplicates resolve as scatter_kernel's (the last
// one wins).
void copy_blocks(const char* op, std::int64_t dim, const Blocks& b, const std::int64_t* indices,
                 std::int64_t index_stride, bool into_index, std::byte* dest,
                 const std::byte* source, std::size_t element) {
  const std::size_t bytes = static_cast<std::size_t>(b.inner) * element;
  const std::int64_t checked_size = into_index ? b.dest_dim : b.source_dim;
  auto copy_one = [&](std::int64_t o, std::int64_t k) {
    const std::int64_t i = checked_index(indices[k * index_stride], checked_size, op, dim);
    const std::int64_t to = into_index ? i : k, from = into_index ? k : i;
    std::memcpy(dest + static_cast<std::size_t>((o * b.dest_dim + to) * b.inner) * element,
                source + static_cast<std::size_t>((o * b.source_dim + from) * b.inner) * element,
                bytes);
  };
  const std::int64_t per_task = into_index ? b.count : 1;
  parallel_for(
      b.outer * b.count / per_task,
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(b.inner * per_task, 1)),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = begin; t < end; ++t) {
          if (into_index) {
            for (std::int64_t k = 0; k < b.count; ++k) copy_one(t, k);
          } else {
            copy_one(t / b.count, t % b.count);
          }
        }
      });
}

}  // namespace

Primitive CpuBackend::gather(std::int64_t dim, Primitive x, Primitive indices) {
  indices = index_operand(*this, std::move(indices), "gather");
  return gather_kernel("gather", dim, as_cpu(x), as_cpu(indices));
}

Primitive CpuBackend::select(Primitive x, std::int64_t dim, Primitive indices) {
  indices = index_operand(*this, std::move(indices), "select");
  const CpuTensor& t = as_cpu(x);
  detail::DimVector dims(t.shape().vector());
  dims[static_cast<std::size_t>(dim)] = indices->shape()[0];
  const Shape out_shape(std::move(dims));
  if (t.is_contiguous() && indices->dtype() == DType::I64) {
    auto out = make_tensor(t.dtype(), out_shape);
    if (out_shape.num_elements() == 0) return out;
    const CpuTensor& index = as_cpu(indices);
    copy_blocks("select", dim, blocks_along(out_shape, t.shape(), dim, index.shape()[0]),
                index.data_as<std::int64_t>(), index.strides()[0], false, out->data_as<std::byte>(),
                t.data_as<std::byte>(), dtype_size(t.dtype()));
    return out;
  }
  auto view = indices_along(as_cpu(indices), out_shape, dim);
  return gather_kernel("select", dim, t, *view);
}

Primitive CpuBackend::scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                              IndexingUpdate update) {
  indices = index_operand(*this, std::move(indices), "scatter");
  return scatter_kernel("scatter", dim, std::move(x), as_cpu(indices), as_cpu(values), update);
}

Primitive CpuBackend::select_assign(Primitive x, std::int64_t dim, Primitive indices,
                                    Primitive values, IndexingUpdate update) {
  indices = index_operand(*this, std::move(indices), "select_assign");
  const CpuTensor& v = as_cpu(values);
  if (update == IndexingUpdate::Assign && v.is_contiguous() && indices->dtype() == DType::I64) {
    std::shared_ptr<CpuTensor> out = writable_copy(x);
    x.reset();
    if (out->is_contiguous()) {
      if (v.shape().num_elements() == 0) return out;
      const CpuTensor& index = as_cpu(indices);
      copy_blocks("select_assign", dim,
                  blocks_along(out->shape(), v.shape(), dim, index.shape()[0]),
                  index.data_as<std::int64_t>(), index.strides()[0], true,
                  out->data_as<std::byte>(), v.data_as<std::byte>(), dtype_size(v.dtype()));
      return out;
    }
    x = std::move(out);
  }
  auto view = indices_along(as_cpu(indices), values->shape(), dim);
  return scatter_kernel("select_assign", dim, std::move(x), *view, as_cpu(values), update);
}

Primitive CpuBackend::gather_nd(Primitive x, Primitive indices) {
  indices = index_operand(*this, std::move(indices), "gather_nd");
  const CpuTensor& t = as_cpu(x);
  const Shape& index_shape = indices->shape();
  const std::size_t k = static_cast<std::size_t>(index_shape[index_shape.rank() - 1]);
  std::int64_t rows = 1;
  detail::DimVector dims;
  for (std::size_t i = 0; i + 1 < index_shape.rank(); ++i) {
    rows *= index_shape[i];
    dims.push_back(index_shape[i]);
  }
  // Each row of indices picks the sub-tensor x[i0, ..., ik-1, ...]; out is [rows, trailing...].
  detail::DimVector rows_shape{rows};
  Strides xs{0};
  Strides table{1};
  for (std::size_t i = k; i < t.rank(); ++i) {
    dims.push_back(t.shape()[i]);
    rows_shape.push_back(t.shape()[i]);
    xs.push_back(t.strides()[i]);
    table.push_back(0);
  }
  auto out = make_tensor(t.dtype(), Shape(std::move(dims)));
  const std::vector<std::int64_t> base =
      row_offsets("gather_nd", indices, t, rows, static_cast<std::int64_t>(k));
  if (out->shape().num_elements() == 0) return out;
  const Shape flat(std::move(rows_shape));
  const Strides os = contiguous_strides(flat);
  const LoopPlan plan = plan_loop(flat, {&os, &xs, &table});
  visit_element_size(t.dtype(), [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    const T* xp = t.data_as<T>();
    const std::int64_t* bp = base.data();
    run_loop<3>(plan, [&](std::int64_t n, const std::array<std::int64_t, 3>& off,
                          const std::array<std::int64_t, 3>& st) {
      for (std::int64_t j = 0; j < n; ++j) {
        o[off[0] + j * st[0]] = xp[off[1] + j * st[1] + bp[off[2] + j * st[2]]];
      }
    });
  });
  return out;
}

Primitive CpuBackend::scatter_nd(Primitive x, Primitive indices, Primitive values,
                                 IndexingUpdate update) {
  indices = index_operand(*this, std::move(indices), "scatter_nd");
  std::shared_ptr<CpuTensor> out = writable_copy(x);
  x.reset();
  const Shape& index_shape = indices->shape();
  const std::int64_t k = index_shape[index_shape.rank() - 1];
  std::int64_t rows_count = 1;
  for (std::size_t i = 0; i + 1 < index_shape.rank(); ++i) rows_count *= index_shape[i];
  std::int64_t inner = 1;
  for (std::size_t i = static_cast<std::size_t>(k); i < out->rank(); ++i) inner *= out->shape()[i];
  const std::vector<std::int64_t> base = row_offsets("scatter_nd", indices, *out, rows_count, k);
  if (rows_count == 0 || inner == 0) return out;
  auto v = contiguous(values);
  // Threads split the positions inside a row; each walks every row in order, so duplicate rows
  // combine deterministically (the last one wins in Assign).
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / rows_count);
  auto run = [&]<class T, IndexingUpdate M>() {
    T* o = out->data_as<T>();
    const T* vp = v->data_as<T>();
    parallel_for(inner, grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = 0; r < rows_count; ++r) {
        T* dst = o + base[static_cast<std::size_t>(r)];
        const T* src = vp + r * inner;
        for (std::int64_t i = b; i < e; ++i) dst[i] = combine<M>(dst[i], src[i]);
      }
    });
  };
  if (update == IndexingUpdate::Assign) {
    visit_element_size(out->dtype(), [&]<class T>(type_tag<T>) {
      run.template operator()<T, IndexingUpdate::Assign>();
    });
  } else {
    visit_dtype(out->dtype(), "scatter_nd", [&]<class T>(type_tag<T>) {
      visit_update(update, [&]<IndexingUpdate M>(std::integral_constant<IndexingUpdate, M>) {
        run.template operator()<T, M>();
      });
    });
  }
  return out;
}

}  // namespace kiln

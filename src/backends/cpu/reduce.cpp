// The reduction and scan driver: everything but the loops over lines, compiled once for every op
// and dtype.
#include "backends/cpu/reduce.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <vector>

#include "backends/cpu/dim_plan.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/parallel.h"
#include "core/buffer.h"
#include "kiln/detail/format.h"

namespace kiln::cpu {

namespace {

// Elements per partial result of a full reduction (fixed, so results do not depend on the
// number of threads).
constexpr std::int64_t kFullChunk = 1 << 16;

// Whether storage of this dtype reaches a kernel reading `kernel` as it is: the same type, or
// an integer of the same width for an op blind to signedness.
void check_storage(DType storage, DType kernel, const char* op) {
  if (storage == kernel ||
      (is_int(storage) && is_int(kernel) && dtype_size(storage) == dtype_size(kernel))) {
    return;
  }
  detail::fail<DTypeMismatch>(op, "no ", dtype_name(kernel), " kernel runs on ",
                              dtype_name(storage), " storage");
}

Shape kept_shape(const Shape& shape, std::int64_t dim) {
  Shape out = shape;
  out[static_cast<std::size_t>(dim)] = 1;
  return out;
}

// A loop over x's elements in the order they lie in memory (dims sorted by stride): a full
// reduction does not care about the logical order, and a transposed view is then read in order.
LoopPlan memory_order_plan(const CpuTensor& x) {
  const std::size_t rank = x.rank();
  std::vector<std::size_t> order(rank);
  for (std::size_t i = 0; i < rank; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::abs(x.strides()[a]) > std::abs(x.strides()[b]);
  });
  detail::DimVector dims(rank);
  Strides strides(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    dims[i] = x.shape()[order[i]];
    strides[i] = x.strides()[order[i]];
  }
  return plan_loop(Shape(std::move(dims)), {&strides});
}

// One accumulator per slot: threads write neighbouring partials.
struct alignas(kMaxAccumulator) Slot {
  std::byte bytes[kMaxAccumulator];
};

// The partial results of `chunks` chunks, reduce(chunk, accumulator) filling each in parallel,
// combined pairwise in order and written as output position `position`.
template <class ReduceChunk>
void reduce_chunks(const ReduceKernel& kernel, std::int64_t chunks, char* const* out,
                   std::int64_t position, ReduceChunk&& reduce) {
  detail::Buffer<Slot> partials(static_cast<std::size_t>(chunks));
  const void* context = kernel.context;
  for (Slot& slot : partials) kernel.init(slot.bytes, context);
  parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c)
      reduce(c, partials[static_cast<std::size_t>(c)].bytes);
  });
  for (std::size_t width = 1; width < partials.size(); width *= 2) {
    for (std::size_t i = 0; i + width < partials.size(); i += 2 * width) {
      kernel.combine(partials[i].bytes, partials[i + width].bytes, context);
    }
  }
  kernel.write(out, position, partials[0].bytes, context);
}

std::int64_t chunk_count(std::int64_t n) {
  return std::max<std::int64_t>(1, (n + kFullChunk - 1) / kFullChunk);
}

// Every element of x into output position 0, in fixed chunks.
void reduce_all(const CpuTensor& x, const ReduceKernel& kernel, char* const* out) {
  const std::int64_t n = x.shape().num_elements();
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(x.dtype()));
  const char* base = reinterpret_cast<const char*>(x.data());
  const bool contiguous = x.is_contiguous();
  const LoopPlan plan = memory_order_plan(x);
  const void* context = kernel.context;
  reduce_chunks(kernel, n > 0 ? chunk_count(n) : 1, out, 0, [&](std::int64_t c, void* acc) {
    if (n == 0) return;
    const std::int64_t first = c * kFullChunk;
    const std::int64_t last = std::min(n, first + kFullChunk);
    if (contiguous) {
      kernel.accumulate(acc, last - first, base + first * size, size, first, context);
      return;
    }
    walk_segments<1>(
        plan, first, last,
        [&](std::int64_t j, std::int64_t count, const std::array<std::int64_t, 1>& offset,
            const std::array<std::int64_t, 1>& step) {
          kernel.accumulate(acc, count, base + offset[0] * size, step[0] * size, j, context);
        });
  });
}

// Reduces dim of x, output position i (row-major over the kept dims) written by the kernel.
void reduce_dim(const CpuTensor& x, std::int64_t dim, const ReduceKernel& kernel,
                char* const* out) {
  const DimPlan plan = plan_dim(x.shape(), dim, {&x.strides()});
  if (plan.kept.elements == 0) return;
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(x.dtype()));
  const char* base = reinterpret_cast<const char*>(x.data());
  const std::int64_t length = plan.length;
  const std::int64_t dim_step = plan.dim_strides[0] * size;
  const void* context = kernel.context;
  if (kernel.accumulate && plan.kept.elements < thread_count() && length >= 2 * kFullChunk) {
    // Fewer lines than threads, and long: each line in fixed chunks over the threads (the
    // result does not depend on the number of threads).
    for (std::int64_t i = 0; i < plan.kept.elements; ++i) {
      const char* line = base + offsets_at<1>(plan.kept, i)[0] * size;
      reduce_chunks(kernel, chunk_count(length), out, i, [&](std::int64_t c, void* acc) {
        const std::int64_t first = c * kFullChunk;
        const std::int64_t last = std::min(length, first + kFullChunk);
        kernel.accumulate(acc, last - first, line + first * dim_step, dim_step, first, context);
      });
    }
    return;
  }
  if (!columns_pay_off<1>(plan)) {
    for_each_line_run<1>(
        plan, length,
        [&](std::int64_t flat, std::int64_t count, const std::array<std::int64_t, 1>& offset,
            const std::array<std::int64_t, 1>& step) {
          kernel.lines(count, length, base + offset[0] * size, step[0] * size, dim_step, out, flat,
                       context);
        });
    return;
  }
  for_each_column_block<1>(
      plan, kReduceColumnWidth,
      [&](std::int64_t flat, const std::array<std::int64_t, 1>& offset, std::int64_t width) {
        kernel.columns(width, length, base + offset[0] * size, size, dim_step, out, flat, context);
      });
}

}  // namespace

std::pair<Primitive, Primitive> run_reduce(const Primitive& x, std::int64_t dim, DType out_dtype,
                                           std::optional<DType> second_dtype,
                                           const ReduceKernel& kernel, const char* op) {
  check_storage(x->dtype(), kernel.in, op);
  const CpuTensor& in = as_cpu(x);
  const Shape shape = dim < 0 ? Shape{1} : kept_shape(in.shape(), dim);
  std::shared_ptr<CpuTensor> first = make_tensor(out_dtype, shape);
  std::shared_ptr<CpuTensor> second;
  if (second_dtype) second = make_tensor(*second_dtype, shape);
  const std::array<char*, 2> out{reinterpret_cast<char*>(first->data()),
                                 second ? reinterpret_cast<char*>(second->data()) : nullptr};
  if (dim < 0) {
    if (!kernel.accumulate) {
      detail::fail<UnsupportedDType>(op, "this reduction needs a dim");
    }
    reduce_all(in, kernel, out.data());
  } else {
    reduce_dim(in, dim, kernel, out.data());
  }
  return {first, second};
}

Primitive run_scan(Primitive x, std::int64_t dim, const ScanKernel& kernel, const char* op) {
  check_storage(x->dtype(), kernel.type, op);
  const DType dtype = x->dtype();
  const Shape shape = x->shape();
  std::shared_ptr<CpuTensor> out;
  if (reusable_as_output(x, shape, dtype)) {
    out = std::static_pointer_cast<CpuTensor>(x);
  } else {
    out = make_tensor(dtype, shape);
  }
  if (shape.num_elements() == 0) return out;
  const CpuTensor& in = as_cpu(x);
  const DimPlan plan = plan_dim(shape, dim, {&in.strides(), &out->strides()});
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  const char* src = reinterpret_cast<const char*>(in.data());
  char* dst = reinterpret_cast<char*>(out->data());
  const std::int64_t length = plan.length;
  const std::int64_t in_dim = plan.dim_strides[0] * size;
  const std::int64_t out_dim = plan.dim_strides[1] * size;
  const void* context = kernel.context;
  if (!columns_pay_off<2>(plan)) {
    for_each_line_run<2>(
        plan, length,
        [&](std::int64_t, std::int64_t count, const std::array<std::int64_t, 2>& offset,
            const std::array<std::int64_t, 2>& step) {
          kernel.lines(count, length, src + offset[0] * size, step[0] * size, in_dim,
                       dst + offset[1] * size, step[1] * size, out_dim, context);
        });
    return out;
  }
  for_each_column_block<2>(
      plan, kReduceColumnWidth,
      [&](std::int64_t, const std::array<std::int64_t, 2>& offset, std::int64_t width) {
        kernel.columns(width, length, src + offset[0] * size, size, in_dim, dst + offset[1] * size,
                       size, out_dim, context);
      });
  return out;
}

}  // namespace kiln::cpu

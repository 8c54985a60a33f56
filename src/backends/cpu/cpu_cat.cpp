// Copy kernels: cat (each input copied once into its region of the output) and repeat_dim (one
// strided copy from a broadcast view). slice_assign is StridedBackend's (strided_backend.cpp).
#include <algorithm>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/loops.h"

namespace kiln {

using namespace cpu;

Primitive CpuBackend::cat(PrimitiveList xs, std::int64_t dim) {
  const std::size_t d = static_cast<std::size_t>(dim);
  const CpuTensor& first = as_cpu(xs.front());
  detail::DimVector dims(first.shape().vector());
  dims[d] = 0;
  for (const Primitive& x : xs) dims[d] += x->shape()[d];
  auto out = make_tensor(first.dtype(), Shape(dims));
  if (out->shape().num_elements() == 0) return out;
  // The region of the output each input lands in: a view with the output's strides.
  std::vector<std::shared_ptr<CpuTensor>> regions;
  regions.reserve(xs.size());
  std::int64_t start = 0;
  for (const Primitive& x : xs) {
    detail::DimVector region(dims);
    region[d] = x->shape()[d];
    regions.push_back(
        make_view(*out, Shape(std::move(region)), out->strides(), start * out->strides()[d]));
    start += x->shape()[d];
  }
  const std::int64_t count = static_cast<std::int64_t>(xs.size());
  if (count >= thread_count() && out->shape().num_elements() >= kParallelGrain) {
    // Many inputs: one thread per group of inputs (each copy then runs on its own thread).
    parallel_for(count, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        copy_strided(as_cpu(xs[static_cast<std::size_t>(i)]),
                     *regions[static_cast<std::size_t>(i)]);
      }
    });
  } else {
    // Few inputs: each copy spreads over the threads itself.
    for (std::size_t i = 0; i < xs.size(); ++i) copy_strided(as_cpu(xs[i]), *regions[i]);
  }
  return out;
}

Primitive CpuBackend::repeat_dim(Primitive x, std::int64_t dim, std::int64_t times) {
  const std::size_t d = static_cast<std::size_t>(dim);
  const CpuTensor& t = as_cpu(x);
  detail::DimVector dims(t.shape().vector());
  dims[d] *= times;
  auto out = make_tensor(t.dtype(), Shape(dims));
  if (out->shape().num_elements() == 0) return out;
  // out viewed as [..., times, n, ...] is x broadcast along the new `times` dim.
  detail::DimVector split(t.shape().vector());
  split.insert(d, times);
  const Shape split_shape(std::move(split));
  Strides source = t.strides();
  source.insert(d, 0);
  auto from = make_view(t, split_shape, std::move(source), t.offset());
  auto to = make_view(*out, split_shape, contiguous_strides(split_shape), 0);
  copy_strided(*from, *to);
  return out;
}

}  // namespace kiln

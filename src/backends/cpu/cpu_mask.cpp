// Mask kernels: mask_where and mask_fill (elementwise, broadcasting), mask_select and argwhere
// (compaction: count per chunk in parallel, then each chunk writes from its prefix offset).
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/index_kernels.h"
#include "backends/cpu/loops.h"

namespace kiln {

using namespace cpu;

namespace {

// The output of an elementwise op of out_shape: reuses x when nobody else can see it.
std::shared_ptr<CpuTensor> output_for(const Primitive& x, const Shape& shape, DType dtype) {
  if (reusable_as_output(x, shape, dtype)) return std::static_pointer_cast<CpuTensor>(x);
  return make_tensor(dtype, shape);
}

// x broadcast to shape, as a contiguous tensor (x itself when it already is one).
std::shared_ptr<CpuTensor> contiguous_as(const Primitive& x, const Shape& shape) {
  const CpuTensor& t = as_cpu(x);
  if (t.shape() == shape) return contiguous(x);
  return copy(*make_view(t, shape, broadcast_strides(t, shape), t.offset()));
}

// Splits [0, n) into chunks for a two-pass compaction over mask; returns chunk boundaries
// (size chunks + 1) and, in first_out, the output position of each chunk's first true element
// (size chunks + 1, the last entry is the total count).
std::vector<std::int64_t> compaction_chunks(const bool* mask, std::int64_t n,
                                            std::vector<std::int64_t>& first_out) {
  const std::int64_t chunks = std::clamp<std::int64_t>(n / kParallelGrain, 1, thread_count());
  std::vector<std::int64_t> bounds(static_cast<std::size_t>(chunks) + 1);
  for (std::int64_t c = 0; c <= chunks; ++c) bounds[static_cast<std::size_t>(c)] = n * c / chunks;
  first_out.assign(static_cast<std::size_t>(chunks) + 1, 0);
  parallel_for(chunks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = b; c < e; ++c) {
      std::int64_t count = 0;
      const std::size_t cs = static_cast<std::size_t>(c);
      for (std::int64_t i = bounds[cs]; i < bounds[cs + 1]; ++i) count += mask[i] ? 1 : 0;
      first_out[cs + 1] = count;
    }
  });
  for (std::size_t c = 1; c < first_out.size(); ++c) first_out[c] += first_out[c - 1];
  return bounds;
}

}  // namespace

Primitive CpuBackend::mask_where(Primitive x, Primitive mask, Primitive values) {
  const Shape shape = broadcast_shapes(broadcast_shapes(x->shape(), mask->shape(), "mask_where"),
                                       values->shape(), "mask_where");
  const DType dtype = x->dtype();
  std::shared_ptr<CpuTensor> out;
  if (reusable_as_output(x, shape, dtype)) {
    out = std::static_pointer_cast<CpuTensor>(x);
  } else {
    out = output_for(values, shape, dtype);
  }
  if (shape.num_elements() == 0) return out;
  const CpuTensor& xt = as_cpu(x);
  const CpuTensor& mt = as_cpu(mask);
  const CpuTensor& vt = as_cpu(values);
  const Strides sx = broadcast_strides(xt, shape);
  const Strides sm = broadcast_strides(mt, shape);
  const Strides sv = broadcast_strides(vt, shape);
  const LoopPlan plan = plan_loop(shape, {&out->strides(), &sx, &sm, &sv});
  visit_element_size(dtype, [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    const T* xp = xt.data_as<T>();
    const bool* mp = mt.data_as<bool>();
    const T* vp = vt.data_as<T>();
    run_loop<4>(plan, [&](std::int64_t n, const std::array<std::int64_t, 4>& off,
                          const std::array<std::int64_t, 4>& st) {
      for (std::int64_t i = 0; i < n; ++i) {
        o[off[0] + i * st[0]] =
            mp[off[2] + i * st[2]] ? vp[off[3] + i * st[3]] : xp[off[1] + i * st[1]];
      }
    });
  });
  return out;
}

Primitive CpuBackend::mask_fill(Primitive x, Primitive mask, Scalar value) {
  const Shape shape = broadcast_shapes(x->shape(), mask->shape(), "mask_fill");
  const DType dtype = x->dtype();
  std::shared_ptr<CpuTensor> out = output_for(x, shape, dtype);
  if (shape.num_elements() == 0) return out;
  const CpuTensor& xt = as_cpu(x);
  const CpuTensor& mt = as_cpu(mask);
  const Strides sx = broadcast_strides(xt, shape);
  const Strides sm = broadcast_strides(mt, shape);
  const LoopPlan plan = plan_loop(shape, {&out->strides(), &sx, &sm});
  visit_dtype(dtype, "mask_fill", [&]<class T>(type_tag<T>) {
    const T v = convert_element<T>(value.as<compute_t<T>>());
    T* o = out->data_as<T>();
    const T* xp = xt.data_as<T>();
    const bool* mp = mt.data_as<bool>();
    run_loop<3>(plan, [&](std::int64_t n, const std::array<std::int64_t, 3>& off,
                          const std::array<std::int64_t, 3>& st) {
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) {  // contiguous runs, as a vector loop
        // The mask's bytes as integers and x loaded whatever the mask says: the form GCC
        // vectorises (a select on bool lanes stays scalar).
        T* out = o + off[0];
        const T* in = xp + off[1];
        const auto* m = reinterpret_cast<const std::uint8_t*>(mp + off[2]);
        for (std::int64_t i = 0; i < n; ++i) {
          const T a = in[i];
          out[i] = m[i] != 0 ? v : a;
        }
        return;
      }
      for (std::int64_t i = 0; i < n; ++i) {
        o[off[0] + i * st[0]] = mp[off[2] + i * st[2]] ? v : xp[off[1] + i * st[1]];
      }
    });
  });
  return out;
}

namespace cpu {

bool mask_step_kernel(OpCode op, DType dtype, const StepParams& params, bool, OwnedKernel& k) {
  if (op == OpCode::mask_fill) {
    visit_dtype(dtype, "mask_fill", [&]<class T>(type_tag<T>) {
      const T v = convert_element<T>(params.scalars[0].as<compute_t<T>>());
      k.masked_binary<T>([v](T x, bool m) { return m ? v : x; });
    });
    return true;
  }
  if (op == OpCode::mask_where) {
    visit_dtype(dtype, "mask_where", [&]<class T>(type_tag<T>) {
      k.masked_ternary<T>([](T x, bool m, T values) { return m ? values : x; });
    });
    return true;
  }
  return false;
}

}  // namespace cpu

Primitive CpuBackend::mask_select(Primitive x, Primitive mask) {
  const Shape shape = broadcast_shapes(x->shape(), mask->shape(), "mask_select");
  const std::int64_t n = shape.num_elements();
  if (n == 0) return make_tensor(x->dtype(), Shape{0});
  auto m = contiguous_as(mask, shape);
  auto xc = contiguous_as(x, shape);
  const bool* mp = m->data_as<bool>();
  std::vector<std::int64_t> first;
  const std::vector<std::int64_t> bounds = compaction_chunks(mp, n, first);
  auto out = make_tensor(x->dtype(), Shape{first.back()});
  visit_element_size(x->dtype(), [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    const T* xp = xc->data_as<T>();
    parallel_for(
        static_cast<std::int64_t>(bounds.size()) - 1, 1, [&](std::int64_t b, std::int64_t e) {
          for (std::size_t c = static_cast<std::size_t>(b); c < static_cast<std::size_t>(e); ++c) {
            std::int64_t w = first[c];
            for (std::int64_t i = bounds[c]; i < bounds[c + 1]; ++i) {
              if (mp[i]) o[w++] = xp[i];
            }
          }
        });
  });
  return out;
}

Primitive CpuBackend::argwhere(Primitive mask, DType index_dtype) {
  const Shape shape = mask->shape();
  const std::int64_t rank = static_cast<std::int64_t>(shape.rank());
  const std::int64_t n = shape.num_elements();
  if (n == 0) return make_tensor(index_dtype, Shape{0, rank});
  auto m = contiguous(mask);
  const bool* mp = m->data_as<bool>();
  std::vector<std::int64_t> first;
  const std::vector<std::int64_t> bounds = compaction_chunks(mp, n, first);
  auto out = make_tensor(index_dtype, Shape{first.back(), rank});
  visit_int_dtype(index_dtype, "argwhere", [&]<class T>(type_tag<T>) {
    T* o = out->data_as<T>();
    parallel_for(
        static_cast<std::int64_t>(bounds.size()) - 1, 1, [&](std::int64_t b, std::int64_t e) {
          for (std::size_t c = static_cast<std::size_t>(b); c < static_cast<std::size_t>(e); ++c) {
            // Coordinates of the chunk's first element, then counted up in row-major
            // order.
            detail::DimVector coords(shape.rank());
            std::int64_t rest = bounds[c];
            for (std::size_t d = shape.rank(); d-- > 0;) {
              coords[d] = rest % shape[d];
              rest /= shape[d];
            }
            T* row = o + first[c] * rank;
            for (std::int64_t i = bounds[c]; i < bounds[c + 1]; ++i) {
              if (mp[i]) {
                for (std::size_t d = 0; d < shape.rank(); ++d) {
                  *row++ = static_cast<T>(coords[d]);
                }
              }
              for (std::size_t d = shape.rank(); d-- > 0;) {
                if (++coords[d] < shape[d]) break;
                coords[d] = 0;
              }
            }
          }
        });
  });
  return out;
}

}  // namespace kiln

// Typed elementwise maps over strided, broadcast operands, built on the loop engine.
// The output reuses an operand's memory when that operand is uniquely owned, contiguous and
// already of the output's shape and dtype.
#pragma once

#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/loops.h"
#include "core/dtype_dispatch.h"

namespace kiln::cpu {

// out = f(x) elementwise; f maps In -> Out (storage types).
template <class Out, class In, class F>
Primitive map_unary_raw(Primitive x, DType out_dtype, F f) {
  const Shape& shape = x->shape();
  std::shared_ptr<CpuTensor> out;
  if (reusable_as_output(x, shape, out_dtype)) {
    out = std::static_pointer_cast<CpuTensor>(x);
  } else {
    out = make_tensor(out_dtype, shape);
  }
  if (shape.num_elements() == 0) return out;
  const CpuTensor& in = as_cpu(x);
  Out* o = out->data_as<Out>();
  const In* a = in.data_as<In>();
  if (in.is_contiguous()) {
    parallel_for(shape.num_elements(), kParallelGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) o[i] = f(a[i]);
    });
    return out;
  }
  const LoopPlan plan = plan_loop(shape, {&out->strides(), &in.strides()});
  run_loop<2>(plan, [&](std::int64_t n, const std::array<std::int64_t, 2>& off,
                        const std::array<std::int64_t, 2>& st) {
    Out* po = o + off[0];
    const In* pa = a + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i * st[0]] = f(pa[i * st[1]]);
    }
  });
  return out;
}

// out = f(x) with f on compute types (float for f16/bf16).
template <class Out, class In, class F>
Primitive map_unary(Primitive x, DType out_dtype, F f) {
  return map_unary_raw<Out, In>(std::move(x), out_dtype, [f](In v) {
    return static_cast<Out>(f(static_cast<compute_t<In>>(v)));
  });
}

// out = f(a, b) with broadcasting; f on compute types of In, returning compute type of Out.
template <class Out, class In, class F>
Primitive map_binary(Primitive lhs, Primitive rhs, DType out_dtype, F f, const char* op) {
  const bool same_shape = lhs->shape() == rhs->shape();
  Shape broadcast;
  if (!same_shape) broadcast = broadcast_shapes(lhs->shape(), rhs->shape(), op);
  const Shape& shape = same_shape ? lhs->shape() : broadcast;
  std::shared_ptr<CpuTensor> out;
  if (reusable_as_output(lhs, shape, out_dtype)) {
    out = std::static_pointer_cast<CpuTensor>(lhs);
  } else if (reusable_as_output(rhs, shape, out_dtype)) {
    out = std::static_pointer_cast<CpuTensor>(rhs);
  } else {
    out = make_tensor(out_dtype, shape);
  }
  if (shape.num_elements() == 0) return out;
  const CpuTensor& x = as_cpu(lhs);
  const CpuTensor& y = as_cpu(rhs);
  Out* o = out->data_as<Out>();
  const In* a = x.data_as<In>();
  const In* b = y.data_as<In>();
  using C = compute_t<In>;
  auto apply = [f](In u, In v) { return static_cast<Out>(f(static_cast<C>(u), static_cast<C>(v))); };
  if (same_shape && x.is_contiguous() && y.is_contiguous()) {
    parallel_for(shape.num_elements(), kParallelGrain, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) o[i] = apply(a[i], b[i]);
    });
    return out;
  }
  const Strides sa = broadcast_strides(x, shape);
  const Strides sb = broadcast_strides(y, shape);
  const LoopPlan plan = plan_loop(shape, {&out->strides(), &sa, &sb});
  run_loop<3>(plan, [&](std::int64_t n, const std::array<std::int64_t, 3>& off,
                        const std::array<std::int64_t, 3>& st) {
    Out* po = o + off[0];
    const In* pa = a + off[1];
    const In* pb = b + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = apply(pa[i], pb[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const In v = *pb;
      for (std::int64_t i = 0; i < n; ++i) po[i] = apply(pa[i], v);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const In u = *pa;
      for (std::int64_t i = 0; i < n; ++i) po[i] = apply(u, pb[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i * st[0]] = apply(pa[i * st[1]], pb[i * st[2]]);
    }
  });
  return out;
}

}  // namespace kiln::cpu

#include "backends/cpu/loops.h"

#include <cstring>

namespace kiln::cpu {

LoopPlan plan_loop(const Shape& shape, std::initializer_list<const Strides*> strides) {
  LoopPlan plan;
  plan.operands = strides.size();
  plan.elements = shape.num_elements();
  // Drop size-1 dims, then merge a dim into the next when every operand is contiguous across
  // the pair.
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    std::size_t k = 0;
    bool mergeable = !plan.shape.empty();
    for (const Strides* s : strides) {
      if (mergeable && plan.strides[k].back() != (*s)[d] * shape[d]) mergeable = false;
      ++k;
    }
    if (mergeable) {
      plan.shape.back() *= shape[d];
      k = 0;
      for (const Strides* s : strides) plan.strides[k++].back() = (*s)[d];
    } else {
      plan.shape.push_back(shape[d]);
      k = 0;
      for (const Strides* s : strides) plan.strides[k++].push_back((*s)[d]);
    }
  }
  if (plan.shape.empty()) {
    plan.shape.push_back(1);
    for (std::size_t k = 0; k < plan.operands; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

void copy_strided(const CpuTensor& src, CpuTensor& dst) {
  if (src.shape().num_elements() == 0) return;
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(src.dtype()));
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::byte* out = dst.data();
    const std::byte* in = src.data();
    const std::int64_t bytes = src.shape().num_elements() * size;
    parallel_for(bytes, kParallelGrain * 8, [&](std::int64_t b, std::int64_t e) {
      std::memcpy(out + b, in + b, static_cast<std::size_t>(e - b));
    });
    return;
  }
  const LoopPlan plan = plan_loop(dst.shape(), {&dst.strides(), &src.strides()});
  std::byte* out = dst.data();
  const std::byte* in = src.data();
  auto segment = [&]<class T>(std::int64_t n, const std::array<std::int64_t, 2>& off,
                              const std::array<std::int64_t, 2>& st) {
    T* o = reinterpret_cast<T*>(out) + off[0];
    const T* i = reinterpret_cast<const T*>(in) + off[1];
    if (st[0] == 1 && st[1] == 1) {
      std::memcpy(o, i, static_cast<std::size_t>(n) * sizeof(T));
    } else {
      for (std::int64_t j = 0; j < n; ++j) o[j * st[0]] = i[j * st[1]];
    }
  };
  switch (size) {
    case 1:
      run_loop<2>(plan,
                  [&](auto n, auto& o, auto& s) { segment.operator()<std::uint8_t>(n, o, s); });
      break;
    case 2:
      run_loop<2>(plan,
                  [&](auto n, auto& o, auto& s) { segment.operator()<std::uint16_t>(n, o, s); });
      break;
    case 4:
      run_loop<2>(plan,
                  [&](auto n, auto& o, auto& s) { segment.operator()<std::uint32_t>(n, o, s); });
      break;
    default:
      run_loop<2>(plan,
                  [&](auto n, auto& o, auto& s) { segment.operator()<std::uint64_t>(n, o, s); });
      break;
  }
}

}  // namespace kiln::cpu

// StridedBackend's hooks: the layout ops themselves (views, and copies where a view cannot do) are
// written once for the CPU and CUDA backends in src/contract/strided_backend.cpp.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_quant_tensor.h"
#include "backends/cpu/cpu_tensor.h"
#include "backends/cpu/loops.h"

namespace kiln {

using namespace cpu;

Primitive CpuBackend::view_on(const StridedTensor& base, strided::View view) {
  return make_view(static_cast<const CpuTensor&>(base), std::move(view.shape),
                   std::move(view.strides), view.offset);
}

Primitive CpuBackend::contiguous_copy(const StridedTensor& x, const char*) {
  return copy(static_cast<const CpuTensor&>(x));
}

void CpuBackend::copy_elements(StridedTensor& dst, const StridedTensor& src, const char*) {
  copy_strided(static_cast<const CpuTensor&>(src), static_cast<CpuTensor&>(dst));
}

void CpuBackend::assign(const Primitive& dst, Primitive src) {
  if (dst->dtype() == DType::QFloat) return assign_quantized(dst, src);
  CpuTensor& to = as_cpu(dst);
  CpuTensor& from = as_cpu(src);
  const bool movable = can_mut(src) && to.storage_unique() && to.is_contiguous() &&
                       from.is_contiguous() && to.offset() == 0 && from.offset() == 0 &&
                       to.dtype() == from.dtype() &&
                       to.storage()->bytes() == from.storage()->bytes();
  if (movable) {
    to.swap_storage(from);  // src, about to be dropped, takes dst's old storage with it
    return;
  }
  StridedBackend::assign(dst, std::move(src));
}

}  // namespace kiln

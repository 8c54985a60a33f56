// StridedBackend: the base of the backends whose tensors are StridedTensor views on shared storage
// (the CPU and CUDA backends). It has the ops ops.def marks S, written once: the layout ops that
// are O(1) views (reshape when the strides allow, expand, permute, swap_dims, flip, unfold, slice)
// and slice_assign. A backend derives it instead of Backend and gives three hooks: a view of a
// tensor's storage, a contiguous copy, and an elementwise copy between two views.
//
// A base class with virtual hooks rather than a template over the backend: the layout code is
// compiled once, in libkiln, for both backends (the CUDA plugin included), and costs one indirect
// call per op next to the allocation of the view itself.
#pragma once

#include "contract/backend.h"
#include "contract/strided_tensor.h"
#include "kiln/detail/op_columns.h"

namespace kiln {

class StridedBackend : public Backend {
 public:
  // ---- every op whose impl column in ops.def has an S (strided_backend.cpp) ----
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_STRIDED(impl))(result name params override;)
#include "kiln/detail/ops.def"
#undef KILN_OP

  // dst's elements take src's: through copy_elements, src copied first when it lies on dst's
  // storage (x.assign(x.flip(0)) reads what it writes). InvalidArgument when dst repeats an
  // element (an expanded view), whose writes would race.
  void assign(const Primitive& dst, Primitive src) override;

  // The leaf of program that its output k may be written into (FusedProgram::write_into), or -1:
  // the one offered, where it is dense, of the output's dtype and shape, and every other leaf on
  // its storage is the same view (read at the same position as the output is written).
  static std::int32_t writable_leaf(const FusedProgram& program, std::size_t k) noexcept;

 protected:
  // ---- the backend's hooks; every tensor passed in is the backend's own ----
  // A tensor viewing base's storage through `view`, refused unless it lies inside that storage.
  virtual Primitive view_on(const StridedTensor& base, strided::View view) = 0;
  // A contiguous copy of x at offset 0, on storage of its own.
  virtual Primitive contiguous_copy(const StridedTensor& x, const char* op) = 0;
  // dst[...] = src[...] for two views of the same shape and dtype, any strides.
  virtual void copy_elements(StridedTensor& dst, const StridedTensor& src, const char* op) = 0;
  // permute (and swap_dims) and slice of a QFloat tensor, which is not a StridedTensor: views of
  // the same blocks where they can be. The base throws UnsupportedDType (a backend that cannot
  // store QFloat never gets one).
  virtual Primitive permute_quantized(Primitive x, Axes axes);
  virtual Primitive slice_quantized(Primitive x, ResolvedSlices slices);
};

}  // namespace kiln

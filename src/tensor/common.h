// Shared checks of the tensor layer: kinds, devices, dtype promotion, dims.
#pragma once

#include "contract/backend.h"
#include "kiln/detail/format.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

namespace kiln::detail {

Kind kind_of(DType dtype) noexcept;

inline Backend& backend_of(const Primitive& p) { return backend_for(p->device()); }

// The device whose backend chain serves operands on a and b (the same hardware): autodiff when
// either is (a tracked operand makes the op tracked), fused when either is. The chain accepts
// the other operand's plainer primitives as constants.
inline Device joined(const Device& a, const Device& b) noexcept {
  Device d = a;
  if (b.is_autodiff()) d = d.autodiff();
  if (b.is_fused()) d = d.fused();
  return d;
}

// The backend that runs a binary op: both operands on the same hardware (DeviceMismatch
// otherwise); the chain of joined().
Backend& backend_of(const Primitive& a, const Primitive& b, const char* op);

// Throws DTypeMismatch unless p's dtype is of one of the allowed kinds. Every op checks its
// tensor operands here, and here is the tensor layer's one rule for quantized tensors: a QFloat
// operand (of the Float kind) is replaced by its values dequantized to f32, so that an op sees
// QFloat only where it reads the blocks themselves (dequantize, the weight of linear and matmul,
// embedding's table, permute, swap_dims and slice, reads and moves), which do not call this on it.
class Requantize;
// requantize (the ops ops.def generates) notes a QFloat p's scheme before p is dequantized.
void check_kind(Primitive& p, bool float_ok, bool int_ok, bool bool_ok, const char* op,
                Requantize* requantize = nullptr);
inline void check_float(Primitive& p, const char* op) { check_kind(p, true, false, false, op); }
inline void check_numeric(Primitive& p, const char* op) { check_kind(p, true, true, false, op); }
inline void check_int(Primitive& p, const char* op) { check_kind(p, false, true, false, op); }
inline void check_bool(Primitive& p, const char* op) { check_kind(p, false, false, true, op); }
// The check of the ops that take every kind (layout, indexing, joins): it only dequantizes.
inline void check_any_kind(Primitive& p, const char* op) { check_kind(p, true, true, true, op); }
// x (QFloat) replaced by its values dequantized to f32 on its device (quantized.cpp).
void dequantize_operand(Primitive& x);
// Device::set_quant_propagation's Requantize for the ops ops.def generates (generated.cpp): the
// scheme of the first QFloat operand whose device asks for results in its blocks, noted before
// the operand is dequantized, and the result encoded in it where it can be (quantized.cpp).
class Requantize {
 public:
  // operand (QFloat): its scheme, unless one was noted already or its device does not ask.
  void note(const Primitive& operand);
  // The op's result, encoded in place where a noted scheme asks for it (the wrappers return it
  // by name, so that it is not moved through a temporary).
  void operator()(Primitive& result) const {
    if (noted_) [[unlikely]]
      encode(result);
  }

 private:
  void encode(Primitive& result) const;
  // Plain values, the scheme's set only once noted: the wrappers stay free of clean-up code and
  // of stores they do not need.
  QuantScheme::Kind kind_;
  std::int64_t block_size_;
  bool noted_ = false;
};

// The float dtype two float dtypes promote to: the wider, or f32 for f16 with bf16.
DType wider_float(DType a, DType b) noexcept;

// Brings a and b to one dtype: the wider of the two when they are of the same kind
// (f16 with bf16 gives f32; signed with unsigned gives i64); DTypeMismatch across kinds.
void promote(Primitive& a, Primitive& b, const char* op);

// The broadcast of two shapes of equal rank, or ShapeMismatch naming op.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);

// For an integer tensor, a scalar must be integral (DTypeMismatch otherwise).
void check_scalar_fits(const Primitive& p, const Scalar& s, const char* op);

// max, min, argmax and their kin have no value over nothing: InvalidArgument naming op when x,
// or its dim, is empty (sum and prod do have one: 0 and 1).
void check_not_empty(const Primitive& x, const char* op);
void check_dim_not_empty(const Primitive& x, std::int64_t dim, const char* op);

// The device's default dtype of kind (fixes the device settings on first use).
DType default_dtype(const Device& device, Kind kind);

// Resolves a Python-style slice against a dim of size n; InvalidArgument for step 0.
ResolvedSlice resolve_slice(const Slice& slice, std::int64_t n, const char* op);

}  // namespace kiln::detail

// Order-preserving keys of the sort kernels: each dtype's bits (as unsigned integers of its
// width) map to an unsigned key whose plain integer order is the CPU backend's order: NaN (either
// sign, any payload) the largest value, -0.0 and +0.0 one key, integers by value. Keys that
// several bit patterns share (the zeros, the NaNs) cannot be decoded to the input's own bits; the
// kernels read those back from the input. The generated topk kernels (topk_source.cpp) encode
// keys the same way.
#pragma once

#include <cstdint>

#include "backends/cuda/lib/keys.h"

namespace kiln::cuda::lib {

template <class U, KeyKind K>
struct KeyCodec {
  static constexpr U kSign = U(U(1) << (8 * sizeof(U) - 1));
  static constexpr bool kFloat = K != KeyKind::Unsigned && K != KeyKind::Signed;
  // The bits of +infinity; a float whose magnitude bits exceed them is a NaN.
  __device__ static constexpr U infinity_bits() {
    if constexpr (K == KeyKind::F16) return U(0x7c00);
    if constexpr (K == KeyKind::BF16) return U(0x7f80);
    if constexpr (K == KeyKind::F32) return U(0x7f800000u);
    if constexpr (K == KeyKind::F64) return U(0x7ff0000000000000ull);
    return U(0);
  }
  static constexpr U kNanKey = U(~U(0));
  static constexpr U kZeroKey = kSign;  // +0.0 (and -0.0) after the float mapping

  __device__ static U encode(U bits, bool descending) {
    U key = bits;
    if constexpr (K == KeyKind::Signed) {
      key = U(bits ^ kSign);
    } else if constexpr (kFloat) {
      const U magnitude = U(bits & U(~kSign));
      if (magnitude > infinity_bits()) {
        key = kNanKey;
      } else if (magnitude == 0) {
        key = kZeroKey;
      } else {
        key = (bits & kSign) ? U(~bits) : U(bits | kSign);
      }
    }
    return descending ? U(~key) : key;
  }

  // The ascending key of a sorted entry; for floats, true when the key stands for several bit
  // patterns and the value must come from the input.
  __device__ static U ascending_key(U key, bool descending) { return descending ? U(~key) : key; }
  __device__ static bool shared_key(U ascending) {
    return kFloat && (ascending == kNanKey || ascending == kZeroKey);
  }
  __device__ static U decode(U ascending) {
    if constexpr (K == KeyKind::Signed) return U(ascending ^ kSign);
    if constexpr (kFloat) return (ascending & kSign) ? U(ascending & U(~kSign)) : U(~ascending);
    return ascending;
  }
};

}  // namespace kiln::cuda::lib

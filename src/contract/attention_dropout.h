// Attention dropout's mask, one definition for every backend and for the composed defaults, so
// a mask is the same on the CPU and on cuda and the backward pass remakes the forward's mask
// from the seed alone (nothing [B, H, Sq, Sk] is stored).
//
// The attention op takes the seed as an I64 tensor of one element (drawn from the device's
// random stream by the tensor layer at each call; a capture redraws it before each replay). With
// key = mix64(seed), weight n of the scores [B, H, Sq, Sk] (n its row-major index over the
// broadcast batch and head dims) is kept when mix64(key ^ n) >> 40 >= threshold: 24 random bits
// against round(p * 2^24). A kept weight is multiplied by 1 / (1 - p) (PyTorch's scaling), so
// the expected output is the undropped one; p = 1 keeps nothing and scales by 0.
#pragma once

#include <cstdint>

#include "contract/random_stream.h"

namespace kiln {

inline constexpr int kAttentionDropoutShift = 40;  // 64 - 24 kept bits

struct AttentionDropout {
  std::uint32_t threshold = 0;  // keep when the 24 bits are >= this; 0 keeps everything
  float scale = 1.0f;           // what a kept weight is multiplied by

  explicit AttentionDropout(double p);
  static std::uint64_t key(std::int64_t seed) noexcept {
    return mix64(static_cast<std::uint64_t>(seed));
  }
  bool keeps(std::uint64_t key, std::uint64_t index) const noexcept {
    return (mix64(key ^ index) >> kAttentionDropoutShift) >= threshold;
  }
};

}  // namespace kiln

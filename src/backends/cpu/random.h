// Counter-based random numbers: value i of a call is a hash of (seed, counter + i), so results
// do not depend on how the work is split across threads, and a seed reproduces a sequence.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "contract/random_stream.h"
#include "kiln/distribution.h"
#include "kiln/dtype.h"

namespace kiln::cpu {

// Uniform on [0, 1) with 53 random bits.
inline double uniform01(std::uint64_t seed, std::uint64_t counter) noexcept {
  return static_cast<double>(mix64(mix64(seed) ^ counter) >> 11) * 0x1.0p-53;
}

// Values [begin, begin + count) of a draw at `at` (value i is the stream's value at.first + i),
// as dtype's elements into out: the random op's numbers, for all of a tensor (the op) or for the
// positions of a piece or tile of a fused group (cpu_fused.cpp), bit for bit the same either way.
// Normal draws two uniforms per value (counters 2c and 2c + 1 of the value's counter c) and
// takes sqrt(-2 log(1 - u1)) cos(2 pi u2) (Box-Muller).
void draw_random(std::byte* out, DType dtype, const Distribution& distribution, RandomStream at,
                 std::int64_t begin, std::int64_t count);

}  // namespace kiln::cpu

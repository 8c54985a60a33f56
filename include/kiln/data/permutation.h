// Seeded permutations, the one source of randomness in kiln::data (shuffled views, random
// splits, per-epoch loader shuffling).
//
//   std::vector<std::size_t> order = data::permutation(10, /*seed=*/42);  // 0..9, shuffled
//
// The permutation is a Fisher-Yates shuffle driven by SplitMix64 with unbiased bounded draws,
// written out here rather than taken from <random>, whose distributions differ between standard
// libraries: the same (n, seed) gives the same order with every compiler and platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::data {

// 0..n-1 in an order drawn uniformly at random from seed.
std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed);

}  // namespace kiln::data

#include "kiln/data/permutation.h"

#include <numeric>

namespace kiln::data {
namespace {

// SplitMix64 (Steele, Lea and Flood, 2014): one add and a few mixes per draw, a full period of
// 2^64, and every seed (0 included) gives a good stream.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound): draws below 2^64 mod bound are rejected, so every residue is equally
  // likely (a bare `next() % bound` favours small values).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const std::uint64_t x = next();
      if (x >= threshold) return x % bound;
    }
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  SplitMix64 rng(seed);
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace kiln::data

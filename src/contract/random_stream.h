// Where a random op draws. The real backends' random numbers are counter-based: value i of a draw
// is a hash of (seed, first + i), first being the device's counter when the draw is made (the
// counter then moves on by the draw's size). So a draw can be reserved at one point of a program
// and computed later, with the numbers it would have had at that point: the fusion decorator
// reserves a recorded random's place when the op is called, in program order, and runs it with
// its group (Backend::reserve_random, DrawRandomAt).
#pragma once

#include <cstdint>
#include <optional>

namespace kiln {

struct RandomStream {
  std::uint64_t seed = 0;
  std::uint64_t first = 0;  // the counter of the draw's value 0

  bool operator==(const RandomStream&) const = default;
};

// The hash behind every random number the backends make (SplitMix64's finaliser): value c of a
// stream with seed s hashes mix64(s) ^ c. CUDA kernels carry the same function (k_mix64,
// kernel_source.cpp), so either device draws the same numbers.
inline std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// While one lives on a thread, the next random op a backend runs on that thread draws at `at`
// instead of taking the next values of the device's stream (a backend whose reserve_random
// answers reads it with take_pinned_random). Scoped: a place not taken is dropped at the end.
//
//   const RandomStream at = *backend.reserve_random(n);   // when the op is called
//   ...
//   DrawRandomAt pin(at);                                  // when its group runs
//   Primitive values = backend.random(shape, distribution, dtype, device);
class DrawRandomAt {
 public:
  explicit DrawRandomAt(RandomStream at) noexcept;
  ~DrawRandomAt();
  DrawRandomAt(const DrawRandomAt&) = delete;
  DrawRandomAt& operator=(const DrawRandomAt&) = delete;

 private:
  std::optional<RandomStream> previous_;
};

// For a backend's random op: the place a DrawRandomAt pinned on this thread (taken: a second
// random op draws from the stream again), or nullopt.
std::optional<RandomStream> take_pinned_random() noexcept;

}  // namespace kiln

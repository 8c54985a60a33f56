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

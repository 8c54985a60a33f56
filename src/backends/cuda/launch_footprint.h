// The device memory a kernel launch reads and writes, as byte ranges: what lets a CUDA graph
// capture run two launches side by side (dispatcher.h, KILN_GRAPH_BRANCHES=1). A stream capture
// records the device's one stream as a chain, each node after the one before; two launches that
// touch no common bytes but for reading both may instead be siblings, after the same nodes, and a
// replay then runs them at once (an optimizer's updates of several parameters, each a small
// kernel whose launch latency a chain pays one after another).
//
// Only launches that can state their footprint exactly carry one (the fused elementwise kernels
// over contiguous operands); any other launch, copy or library call is a barrier that the next
// launch comes after. Ranges are compared by address, so memory freed and handed out again within
// the capture is a conflict like any other.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kiln::cuda {

struct LaunchFootprint {
  struct Range {
    std::uint64_t begin, end;  // [begin, end) in device addresses
    bool write;
  };
  static constexpr std::size_t kMaxRanges = 16;
  // Only the first count are set (a launch makes one of these per call: nothing else is written).
  std::array<Range, kMaxRanges> ranges;
  std::uint8_t count = 0;
  bool overflow = false;  // more ranges than fit: the launch is treated as a barrier

  // The launch reads (write false) or writes `bytes` bytes at address. Empty ranges are dropped.
  void add(std::uint64_t address, std::uint64_t bytes, bool write) noexcept {
    if (bytes == 0) return;
    if (count == kMaxRanges) {
      overflow = true;
      return;
    }
    ranges[count++] = Range{address, address + bytes, write};
  }
  // Whether this footprint says what the launch touches (some range, none left out).
  bool known() const noexcept { return count > 0 && !overflow; }
  // Whether running beside other could change either's result: a byte both touch, one writing.
  bool conflicts(const LaunchFootprint& other) const noexcept {
    for (std::uint8_t i = 0; i < count; ++i) {
      for (std::uint8_t j = 0; j < other.count; ++j) {
        const Range& a = ranges[i];
        const Range& b = other.ranges[j];
        if ((a.write || b.write) && a.begin < b.end && b.begin < a.end) return true;
      }
    }
    return false;
  }
};

// The launches a capture currently runs side by side: each after the same earlier nodes, none
// conflicting with another. A launch joins when it conflicts with no member; otherwise a new
// group starts after all of this one.
class SiblingGroup {
 public:
  bool admits(const LaunchFootprint& footprint) const noexcept {
    if (!footprint.known() || members_.empty()) return false;
    for (const LaunchFootprint& member : members_) {
      if (member.conflicts(footprint)) return false;
    }
    return true;
  }
  void add(const LaunchFootprint& footprint) { members_.push_back(footprint); }
  void clear() noexcept { members_.clear(); }
  std::size_t size() const noexcept { return members_.size(); }

 private:
  std::vector<LaunchFootprint> members_;
};

}  // namespace kiln::cuda

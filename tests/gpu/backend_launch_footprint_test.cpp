// Which captured launches may run side by side (src/backends/cuda/launch_footprint.h): host only.
#include <gtest/gtest.h>

#include "backends/cuda/launch_footprint.h"

namespace kiln::cuda {
namespace {

LaunchFootprint reads_writes(std::uint64_t read_at, std::uint64_t write_at, std::uint64_t bytes) {
  LaunchFootprint f;
  f.add(read_at, bytes, false);
  f.add(write_at, bytes, true);
  return f;
}

TEST(GpuLaunchFootprintHost, ConflictsOnlyWhereAByteIsTouchedByBothAndWrittenByOne) {
  // Two parameter updates: each reads and writes its own parameter, reads its own gradient.
  LaunchFootprint a = reads_writes(0x1000, 0x1000, 256), b = reads_writes(0x2000, 0x2000, 256);
  a.add(0x3000, 256, false);
  b.add(0x3000, 256, false);  // both read one buffer: no conflict
  EXPECT_FALSE(a.conflicts(b));
  EXPECT_FALSE(b.conflicts(a));
  // b writes the last byte a reads.
  LaunchFootprint c = reads_writes(0x5000, 0x1000 + 255, 1);
  EXPECT_TRUE(a.conflicts(c));
  EXPECT_TRUE(c.conflicts(a));
  // Ranges that only touch at an end do not overlap ([begin, end)).
  LaunchFootprint d = reads_writes(0x5000, 0x1000 + 256, 16);
  EXPECT_FALSE(a.conflicts(d));
  // Read against read never conflicts; write against write does.
  LaunchFootprint r1, r2, w1, w2;
  r1.add(0x100, 64, false);
  r2.add(0x100, 64, false);
  w1.add(0x120, 8, true);
  w2.add(0x100, 64, true);
  EXPECT_FALSE(r1.conflicts(r2));
  EXPECT_TRUE(w1.conflicts(w2));
  EXPECT_TRUE(r1.conflicts(w1));
}

TEST(GpuLaunchFootprintHost, EmptyRangesAreDroppedAndTooManyMakeTheFootprintUnknown) {
  LaunchFootprint f;
  EXPECT_FALSE(f.known());
  f.add(0x100, 0, true);
  EXPECT_EQ(f.count, 0);
  EXPECT_FALSE(f.known());
  for (std::size_t i = 0; i < LaunchFootprint::kMaxRanges; ++i) f.add(0x1000 * (i + 1), 8, false);
  EXPECT_TRUE(f.known());
  f.add(0x100000, 8, true);
  EXPECT_TRUE(f.overflow);
  EXPECT_FALSE(f.known());
}

TEST(GpuLaunchFootprintHost, AGroupAdmitsALaunchThatConflictsWithNoMember) {
  SiblingGroup group;
  const LaunchFootprint first = reads_writes(0x1000, 0x1000, 64);
  EXPECT_FALSE(group.admits(first));  // an empty group: the launch starts one
  group.add(first);
  const LaunchFootprint second = reads_writes(0x2000, 0x2000, 64);
  EXPECT_TRUE(group.admits(second));
  group.add(second);
  EXPECT_EQ(group.size(), 2u);
  // Reads what the first member writes (memory handed out again, or a true dependence).
  EXPECT_FALSE(group.admits(reads_writes(0x1000 + 32, 0x9000, 8)));
  // Unknown footprints are never admitted.
  EXPECT_FALSE(group.admits(LaunchFootprint{}));
  group.clear();
  EXPECT_EQ(group.size(), 0u);
  EXPECT_FALSE(group.admits(second));
}

}  // namespace
}  // namespace kiln::cuda

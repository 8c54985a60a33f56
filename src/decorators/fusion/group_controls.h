// Controls for finding the fused group whose result changes a program's output (`kiln
// fusion-bisect`, docs/fusion.md). Groups are numbered 0, 1, 2, ... in the order they run in the
// process, over every fused device, so a deterministic single-threaded program numbers its groups
// the same way in every run, whichever of them run fused. Read from the environment when a fusion
// backend is made:
//
//   KILN_FUSION_LIMIT=N             groups numbered N and above run step by step (run_steps)
//   KILN_FUSION_ONLY=K              group K alone runs fused, every other one step by step
//   KILN_FUSION_DESCRIBE=K|all      group K's (or every group's) program is printed to stderr
//                                   when it runs
//   KILN_FUSION_COUNT_FILE=PATH     the number of groups run is written to PATH at exit
//   KILN_FUSION_FAULT_FOR_TESTS=K   tests only: group K's fused result is made wrong
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiln/primitive.h"

namespace kiln {
class Backend;
struct FusedProgram;
}  // namespace kiln

namespace kiln::fusion {

struct GroupControls {
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
  std::optional<std::uint64_t> only;
  std::optional<std::uint64_t> describe;
  bool describe_all = false;
  std::optional<std::uint64_t> fault;

  // The variables above; a value that is not a non-negative integer is an InvalidArgument naming
  // the variable. Sets up the count file's writer the first time it is seen.
  static GroupControls from_environment();

  bool runs_fused(std::uint64_t group) const noexcept {
    return group < limit && (!only || *only == group);
  }
  bool describes(std::uint64_t group) const noexcept { return describe_all || describe == group; }
};

// The next group's number (a relaxed atomic increment, shared by every fusion backend).
std::uint64_t take_group_number() noexcept;
// Groups numbered so far in this process: the number the next group will take.
std::uint64_t groups_numbered() noexcept;

// The text KILN_FUSION_DESCRIBE prints: a first line naming the group, its structure hash and how
// it runs, the program (describe), and a last line closing the block (fusion-bisect reads it).
std::string describe_group(std::uint64_t group, bool fused, const FusedProgram& program);

// Tests only (KILN_FUSION_FAULT_FOR_TESTS): adds 1 to the first element of the last result, the
// value the group ran for (a bool is flipped), as a wrong fused kernel would, so the checker and
// fusion-bisect can be tested from outside a test binary.
void inject_fault_for_tests(Backend& inner, std::vector<Primitive>& results);

}  // namespace kiln::fusion

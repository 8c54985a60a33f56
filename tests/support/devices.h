// The CPU device most tests run on, defined once: test files compiled in one unity batch (see
// cmake/KilnTestTarget.cmake) name the same object through `using kiln::test::kCpu;`.
#pragma once

#include <kiln/device.h>

namespace kiln::test {

inline const Device kCpu = Device::cpu();

}  // namespace kiln::test

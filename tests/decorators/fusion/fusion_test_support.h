// What the fusion decorator's tests share: the fused CPU device and its unfused twin, the
// decorator behind the fused one, and its count of groups run.
#pragma once

#include <kiln/kiln.h>

#include <cstdint>

#include "decorators/fusion/fusion_backend.h"
#include "runtime/registry.h"

namespace kiln::fusion_test {

inline const Device kFused = Device::cpu().fused();
inline const Device kPlain = Device::cpu();

inline fusion::FusionPassthrough& fusion_backend() {
  return static_cast<fusion::FusionPassthrough&>(backend_for(kFused));
}
// Groups the decorator has handed to the CPU so far.
inline std::uint64_t groups() { return fusion_backend().groups_run(); }

}  // namespace kiln::fusion_test

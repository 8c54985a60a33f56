#pragma once

#include <ostream>

namespace kiln::tools {

// `kiln info`: version, compiled-in backends and their availability, devices with their
// backend chain, and the dtype usage table per device.
int run_info(std::ostream& out);

}  // namespace kiln::tools

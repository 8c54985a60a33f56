#include <cstdlib>

#include "tools/kiln/commands.h"

namespace kiln::tools {

std::filesystem::path shipped_data(const std::filesystem::path& relative) {
  // KILN_DATA_DIR overrides; then the source tree kiln was built from; then the install.
  if (const char* dir = std::getenv("KILN_DATA_DIR"); dir != nullptr && *dir != '\0') {
    return std::filesystem::path(dir) / relative.filename();
  }
  const std::filesystem::path source = std::filesystem::path(KILN_SOURCE_DIR) / relative;
  if (std::filesystem::exists(source)) return source;
  return std::filesystem::path(KILN_INSTALL_DATA_DIR) / relative.filename();
}

}  // namespace kiln::tools

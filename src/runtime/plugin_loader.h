// Loading a plugin library of kiln's (libkiln_cuda.so, libkiln_remote.so) on first use. It is
// looked for in KILN_PLUGIN_DIR when set, else next to libkiln.so (found with dladdr on one of
// kiln's own symbols), then by the loader's search path.
#pragma once

#include <string>

namespace kiln {

// The address of entry_symbol in plugin file, or null with the reason (the file's load error,
// or a missing entry point). The library stays loaded for the life of the process.
void* load_plugin_entry(const char* file, const char* entry_symbol, std::string& reason);

}  // namespace kiln

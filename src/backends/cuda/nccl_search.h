// Where the CUDA plugin looks for NCCL (libnccl.so.2), which kiln never links: the places in
// order, and the first library there that opens and has every symbol kiln calls.
//
//   1. KILN_NCCL=0: none (collectives of cuda tensors go through the host).
//   2. KILN_NCCL_LIBRARY=FILE: that file alone.
//   3. "libnccl.so.2" as the dynamic loader finds it: LD_LIBRARY_PATH, the plugin's RUNPATH, the
//      ld.so cache (a system or toolkit installation registered with ldconfig), /lib, /usr/lib.
//   4. The CUDA toolkit's own directories: $CUDA_HOME/lib64 and $CUDA_HOME/lib, then
//      /usr/local/cuda/lib64 and /usr/local/cuda/lib.
//   5. PyTorch's wheel: nvidia/nccl/lib/libnccl.so.2 under each site-packages directory of the
//      python3 on PATH (asked of python3 itself, once, and only when 1-4 found nothing).
//
// No CUDA here, and every system call goes through System, so a test can replace them
// (tests/distributed/nccl_search_test.cpp): the plugin and that CPU test both compile this file.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kiln::cuda::nccl {

// What the search reads and does.
struct System {
  // The variable's value, or null when it is unset.
  std::function<const char*(const char* name)> environment;
  // A library opened (RTLD_NOW | RTLD_LOCAL), or null with the loader's message in error.
  std::function<void*(const std::string& path, std::string& error)> open;
  // A symbol of an opened library, or null.
  std::function<void*(void* library, const char* name)> symbol;
  std::function<bool(const std::string& path)> exists;
  // The site-packages directories of python3 on PATH; empty with the reason in error when there
  // is no python3 or it fails.
  std::function<std::vector<std::string>(std::string& error)> python_site_packages;

  // The process's own: getenv, dlopen, dlsym, the file system, and python3 through popen.
  static System real();
};

struct Found {
  void* library = nullptr;     // null when no place gave a usable library
  std::string path;            // the library as it was opened
  std::vector<void*> symbols;  // in the order of the names asked for
  // Why nothing was loaded: every place tried, and what each gave.
  std::string reason;
};

// The first usable library in the order above: it opens, every name in symbols resolves, and
// accept (called with the resolved symbols) returns an empty string; otherwise accept's reason
// is noted (the library stays open) and the search goes on.
Found find_library(const System& system, std::span<const char* const> symbols,
                   const std::function<std::string(const std::vector<void*>&)>& accept);

}  // namespace kiln::cuda::nccl

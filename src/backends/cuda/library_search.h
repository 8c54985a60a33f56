// Where the CUDA plugin looks for a library it loads at run time and never links (NCCL for the
// collectives of cuda tensors, cuDNN for convolutions): the places in order, and the first
// library there that opens and has every symbol kiln calls. For NCCL (kNccl) and cuDNN (kCudnn):
//
//   1. KILN_NCCL=0, KILN_CUDNN=0: none (the host's collectives; kiln's own convolutions).
//   2. KILN_NCCL_LIBRARY=FILE, KILN_CUDNN_LIBRARY=FILE: that file alone.
//   3. "libnccl.so.2", "libcudnn.so.9" as the dynamic loader finds it: LD_LIBRARY_PATH, the
//      plugin's RUNPATH, the ld.so cache (a system or toolkit installation registered with
//      ldconfig), /lib, /usr/lib.
//   4. The CUDA toolkit's own directories: $CUDA_HOME/lib64 and $CUDA_HOME/lib, then
//      /usr/local/cuda/lib64 and /usr/local/cuda/lib.
//   5. PyTorch's wheels: nvidia/nccl/lib/libnccl.so.2, nvidia/cudnn/lib/libcudnn.so.9 under each
//      site-packages directory of the python3 on PATH (asked of python3 itself, once per process,
//      and only when 1-4 found nothing).
//
// No CUDA here, and every system call goes through System, so a test can replace them
// (tests/distributed/nccl_search_test.cpp, tests/core/cudnn_search_test.cpp): the plugin and
// those CPU tests all compile this file.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kiln::cuda::search {

// A library the plugin may load, and the words its search uses.
struct Library {
  const char* file;           // the file name the loader is asked for
  const char* name;           // the library's name in reasons
  const char* off_variable;   // "0" turns the library off
  const char* file_variable;  // names the one file to try
  const char* wheel;          // the directory of PyTorch's wheel under site-packages
  const char* advice;         // how to get it: the end of the reason when nothing loads
};

inline constexpr Library kNccl{
    "libnccl.so.2",
    "NCCL",
    "KILN_NCCL",
    "KILN_NCCL_LIBRARY",
    "nvidia/nccl/lib",
    "install NCCL (the nvidia-nccl wheel of PyTorch, or NVIDIA's libnccl2 package) or set "
    "KILN_NCCL_LIBRARY to its libnccl.so.2"};

inline constexpr Library kCudnn{
    "libcudnn.so.9",
    "cuDNN",
    "KILN_CUDNN",
    "KILN_CUDNN_LIBRARY",
    "nvidia/cudnn/lib",
    "install cuDNN 9 (the nvidia-cudnn wheel of PyTorch, or NVIDIA's libcudnn9 package) or set "
    "KILN_CUDNN_LIBRARY to its libcudnn.so.9"};

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

  // The process's own: getenv, dlopen, dlsym, the file system, and python3 through popen (asked
  // once per process: NCCL's and cuDNN's searches share the answer).
  static System real();
};

struct Found {
  void* library = nullptr;     // null when no place gave a usable library
  std::string path;            // the library as it was opened
  std::vector<void*> symbols;  // in the order of the names asked for
  // Why nothing was loaded: every place tried, and what each gave.
  std::string reason;
};

// The file found.library came from as the loader chose it (dladdr of its first symbol), where
// the search asked for the bare file name; found.path when that cannot be told.
std::string opened_path(const Found& found);

// The first usable copy of library in the order above: it opens, every name in symbols
// resolves, and accept (called with the resolved symbols) returns an empty string; otherwise
// accept's reason is noted (the library stays open) and the search goes on.
Found find_library(const Library& library, const System& system,
                   std::span<const char* const> symbols,
                   const std::function<std::string(const std::vector<void*>&)>& accept);

// A library a plugin part loaded once per process from what find_library found: its bound
// functions (Api), or why there are none.
template <class Api>
struct Loaded {
  Api library;
  bool ok = false;
  std::string reason;  // why not, when !ok
};

}  // namespace kiln::cuda::search

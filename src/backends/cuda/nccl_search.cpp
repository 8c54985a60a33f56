#include "backends/cuda/nccl_search.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::cuda::nccl {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";
constexpr const char* kWheelPath = "/nvidia/nccl/lib/libnccl.so.2";

// Every site-packages directory of python3 on PATH, one a line (its own and the user's).
std::vector<std::string> ask_python(std::string& error) {
  const char* command =
      "python3 -c 'import site; print(\"\\n\".join(site.getsitepackages() + "
      "[site.getusersitepackages()]))' 2>/dev/null";
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) {
    error = std::string("python3 could not be started: ") + std::strerror(errno);
    return {};
  }
  std::vector<std::string> directories;
  std::string line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    line += buffer;
    if (line.empty() || line.back() != '\n') continue;
    line.pop_back();
    if (!line.empty()) directories.push_back(line);
    line.clear();
  }
  if (!line.empty()) directories.push_back(line);
  const int status = ::pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The shell's 127: no python3 on PATH.
    error =
        status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127
            ? "there is no python3 on PATH"
            : "python3 could not list its site-packages (status " + std::to_string(status) + ")";
    return {};
  }
  if (directories.empty()) error = "python3 listed no site-packages";
  return directories;
}

// The places of steps 3 and 4 (nccl_search.h), in order.
std::vector<std::string> loader_and_toolkit_places(const System& system) {
  std::vector<std::string> places{kLibrary};
  const char* cuda_home = system.environment("CUDA_HOME");
  for (const char* root : {cuda_home, "/usr/local/cuda"}) {
    if (root == nullptr || *root == '\0') continue;
    for (const char* lib : {"/lib64/", "/lib/"}) {
      const std::string place = root + std::string(lib) + kLibrary;
      if (std::find(places.begin(), places.end(), place) == places.end()) places.push_back(place);
    }
  }
  return places;
}

class Search {
 public:
  Search(const System& system, std::span<const char* const> symbols,
         const std::function<std::string(const std::vector<void*>&)>& accept)
      : system_(system), symbols_(symbols), accept_(accept) {}

  // Tries path: true when it gave the library (found_ holds it), else its outcome is noted.
  bool attempt(const std::string& path) {
    // A file name alone goes to the loader's own search; a path must exist.
    if (path.find('/') != std::string::npos && !system_.exists(path)) {
      note(path + ": no such file");
      return false;
    }
    std::string error;
    void* library = system_.open(path, error);
    if (library == nullptr) {
      note(path + ": " + (error.empty() ? "cannot be opened" : error));
      return false;
    }
    std::vector<void*> resolved;
    for (const char* name : symbols_) {
      void* address = system_.symbol(library, name);
      if (address == nullptr) {
        note(path + ": has no " + name + " (an NCCL too old or not NCCL)");
        return false;
      }
      resolved.push_back(address);
    }
    const std::string refused = accept_(resolved);
    if (!refused.empty()) {
      note(path + ": " + refused);
      return false;
    }
    found_.library = library;
    found_.path = path;
    found_.symbols = std::move(resolved);
    return true;
  }

  void note(const std::string& outcome) { tried_ += (tried_.empty() ? "" : "; ") + outcome; }

  // What was found; else why not: each place's outcome, then advice.
  Found found(const std::string& advice) {
    if (found_.library == nullptr) {
      found_.reason = "no usable " + std::string(kLibrary) + " (" + tried_ + ")" + advice;
    }
    return std::move(found_);
  }

 private:
  const System& system_;
  std::span<const char* const> symbols_;
  const std::function<std::string(const std::vector<void*>&)>& accept_;
  std::string tried_;
  Found found_;
};

}  // namespace

System System::real() {
  System system;
  system.environment = [](const char* name) -> const char* { return std::getenv(name); };
  system.open = [](const std::string& path, std::string& error) -> void* {
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* message = ::dlerror();
      error = message != nullptr ? message : "dlopen failed";
    }
    return library;
  };
  system.symbol = [](void* library, const char* name) { return ::dlsym(library, name); };
  system.exists = [](const std::string& path) {
    struct stat status {};
    return ::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode);
  };
  system.python_site_packages = ask_python;
  return system;
}

Found find_library(const System& system, std::span<const char* const> symbols,
                   const std::function<std::string(const std::vector<void*>&)>& accept) {
  Search search(system, symbols, accept);
  if (const char* off = system.environment("KILN_NCCL");
      off != nullptr && std::strcmp(off, "0") == 0) {
    Found none;
    none.reason = "KILN_NCCL=0 turns NCCL off";
    return none;
  }
  if (const char* chosen = system.environment("KILN_NCCL_LIBRARY");
      chosen != nullptr && *chosen != '\0') {
    search.attempt(chosen);
    return search.found(": KILN_NCCL_LIBRARY names the one file to use");
  }
  for (const std::string& place : loader_and_toolkit_places(system)) {
    if (search.attempt(place)) return search.found("");
  }
  std::string error;
  const std::vector<std::string> directories = system.python_site_packages(error);
  if (directories.empty()) {
    search.note("PyTorch's wheel: " + error);
  } else {
    for (const std::string& directory : directories) {
      if (search.attempt(directory + kWheelPath)) return search.found("");
    }
  }
  return search.found(
      ": install NCCL (the nvidia-nccl wheel of PyTorch, or NVIDIA's libnccl2 package) or set "
      "KILN_NCCL_LIBRARY to its libnccl.so.2");
}

}  // namespace kiln::cuda::nccl

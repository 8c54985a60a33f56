#include "backends/cuda/library_search.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace kiln::cuda::search {
namespace {

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

// The places of steps 3 and 4 (library_search.h), in order.
std::vector<std::string> loader_and_toolkit_places(const Library& library, const System& system) {
  std::vector<std::string> places{library.file};
  const char* cuda_home = system.environment("CUDA_HOME");
  for (const char* root : {cuda_home, "/usr/local/cuda"}) {
    if (root == nullptr || *root == '\0') continue;
    for (const char* lib : {"/lib64/", "/lib/"}) {
      const std::string place = root + std::string(lib) + library.file;
      if (std::find(places.begin(), places.end(), place) == places.end()) places.push_back(place);
    }
  }
  return places;
}

class Search {
 public:
  Search(const Library& library, const System& system, std::span<const char* const> symbols,
         const std::function<std::string(const std::vector<void*>&)>& accept)
      : library_(library), system_(system), symbols_(symbols), accept_(accept) {}

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
        note(path + ": has no " + name + " (" + library_.name + " too old, or not " +
             library_.name + ")");
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
      found_.reason = "no usable " + std::string(library_.file) + " (" + tried_ + ")" + advice;
    }
    return std::move(found_);
  }

 private:
  const Library& library_;
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
  system.python_site_packages = [](std::string& error) {
    // Asked once: both libraries' searches may need it, and python3 takes tens of milliseconds.
    static const auto answer = [] {
      std::pair<std::vector<std::string>, std::string> asked;
      asked.first = ask_python(asked.second);
      return asked;
    }();
    error = answer.second;
    return answer.first;
  };
  return system;
}

std::string opened_path(const Found& found) {
  Dl_info info{};
  if (!found.symbols.empty() && ::dladdr(found.symbols.front(), &info) != 0 &&
      info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return found.path;
}

Found find_library(const Library& library, const System& system,
                   std::span<const char* const> symbols,
                   const std::function<std::string(const std::vector<void*>&)>& accept) {
  Search search(library, system, symbols, accept);
  if (const char* off = system.environment(library.off_variable);
      off != nullptr && std::strcmp(off, "0") == 0) {
    Found none;
    none.reason = std::string(library.off_variable) + "=0 turns " + library.name + " off";
    return none;
  }
  if (const char* chosen = system.environment(library.file_variable);
      chosen != nullptr && *chosen != '\0') {
    search.attempt(chosen);
    return search.found(std::string(": ") + library.file_variable + " names the one file to use");
  }
  for (const std::string& place : loader_and_toolkit_places(library, system)) {
    if (search.attempt(place)) return search.found("");
  }
  std::string error;
  const std::vector<std::string> directories = system.python_site_packages(error);
  if (directories.empty()) {
    search.note("PyTorch's wheel: " + error);
  } else {
    const std::string wheel_path = std::string("/") + library.wheel + "/" + library.file;
    for (const std::string& directory : directories) {
      if (search.attempt(directory + wheel_path)) return search.found("");
    }
  }
  return search.found(std::string(": ") + library.advice);
}

}  // namespace kiln::cuda::search

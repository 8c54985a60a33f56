// A fake of the system calls the CUDA plugin's library search makes
// (src/backends/cuda/library_search.h): files, libraries and variables in maps, every open
// logged in order. Shared by the NCCL and cuDNN search tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/library_search.h"

namespace kiln::test {

struct FakeLibrarySystem {
  std::map<std::string, std::string> variables;
  std::vector<std::string> files;      // exist
  std::vector<std::string> libraries;  // open (they exist too)
  std::vector<std::string> missing;    // "library symbol" pairs that do not resolve
  std::vector<std::string> sites{"/site/a", "/site/b"};
  std::string python_error;         // python3's failure, when not empty
  std::vector<std::string> opened;  // every open, in order
  int python_calls = 0;
  int handles[8] = {};

  cuda::search::System system() {
    cuda::search::System s;
    s.environment = [this](const char* name) -> const char* {
      const auto found = variables.find(name);
      return found == variables.end() ? nullptr : found->second.c_str();
    };
    s.exists = [this](const std::string& path) {
      return contains(files, path) || contains(libraries, path);
    };
    s.open = [this](const std::string& path, std::string& error) -> void* {
      opened.push_back(path);
      for (std::size_t i = 0; i < libraries.size(); ++i) {
        if (libraries[i] == path) return &handles[i];
      }
      error = path + ": cannot open shared object file";
      return nullptr;
    };
    s.symbol = [this](void* library, const char* name) -> void* {
      const std::size_t i = static_cast<std::size_t>(static_cast<int*>(library) - handles);
      if (contains(missing, libraries[i] + " " + name)) return nullptr;
      return &handles[i];
    };
    s.python_site_packages = [this](std::string& error) {
      ++python_calls;
      if (!python_error.empty()) {
        error = python_error;
        return std::vector<std::string>{};
      }
      return sites;
    };
    return s;
  }

  static bool contains(const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  }
};

inline std::string accept_all(const std::vector<void*>&) { return {}; }

// Each of parts appears in text, in this order.
inline void expect_in_order(const std::string& text, const std::vector<std::string>& parts) {
  std::size_t at = 0;
  for (const std::string& part : parts) {
    const std::size_t found = text.find(part, at);
    ASSERT_NE(found, std::string::npos)
        << "missing (or out of order) \"" << part << "\" in " << text;
    at = found + part.size();
  }
}

}  // namespace kiln::test

// The autotune cache as a file of a test's own (never the user's), for tests of what the
// autotuner measures and remembers.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/autotune.h"

namespace kiln::test {

// Points the autotune cache at `name` in the test temp directory, empty at the start; clears it
// and restores the previous path at the end.
class OwnAutotuneCache {
 public:
  explicit OwnAutotuneCache(const std::string& name) : previous_(autotune::cache_path()) {
    autotune::set_cache_path(::testing::TempDir() + name);
    autotune::clear();
  }
  ~OwnAutotuneCache() {
    autotune::clear();
    autotune::set_cache_path(previous_);
  }
  OwnAutotuneCache(const OwnAutotuneCache&) = delete;
  OwnAutotuneCache& operator=(const OwnAutotuneCache&) = delete;

 private:
  std::string previous_;
};

}  // namespace kiln::test

// Helpers for tests that inspect the libraries a process has mapped, and that re-run the test
// binary as a child (a fresh process: nothing loaded by earlier tests).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace kiln::test {

// Whether a file whose path contains fragment is mapped into this process.
inline bool mapped(const std::string& fragment) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(fragment) != std::string::npos) return true;
  }
  return false;
}

// Runs this test binary again with only filter selected and env_assignments ("A=1 B=2") set;
// KILN_TEST_DEVICES is cleared so static test registration touches no device. Returns the
// exit status (0 when every selected test passed).
inline int run_self(const std::string& filter, const std::string& env_assignments) {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  // The child runs its one test whatever shard of a sharded run its parent was.
  const std::string command =
      "env -u KILN_TEST_DEVICES -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX " + env_assignments +
      " '" + std::string(self, static_cast<std::size_t>(n)) + "' --gtest_filter='" + filter +
      "' > /dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kiln::test

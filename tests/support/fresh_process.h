// Tests of process-wide first-use state (device settings, backends made on first use) run their
// body in a fresh process: gtest's "threadsafe" death-test style re-executes the test binary for
// just that test, where no device has been used yet.
//
//   TEST_F(FreshProcess, Something) {
//     KILN_IN_FRESH_PROCESS([] { kiln::test::require(Device::cpu().settings()..., "why"); });
//   }
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

namespace kiln::test {

// In the child: prints what failed and exits 1, so the parent's EXPECT_EXIT shows it.
inline void require(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAILED: " << what << std::endl;
    std::exit(1);
  }
}

template <class E, class F>
void require_throws(F&& f, const std::string& what) {
  try {
    f();
  } catch (const E&) {
    return;
  } catch (const std::exception& error) {
    require(false, what + ": wrong exception " + error.what());
  }
  require(false, what + ": no exception");
}

template <class F>
[[noreturn]] void run_and_exit(F&& body) {
  body();
  std::exit(0);
}

// A fixture for KILN_IN_FRESH_PROCESS: the child is a new exec of the binary, not a fork of this
// process with its threads and devices.
class FreshProcess : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace kiln::test

// Runs the body (a callable; variadic so that a lambda with commas needs no parentheses) in a
// fresh copy of this test binary; passes when the body returns. A sanitizer report at the child's
// exit changes its exit code, so it fails the test too.
#define KILN_IN_FRESH_PROCESS(...) \
  EXPECT_EXIT(::kiln::test::run_and_exit(__VA_ARGS__), ::testing::ExitedWithCode(0), "")

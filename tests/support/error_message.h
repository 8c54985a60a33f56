// Error checks shared by the tests: the message of the kiln error a call throws, and whether it
// starts with "[op] " and names the expected values.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace kiln::test {

// The message of the E that f throws: "no error" when f returns, "another error: ..." when it
// throws something else.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("another error: ") + error.what();
  }
  return "no error";
}

// Runs f, expects E, and checks the message starts with "[op] " and contains every part.
template <class E, class F>
void expect_error(F&& f, const std::string& op, const std::vector<std::string>& parts = {}) {
  const std::string message = message_of<E>(std::forward<F>(f));
  EXPECT_EQ(message.rfind("[" + op + "] ", 0), 0u) << message;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing \"" << part << "\" in " << message;
  }
}

// Runs f, expects E, and checks the message contains every part (whichever op it names).
template <class E, class F>
void expect_error_containing(F&& f, const std::vector<std::string>& parts) {
  const std::string message = message_of<E>(std::forward<F>(f));
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing \"" << part << "\" in " << message;
  }
}

}  // namespace kiln::test

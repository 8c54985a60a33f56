// The ranks of a process group inside the test process (ProcessGroup::threads), one thread each,
// with what each rank threw kept for the test to examine.
#pragma once

#include <gtest/gtest.h>
#include <kiln/process_group.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace kiln::test {

// Runs body(group) for every group, each on a thread of its own; what each threw (null where
// body returned), by rank.
template <class Body>
std::vector<std::exception_ptr> on_ranks(const std::vector<ProcessGroup>& groups, Body body) {
  std::vector<std::exception_ptr> errors(groups.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < groups.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(groups[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return errors;
}

// The message of the E a rank threw: "no error" when it threw nothing, "another error: ..."
// when it threw something else.
template <class E>
std::string rank_error(const std::exception_ptr& error) {
  if (!error) return "no error";
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another error: ") + e.what();
  }
  return "another error";
}

// Every rank threw an E whose message contains each of parts.
template <class E>
void expect_rank_errors(const std::vector<std::exception_ptr>& errors,
                        const std::vector<std::string>& parts) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    const std::string message = rank_error<E>(errors[r]);
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "rank " << r << ": missing \"" << part << "\" in " << message;
    }
  }
}

inline void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    } catch (...) {
      ADD_FAILURE() << "rank " << r << ": an exception that is not a std::exception";
    }
  }
}

}  // namespace kiln::test

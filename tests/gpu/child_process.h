// Child processes for the exit tests: this test binary run again with one test selected and extra
// environment, judged by its status and what it printed; and a forked child that exits.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::test {

struct ChildResult {
  int status = -1;     // the exit code, 128 + the signal that ended it, or -1 (not run, timed out)
  std::string output;  // stdout and stderr together
};

// Runs the test `filter` of this binary with `environment` ("NAME=value", replacing any such
// variable) added to ours, less the sharding variables and KILN_TEST_DEVICES; killed after
// timeout_seconds.
inline ChildResult run_child(const std::string& filter, const std::vector<std::string>& environment,
                             int timeout_seconds = 300) {
  ChildResult result;
  char self[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) return result;
  char log_path[] = "/tmp/kiln-child-XXXXXX";
  const int log = mkstemp(log_path);
  if (log < 0) return result;

  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> variables;
  auto replaced = [&](const std::string& variable) {
    const std::string name = variable.substr(0, variable.find('=') + 1);
    for (const char* dropped :
         {"GTEST_TOTAL_SHARDS=", "GTEST_SHARD_INDEX=", "KILN_TEST_DEVICES="}) {
      if (name == dropped) return true;
    }
    for (const std::string& mine : environment) {
      if (mine.compare(0, name.size(), name) == 0) return true;
    }
    return false;
  };
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (!replaced(*variable)) variables.emplace_back(*variable);
  }
  variables.insert(variables.end(), environment.begin(), environment.end());
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::string filter_argument = "--gtest_filter=" + filter;
  char* argv[] = {self, filter_argument.data(), nullptr};

  const pid_t pid = fork();
  if (pid == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execve(self, argv, envp.data());
    _exit(127);
  }
  close(log);
  if (pid > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    } else if (WIFEXITED(status)) {
      result.status = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      result.status = 128 + WTERMSIG(status);
    }
  }
  std::ifstream in(log_path);
  std::ostringstream text;
  text << in.rdbuf();
  result.output = text.str();
  if (result.status == -1 && pid > 0) result.output += "\n(timed out: killed)";
  std::filesystem::remove(log_path);
  return result;
}

// Forks a child that calls exit(0): every exit hook runs in a process that has only the calling
// thread (fork copies no other). A hang there ends it with SIGALRM after 20 s. Returns whether it
// exited with status 0; `status` receives the wait status.
inline bool forked_child_exits_cleanly(int& status) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    std::exit(0);
  }
  status = -1;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

}  // namespace kiln::test

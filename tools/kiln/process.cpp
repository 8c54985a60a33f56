#include "tools/kiln/process.h"

#include <fcntl.h>
#include <kiln/detail/format.h>
#include <kiln/error.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace kiln::tools {
namespace {

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

}  // namespace

void Descriptor::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Pipe::Pipe(std::string_view op) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    detail::fail<ExecutionError>(op, "cannot make a pipe: ", std::strerror(errno));
  read = Descriptor(fds[0]);
  write = Descriptor(fds[1]);
}

std::vector<std::string> environment_with(std::span<const std::string_view> removed,
                                          const Settings& settings) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (std::find(removed.begin(), removed.end(), name) == removed.end()) env.emplace_back(text);
  }
  for (const auto& [name, value] : settings) env.push_back(name + "=" + value);
  return env;
}

pid_t spawn(const std::vector<std::string>& command, std::vector<std::string> env, int out, int err,
            std::string_view op) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  posix_spawn_file_actions_adddup2(&actions, err, 2);
  std::vector<std::string> args(command.begin(), command.end());
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0].c_str(), &actions, nullptr,
                                     pointers(args).data(), pointers(env).data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    detail::fail<ExecutionError>(op, "cannot run ", command[0], ": ", std::strerror(spawned));
  return pid;
}

int exit_status(int wait_status) noexcept {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

int wait_for(pid_t pid, std::string_view op) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) detail::fail<ExecutionError>(op, "waitpid: ", std::strerror(errno));
  }
  return exit_status(status);
}

}  // namespace kiln::tools

// Starting other programs, for the commands that run them (fusion-bisect, launch): no shell,
// the arguments as given (execvp's search for the program), stdin from /dev/null, each output
// to a descriptor of the caller's.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::tools {

// Closes a descriptor when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) noexcept : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor(Descriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Descriptor() { reset(); }
  int get() const noexcept { return fd_; }
  void reset() noexcept;

 private:
  int fd_;
};

// A pipe whose ends close with it (close-on-exec: a child gets the write end through dup2 only);
// ExecutionError naming op when the system has none to give.
struct Pipe {
  Descriptor read, write;
  explicit Pipe(std::string_view op);
};

using Settings = std::vector<std::pair<std::string, std::string>>;

// This process's environment without the variables named in removed, then settings.
std::vector<std::string> environment_with(std::span<const std::string_view> removed,
                                          const Settings& settings);

// Starts command with env, its stdout on out and its stderr on err; ExecutionError naming op
// when it cannot be started.
pid_t spawn(const std::vector<std::string>& command, std::vector<std::string> env, int out, int err,
            std::string_view op);

// The exit status of pid once it ends (128 + the signal when a signal ended it).
int wait_for(pid_t pid, std::string_view op);
// The same for a status waitpid returned.
int exit_status(int wait_status) noexcept;

}  // namespace kiln::tools

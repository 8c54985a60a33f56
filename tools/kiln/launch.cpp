// `kiln launch --nproc N -- PROGRAM ARGS...`: N processes of PROGRAM on this host, the ranks of
// one process group (kiln/process_group.h), each told its place through the environment:
// KILN_RANK, KILN_LOCAL_RANK, KILN_WORLD_SIZE, and KILN_STORE, a directory made for the run in
// which the ranks meet (removed afterwards); and OMP_NUM_THREADS, the cores shared out among the
// ranks, unless it is set already. Their output comes through line by line, each line
// prefixed with "[rank R] " on the stream it was written to. When a rank fails, the others are
// stopped (SIGTERM) and the launch fails, naming it. PROGRAM `kiln` is this kiln.
#include <kiln/detail/format.h>
#include <kiln/error.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "tools/kiln/commands.h"
#include "tools/kiln/process.h"

namespace kiln::tools {
namespace {

constexpr std::string_view kOp = "launch";

// Variables a rank must not inherit from whatever started the launch (another launch, mpirun).
constexpr std::string_view kReplaced[] = {
    "KILN_RANK",  "KILN_LOCAL_RANK",      "KILN_WORLD_SIZE",
    "KILN_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"};

// The run's rendezvous directory, removed with everything in it when the launch ends.
class StoreDirectory {
 public:
  StoreDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-launch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      detail::fail<ExecutionError>(kOp, "cannot make a directory for the ranks to meet in (",
                                   pattern, "): ", std::strerror(errno));
    }
    path_ = pattern;
  }
  ~StoreDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  StoreDirectory(const StoreDirectory&) = delete;
  StoreDirectory& operator=(const StoreDirectory&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// One output stream of one rank: read through a pipe, written on as whole lines with a prefix.
struct Stream {
  Descriptor read;
  std::ostream* sink = nullptr;
  std::string prefix;
  std::string pending;  // a line not yet ended

  void take(const char* bytes, std::size_t count) {
    pending.append(bytes, count);
    std::size_t start = 0;
    for (std::size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      *sink << prefix << std::string_view(pending).substr(start, end + 1 - start);
    }
    pending.erase(0, start);
    sink->flush();
  }
  void close() {
    if (!pending.empty()) *sink << prefix << pending << '\n' << std::flush;
    pending.clear();
    read.reset();
  }
};

struct Rank {
  pid_t pid = -1;
  bool ended = false;
  int wait_status = 0;  // as waitpid gave it, once ended
};

// The cores this process may run on, shared out among the ranks (at least one each).
std::string threads_per_rank(int ranks) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return std::to_string(std::max(1, cores / ranks));
}

std::string program_path(const std::string& program) {
  if (program != "kiln") return program;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? program : self.string();
}

}  // namespace

int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  if (options.nproc < 1 || options.nproc > 1024) {
    detail::fail<InvalidArgument>(kOp, "--nproc must be between 1 and 1024, got ", options.nproc);
  }
  if (options.command.empty()) detail::fail<InvalidArgument>(kOp, "no program to launch");
  std::vector<std::string> command = options.command;
  command[0] = program_path(command[0]);
  const StoreDirectory store;
  std::vector<Rank> ranks(static_cast<std::size_t>(options.nproc));
  std::vector<Stream> streams;
  auto stop_all = [&] {
    for (const Rank& rank : ranks) {
      if (rank.pid > 0 && !rank.ended) ::kill(rank.pid, SIGTERM);
    }
  };
  for (int r = 0; r < options.nproc; ++r) {
    Pipe out_pipe(kOp), err_pipe(kOp);
    Settings settings{{"KILN_RANK", std::to_string(r)},
                      {"KILN_LOCAL_RANK", std::to_string(r)},
                      {"KILN_WORLD_SIZE", std::to_string(options.nproc)},
                      {"KILN_STORE", store.path()}};
    if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      settings.emplace_back("OMP_NUM_THREADS", threads_per_rank(options.nproc));
    }
    try {
      ranks[static_cast<std::size_t>(r)].pid =
          spawn(command, environment_with(kReplaced, settings), out_pipe.write.get(),
                err_pipe.write.get(), kOp);
    } catch (...) {
      stop_all();
      for (const Rank& rank : ranks) {
        if (rank.pid > 0) wait_for(rank.pid, kOp);
      }
      throw;
    }
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    streams.push_back(Stream{std::move(out_pipe.read), &out, prefix, {}});
    streams.push_back(Stream{std::move(err_pipe.read), &err, prefix, {}});
  }

  // Output as it comes; ranks reaped as they end; the others stopped after the first failure.
  int running = options.nproc;
  int failed = -1;
  std::vector<pollfd> fds(streams.size());
  while (running > 0 || std::any_of(streams.begin(), streams.end(),
                                    [](const Stream& s) { return s.read.get() >= 0; })) {
    for (std::size_t k = 0; k < streams.size(); ++k) fds[k] = {streams[k].read.get(), POLLIN, 0};
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) {
      detail::fail<ExecutionError>(kOp, "poll: ", std::strerror(errno));
    }
    for (std::size_t k = 0; k < streams.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buffer[65536];
      const ssize_t got = ::read(fds[k].fd, buffer, sizeof buffer);
      if (got > 0) {
        streams[k].take(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        streams[k].close();
      }
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      Rank& rank = ranks[r];
      if (rank.ended || ::waitpid(rank.pid, &rank.wait_status, WNOHANG) != rank.pid) continue;
      rank.ended = true;
      --running;
      if (exit_status(rank.wait_status) != 0 && failed < 0) {
        failed = static_cast<int>(r);
        stop_all();
      }
    }
  }
  if (failed >= 0) {
    const int status = ranks[static_cast<std::size_t>(failed)].wait_status;
    const bool signaled = WIFSIGNALED(status);
    detail::fail<ExecutionError>(kOp, "rank ", failed, " of ", options.nproc,
                                 signaled ? " was ended by signal " : " exited with status ",
                                 signaled ? WTERMSIG(status) : WEXITSTATUS(status),
                                 options.nproc > 1 ? "; the other ranks were stopped" : "");
  }
  return 0;
}

}  // namespace kiln::tools

// `kiln fusion-bisect -- CMD ARGS...`: finds the first fused group of a program whose result
// changes the program's output. CMD runs with every group step by step (the reference), fused
// (counting its groups), then with KILN_FUSION_LIMIT=N for a binary search over N; the group
// controls it sets are described in src/decorators/fusion/group_controls.h.
#include <kiln/detail/format.h>
#include <kiln/error.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/kiln/commands.h"
#include "tools/kiln/process.h"

namespace kiln::tools {
namespace {

constexpr std::string_view kOp = "fusion-bisect";

// What CMD did: its exit status (128 + the signal when a signal ended it) and what it printed.
struct Outcome {
  int status = 0;
  std::string out;
  std::string err;
};

// The variables this command sets; any the user's environment has are replaced, so a stray
// KILN_FUSION=0 or KILN_FUSION_LIMIT cannot hide the groups. KILN_FUSION_CHECK and the fault
// for tests pass through.
constexpr std::string_view kControlled[] = {"KILN_FUSION", "KILN_FUSION_LIMIT", "KILN_FUSION_ONLY",
                                            "KILN_FUSION_DESCRIBE", "KILN_FUSION_COUNT_FILE"};

// Runs command (execvp's search, its arguments as given: no shell) with settings added to the
// environment and stdin from /dev/null; both outputs read through pipes until it ends.
Outcome run(const std::vector<std::string>& command, const Settings& settings) {
  Pipe out_pipe(kOp), err_pipe(kOp);
  const pid_t pid = spawn(command, environment_with(kControlled, settings), out_pipe.write.get(),
                          err_pipe.write.get(), kOp);
  out_pipe.write.reset();
  err_pipe.write.reset();
  Outcome outcome;
  pollfd fds[2] = {{out_pipe.read.get(), POLLIN, 0}, {err_pipe.read.get(), POLLIN, 0}};
  std::string* sinks[2] = {&outcome.out, &outcome.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      detail::fail<ExecutionError>(kOp, "poll: ", std::strerror(errno));
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buffer[65536];
      const ssize_t got = ::read(fds[k].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[k]->append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[k].fd = -1;  // poll skips negative descriptors
        --open_pipes;
      }
    }
  }
  outcome.status = wait_for(pid, kOp);
  return outcome;
}

// ---- comparing outputs: numbers within a relative tolerance, all other text exactly ----

struct Token {
  bool number = false;
  std::string_view text;
  double value = 0;
};

// The length of a decimal number at the start of s ([-+]digits[.digits][e[-+]digits] or
// [-+].digits...), or 0.
std::size_t number_length(std::string_view s) {
  std::size_t i = 0;
  auto digits = [&] {
    const std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  std::size_t mantissa = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const std::size_t mark = i++;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (digits() == 0) i = mark;
  }
  return i;
}

std::vector<Token> tokens(std::string_view text) {
  std::vector<Token> result;
  std::size_t plain = 0;  // start of the text run being gathered
  for (std::size_t i = 0; i < text.size();) {
    // A sign or digit glued to a word or a dot ("v3", "x-1", "v1.2") is text: only free-standing
    // numbers count.
    const char before = i > 0 ? text[i - 1] : ' ';
    const bool after_word =
        std::isalnum(static_cast<unsigned char>(before)) || before == '_' || before == '.';
    const std::size_t length = after_word ? 0 : number_length(text.substr(i));
    if (length == 0) {
      ++i;
      continue;
    }
    if (plain < i) result.push_back({false, text.substr(plain, i - plain)});
    const std::string number(text.substr(i, length));
    result.push_back({true, text.substr(i, length), std::strtod(number.c_str(), nullptr)});
    i += length;
    plain = i;
  }
  if (plain < text.size()) result.push_back({false, text.substr(plain)});
  return result;
}

bool same_line(std::string_view a, std::string_view b, double tolerance) {
  if (a == b) return true;
  const std::vector<Token> x = tokens(a), y = tokens(b);
  if (x.size() != y.size()) return false;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (x[k].number != y[k].number) return false;
    if (!x[k].number) {
      if (x[k].text != y[k].text) return false;
      continue;
    }
    const double p = x[k].value, q = y[k].value;
    if (p != q && !(std::abs(p - q) <= tolerance * std::max(std::abs(p), std::abs(q))))
      return false;
  }
  return true;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> result;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    result.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return result;
}

// The first difference between two outcomes, as one line; empty when they are the same.
std::string difference(const Outcome& reference, const Outcome& other, double tolerance) {
  const std::vector<std::string_view> a = lines(reference.out), b = lines(other.out);
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string_view x = i < a.size() ? a[i] : "(no line)";
    const std::string_view y = i < b.size() ? b[i] : "(no line)";
    if (i >= a.size() || i >= b.size() || !same_line(x, y, tolerance)) {
      return detail::concat("line ", i + 1, ": \"", x, "\" became \"", y, "\"");
    }
  }
  if (reference.status != other.status) {
    return detail::concat("exit status ", reference.status, " became ", other.status);
  }
  return {};
}

// The last line CMD printed on stderr, to say why it failed.
std::string last_error_line(const Outcome& outcome) {
  const std::vector<std::string_view> err = lines(outcome.err);
  return err.empty() ? std::string("(nothing on stderr)") : std::string(err.back());
}

// The block KILN_FUSION_DESCRIBE printed (group_controls.cpp: between its two marker lines).
std::string described(const std::string& err, std::uint64_t group) {
  const std::string first = detail::concat("kiln fusion: group #", group, " ");
  const std::string last = detail::concat("kiln fusion: end of group #", group, "\n");
  const std::size_t begin = err.find(first);
  const std::size_t end = err.find(last, begin == std::string::npos ? 0 : begin);
  if (begin == std::string::npos || end == std::string::npos) return {};
  return err.substr(begin, end + last.size() - begin);
}

class CountFile {
 public:
  CountFile() {
    const char* directory = std::getenv("TMPDIR");
    path_ = std::string(directory != nullptr && *directory != '\0' ? directory : "/tmp") +
            "/kiln_fusion_count.XXXXXX";
    const int fd = ::mkstemp(path_.data());
    if (fd < 0)
      detail::fail<ExecutionError>(kOp, "cannot make a temporary file: ", std::strerror(errno));
    ::close(fd);
    std::remove(path_.c_str());  // the run writes it at exit; absent: it did not
  }
  CountFile(const CountFile&) = delete;
  CountFile& operator=(const CountFile&) = delete;
  ~CountFile() { std::remove(path_.c_str()); }
  const std::string& path() const noexcept { return path_; }
  std::optional<std::uint64_t> read() const {
    std::ifstream in(path_);
    std::uint64_t count = 0;
    if (in >> count) return count;
    return std::nullopt;
  }

 private:
  std::string path_;
};

}  // namespace

int run_fusion_bisect(const FusionBisectOptions& options, std::ostream& out) {
  if (options.command.empty()) detail::fail<InvalidArgument>(kOp, "no command given after --");
  if (!(options.tolerance >= 0)) {
    detail::fail<InvalidArgument>(kOp, "--tolerance must be at least 0, got ", options.tolerance);
  }
  const double tolerance = options.tolerance;
  const std::vector<std::string>& command = options.command;
  auto limited = [&](std::uint64_t limit) {
    return run(command, {{"KILN_FUSION_LIMIT", std::to_string(limit)}});
  };

  // The reference: the fusion decorator on, but every group run step by step, so that only the
  // fused kernels differ (not the device's name in the output, "cpu (fused)"). Twice, so that a
  // program whose output varies is not bisected.
  const Outcome reference = limited(0);
  if (reference.status != 0) {
    detail::fail<ExecutionError>(kOp, command[0],
                                 " failed with every group step by step (exit status ",
                                 reference.status, "): ", last_error_line(reference));
  }
  if (const std::string change = difference(reference, limited(0), tolerance); !change.empty()) {
    detail::fail<ExecutionError>(kOp, command[0], " is not deterministic: two runs differ at ",
                                 change);
  }

  const CountFile count_file;
  const Outcome fused = run(command, {{"KILN_FUSION_COUNT_FILE", count_file.path()}});
  const std::optional<std::uint64_t> count = count_file.read();
  const std::string change = difference(reference, fused, tolerance);
  if (change.empty()) {
    out << "no fused group changes the output";
    if (count) out << " (" << *count << " groups ran fused)";
    out << "\n";
    return 0;
  }
  out << "fused, the output changes at " << change << "\n";

  // good: the first `good` groups fused give the reference; bad: the first `bad` do not.
  std::uint64_t good = 0;
  std::uint64_t bad = 0;
  if (count) {
    bad = *count;
  } else {
    // No count (the run ended without exit: a crash, _exit): limits that double find a bad one.
    out << "the fused run wrote no group count (it made no fused device, or ended without exit); "
           "searching upwards\n";
    for (std::uint64_t limit = 1;; limit *= 2) {
      if (limit > (std::uint64_t{1} << 40))
        detail::fail<ExecutionError>(kOp, "no limit on fused groups reproduces the change");
      const bool changed = !difference(reference, limited(limit), tolerance).empty();
      out << "KILN_FUSION_LIMIT=" << limit << ": " << (changed ? "changed" : "same") << "\n";
      if (changed) {
        bad = limit;
        break;
      }
      good = limit;
    }
  }
  if (bad == 0) {
    detail::fail<ExecutionError>(kOp, "the fused run changed the output but ran no group; is ",
                                 command[0], " deterministic?");
  }
  while (bad - good > 1) {
    const std::uint64_t limit = good + (bad - good) / 2;
    const bool changed = !difference(reference, limited(limit), tolerance).empty();
    out << "KILN_FUSION_LIMIT=" << limit << ": " << (changed ? "changed" : "same") << "\n";
    (changed ? bad : good) = limit;
  }
  const std::uint64_t culprit = good;

  // Confirmed alone, and described as it ran.
  const Outcome alone = run(command, {{"KILN_FUSION_ONLY", std::to_string(culprit)},
                                      {"KILN_FUSION_DESCRIBE", std::to_string(culprit)}});
  const std::string alone_change = difference(reference, alone, tolerance);
  out << "first fused group that changes the output: #" << culprit << "\n";
  if (!alone_change.empty()) {
    out << "fused alone (KILN_FUSION_ONLY=" << culprit << "), it changes the output at "
        << alone_change << "\n";
  } else {
    out << "fused alone (KILN_FUSION_ONLY=" << culprit
        << "), it does not change the output: only after the groups before it ran fused\n";
  }
  const std::string description = described(alone.err, culprit);
  out << (description.empty() ? "(the group printed no description)\n" : description);
  return 1;
}

}  // namespace kiln::tools

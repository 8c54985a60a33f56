// Progress of a training or validation pass: a live bar on a terminal (step of total, loss,
// samples per second, ETA), plain periodic lines when the output is a file or a pipe.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace kiln::train {

class Progress {
 public:
  enum class Style { Auto, Bar, Lines, Quiet };
  using Clock = std::chrono::steady_clock;

  // label: e.g. "epoch 3/10 train"; total: steps in the pass (0 if unknown).
  Progress(std::ostream& out, std::string label, std::int64_t total, Style style = Style::Auto,
           double line_interval_seconds = 5.0);

  // After a step of `samples` items; `loss` is the running mean loss.
  void update(std::int64_t samples, double loss);
  // Ends the pass with a summary line.
  void finish(const std::string& summary);

  // The text shown for the current state (exposed for tests).
  std::string status_text() const;
  Style style() const noexcept { return style_; }

  // Whether the stream is a terminal (std::cout/std::cerr onto a tty).
  static bool is_terminal(const std::ostream& out);
  // "1:02:03", "02:03" style durations.
  static std::string format_duration(double seconds);

 private:
  double elapsed() const;

  std::ostream& out_;
  std::string label_;
  std::int64_t total_;
  Style style_;
  double line_interval_;
  Clock::time_point start_;
  double last_line_ = 0.0;
  std::int64_t step_ = 0;
  std::int64_t samples_ = 0;
  double loss_ = 0.0;
};

}  // namespace kiln::train

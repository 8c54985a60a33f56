#include "kiln/train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace kiln::train {

bool Progress::is_terminal(const std::ostream& out) {
  if (&out == &std::cout) return isatty(STDOUT_FILENO) == 1;
  if (&out == &std::cerr || &out == &std::clog) return isatty(STDERR_FILENO) == 1;
  return false;
}

std::string Progress::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  auto total = static_cast<std::int64_t>(std::llround(seconds));
  const std::int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char text[32];
  if (h > 0) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(text, sizeof text, "%02lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(s));
  }
  return text;
}

Progress::Progress(std::ostream& out, std::string label, std::int64_t total, Style style,
                   double line_interval_seconds)
    : out_(out),
      label_(std::move(label)),
      total_(total),
      style_(style == Style::Auto ? (is_terminal(out) ? Style::Bar : Style::Lines) : style),
      line_interval_(line_interval_seconds),
      start_(Clock::now()) {}

double Progress::elapsed() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string Progress::status_text() const {
  const double seconds = elapsed();
  const double rate = seconds > 0 ? static_cast<double>(samples_) / seconds : 0.0;
  std::ostringstream text;
  text << label_ << " ";
  if (style_ == Style::Bar && total_ > 0) {
    const int width = 24;
    const int filled = static_cast<int>(width * step_ / total_);
    text << "[" << std::string(filled, '=') << (filled < width ? ">" : "")
         << std::string(width - filled - (filled < width ? 1 : 0), ' ') << "] ";
  }
  text << step_;
  if (total_ > 0) text << "/" << total_;
  text << std::fixed << std::setprecision(4) << " loss " << loss_ << std::setprecision(0) << " "
       << rate << " samples/s";
  if (total_ > 0 && step_ > 0) {
    const double remaining =
        seconds / static_cast<double>(step_) * static_cast<double>(total_ - step_);
    text << " ETA " << format_duration(remaining);
  }
  return text.str();
}

void Progress::update(std::int64_t samples, double loss) {
  ++step_;
  samples_ += samples;
  loss_ = loss;
  switch (style_) {
    case Style::Bar:
      out_ << "\r" << status_text() << "\x1b[K" << std::flush;
      break;
    case Style::Lines: {
      const double now = elapsed();
      if (now - last_line_ >= line_interval_) {
        last_line_ = now;
        out_ << status_text() << "\n" << std::flush;
      }
      break;
    }
    case Style::Quiet:
    case Style::Auto:
      break;
  }
}

void Progress::finish(const std::string& summary) {
  if (style_ == Style::Quiet) return;
  if (style_ == Style::Bar) out_ << "\r\x1b[K";
  out_ << label_ << " " << summary << " (" << format_duration(elapsed()) << ")\n" << std::flush;
}

}  // namespace kiln::train

#include "kiln/train/history.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/atomic_file.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::train {
namespace {

constexpr const char* kHeader =
    "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,learning_rate,seconds";

// The shortest text that reads back as exactly v, so a resumed run's log equals the original.
std::string cell(double v) {
  if (std::isnan(v)) return "";
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  return std::string(text, end);
}

double parse_cell(const std::string& text, const std::filesystem::path& path, int line) {
  if (text.empty()) return kNotMeasured;
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  detail::fail<InvalidArgument>("History::read_csv", path.string(), ":", line, ": '", text,
                                "' is not a number");
}

// An epoch number: a whole number from 1 (a cast of any double would be undefined past int).
int parse_epoch(const std::string& text, const std::filesystem::path& path, int line) {
  int epoch = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), epoch);
  if (error != std::errc() || end != text.data() + text.size() || epoch < 1) {
    detail::fail<InvalidArgument>("History::read_csv", path.string(), ":", line, ": '", text,
                                  "' is not an epoch number (a whole number from 1)");
  }
  return epoch;
}

// One chart panel: series of (epoch, value) lines inside a box at (x0, y0) of size w x h.
struct Series {
  std::string name;
  std::string colour;
  std::vector<std::pair<double, double>> points;
};

void panel(std::ostringstream& svg, double x0, double y0, double w, double h,
           const std::string& title, const std::vector<Series>& series, bool unit_range) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  double max_epoch = 1;
  for (const Series& s : series) {
    for (auto [e, v] : s.points) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      max_epoch = std::max(max_epoch, e);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (unit_range) lo = std::min(lo, 1.0), hi = 1.0;
  if (hi - lo < 1e-12) hi = lo + 1;
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += unit_range ? 0 : pad;
  const double left = x0 + 56, right = x0 + w - 12, top = y0 + 28, bottom = y0 + h - 36;
  auto px = [&](double e) {
    return left + (max_epoch <= 1 ? 0.5 : (e - 1) / (max_epoch - 1)) * (right - left);
  };
  auto py = [&](double v) { return bottom - (v - lo) / (hi - lo) * (bottom - top); };

  svg << std::fixed << std::setprecision(1);
  svg << "<text x='" << (left + right) / 2 << "' y='" << y0 + 18
      << "' text-anchor='middle' font-weight='bold'>" << title << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << right - left << "' height='"
      << bottom - top << "' fill='none' stroke='#888'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4.0;
    svg << "<line x1='" << left << "' x2='" << right << "' y1='" << py(v) << "' y2='" << py(v)
        << "' stroke='#ddd'/>\n";
    svg << "<text x='" << left - 6 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='11'>"
        << std::setprecision(3) << v << std::setprecision(1) << "</text>\n";
  }
  const int epochs = static_cast<int>(max_epoch);
  const int step = std::max(1, epochs / 8);
  for (int e = 1; e <= epochs; e += step) {
    svg << "<text x='" << px(e) << "' y='" << bottom + 16
        << "' text-anchor='middle' font-size='11'>" << e << "</text>\n";
  }
  svg << "<text x='" << (left + right) / 2 << "' y='" << bottom + 32
      << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  double legend_y = top + 14;
  for (const Series& s : series) {
    if (s.points.empty()) continue;
    svg << "<polyline fill='none' stroke='" << s.colour << "' stroke-width='2' points='";
    for (auto [e, v] : s.points) svg << px(e) << "," << py(v) << " ";
    svg << "'/>\n";
    for (auto [e, v] : s.points) {
      svg << "<circle cx='" << px(e) << "' cy='" << py(v) << "' r='2.5' fill='" << s.colour
          << "'/>\n";
    }
    svg << "<text x='" << right - 8 << "' y='" << legend_y
        << "' text-anchor='end' font-size='12' fill='" << s.colour << "'>" << s.name << "</text>\n";
    legend_y += 16;
  }
}

}  // namespace

void History::truncate(int epoch) {
  std::erase_if(records_, [&](const EpochRecord& r) { return r.epoch > epoch; });
}

void History::write_csv(const std::filesystem::path& path) const {
  std::ostringstream out;
  out << kHeader << "\n";
  for (const EpochRecord& r : records_) {
    out << r.epoch << "," << cell(r.train_loss) << "," << cell(r.train_accuracy) << ","
        << cell(r.valid_loss) << "," << cell(r.valid_accuracy) << "," << cell(r.learning_rate)
        << "," << cell(r.seconds) << "\n";
  }
  kiln::detail::write_file_atomically(path, out.str(), "History::write_csv");
}

History History::read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) detail::fail<InvalidArgument>("History::read_csv", "cannot open ", path.string());
  History history;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) {
      if (line != kHeader) {
        detail::fail<InvalidArgument>("History::read_csv", path.string(),
                                      ":1: not a kiln training log (header '", line, "')");
      }
      continue;
    }
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) cells.push_back(field);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    if (cells.size() != 7) {
      detail::fail<InvalidArgument>("History::read_csv", path.string(), ":", number, ": ",
                                    cells.size(), " fields, expected 7");
    }
    EpochRecord r;
    r.epoch = parse_epoch(cells[0], path, number);
    r.train_loss = parse_cell(cells[1], path, number);
    r.train_accuracy = parse_cell(cells[2], path, number);
    r.valid_loss = parse_cell(cells[3], path, number);
    r.valid_accuracy = parse_cell(cells[4], path, number);
    r.learning_rate = parse_cell(cells[5], path, number);
    r.seconds = parse_cell(cells[6], path, number);
    history.add(r);
  }
  return history;
}

std::string History::svg() const {
  auto series = [&](const char* name, const char* colour, double EpochRecord::*field) {
    Series s{name, colour, {}};
    for (const EpochRecord& r : records_) {
      if (!std::isnan(r.*field)) s.points.emplace_back(r.epoch, r.*field);
    }
    return s;
  };
  std::ostringstream svg;
  const double width = 900, height = 340;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  panel(svg, 0, 0, width / 2, height, "loss",
        {series("train", "#1f77b4", &EpochRecord::train_loss),
         series("valid", "#d62728", &EpochRecord::valid_loss)},
        false);
  panel(svg, width / 2, 0, width / 2, height, "accuracy",
        {series("train", "#1f77b4", &EpochRecord::train_accuracy),
         series("valid", "#d62728", &EpochRecord::valid_accuracy)},
        true);
  svg << "</svg>\n";
  return svg.str();
}

void History::write_svg(const std::filesystem::path& path) const {
  kiln::detail::write_file_atomically(path, svg(), "History::write_svg");
}

}  // namespace kiln::train

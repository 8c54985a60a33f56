#include <iomanip>

#include "runtime/autotune.h"
#include "tools/kiln/commands.h"

namespace kiln::tools {

int run_tune(const std::string& action, std::ostream& out) {
  const std::string path = autotune::cache_path();
  if (action == "clear") {
    const std::size_t count = autotune::entries().size();
    autotune::clear();
    out << "forgot " << count << (count == 1 ? " choice" : " choices")
        << (path.empty() ? "" : " (" + path + ")") << "\n";
    return 0;
  }
  const std::vector<autotune::Choice> choices = autotune::entries();
  out << "autotune cache: " << (path.empty() ? "none (no XDG_CACHE_HOME or HOME)" : path)
      << (autotune::enabled() ? "" : " (KILN_AUTOTUNE=0: not used)") << "\n"
      << choices.size() << (choices.size() == 1 ? " choice" : " choices") << "\n";
  for (const autotune::Choice& c : choices) {
    const bool heuristic = c.chosen_us >= c.heuristic_us;
    out << c.key << "\n  " << (heuristic ? "the heuristic's choice" : "measured faster") << ": "
        << std::fixed << std::setprecision(1) << c.chosen_us << " us (heuristic " << c.heuristic_us
        << " us)  " << c.choice.substr(0, 32) << (c.choice.size() > 32 ? "..." : "") << "\n";
  }
  return 0;
}

}  // namespace kiln::tools

// The kiln command line: `kiln info` (more commands arrive with their issues).
#include <kiln/kiln.h>

#include <cstring>
#include <iostream>

#include "tools/kiln/commands.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::cout << "usage: kiln <command>\n\ncommands:\n  info    version, backends, devices and dtype support\n";
    return argc < 2 ? 1 : 0;
  }
  try {
    if (std::strcmp(argv[1], "info") == 0) return kiln::tools::run_info(std::cout);
    std::cerr << "kiln: unknown command '" << argv[1] << "'\n";
    return 2;
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  }
}

// `kiln serve`: the remote backend's server (src/remote/server.h) on one device.
#include <kiln/kiln.h>

#include <fstream>
#include <iostream>

#include "tools/kiln/commands.h"

#ifdef KILN_HAVE_REMOTE_SERVER
#include "remote/server.h"
#endif

namespace kiln::tools {
#ifdef KILN_HAVE_REMOTE_SERVER
namespace {

std::string read_token(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw InvalidArgument("[kiln serve] cannot read the token file " + path.string() +
                          ": the server does not start without a token");
  }
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    throw InvalidArgument("[kiln serve] the token file " + path.string() +
                          " is empty: the server does not start without a token");
  }
  return token;
}

}  // namespace

int run_serve(const ServeOptions& options, std::ostream& out) {
  remote::ServerOptions server_options;
  server_options.host = options.host;
  server_options.port = static_cast<std::uint16_t>(options.port);
  server_options.device = Device::parse(options.device).without_fusion();
  server_options.token = read_token(options.token_file);
  server_options.limits.max_session_bytes = options.max_session_bytes;
  server_options.log = [&out](const std::string& line) { out << line << std::endl; };
  remote::Server server(std::move(server_options));
  server.run();
  return 0;
}
#else
int run_serve(const ServeOptions&, std::ostream&) {
  throw NotCompiled(
      "[kiln serve] kiln was built without the remote backend (KILN_REMOTE=OFF or a static build)");
}
#endif

}  // namespace kiln::tools

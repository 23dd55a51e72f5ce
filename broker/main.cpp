// switchyard-server: flags and config file, then the server's event loop.
// Exit codes: 0 after a clean stop (SIGINT/SIGTERM), 1 on a start-up error,
// 2 on bad flags or config.

#include "broker/server.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  using namespace switchyard::broker;
  server_config cfg;
  try {
    cfg = parse_server_args(argc, argv);
  } catch (const cli_exit& e) {
    std::fputs(e.output.c_str(), e.code == 0 ? stdout : stderr);
    return e.code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-server: %s\n", e.what());
    return 2;
  }
  try {
    server srv(cfg);
    srv.handle_signals();
    srv.start();
    srv.run();
    spdlog::get("broker")->info("stopped");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-server: %s\n", e.what());
    return 1;
  }
}

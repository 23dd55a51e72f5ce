// switchyard-gateway: flags and config file, then the gateway's io loop.
// SIGHUP reads the command line and the config file again and applies the
// reloadable settings (the flag ramp, the log level).
// Exit codes: 0 after a stop (SIGINT) or a finished drain (SIGTERM, SIGUSR2),
// 1 on a start-up error (the broker unreachable, the port taken, a key file
// unreadable), 2 on bad flags or config.

#include "gateway/gateway_server.hpp"
#include "gateway/gateway_settings.hpp"

#include "common/asio.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <thread>

int main(int argc, char** argv) {
  using namespace switchyard::edge;
  gateway_config cfg;
  try {
    cfg = parse_gateway_args(argc, argv);
  } catch (const gateway_cli_exit& e) {
    std::fputs(e.text.c_str(), e.code == 0 ? stdout : stderr);
    return e.code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-gateway: %s\n", e.what());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%n] [%l] %v");

  // Signals on a thread of their own: SIGTERM and SIGUSR2 drain, SIGINT
  // stops at once.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR2, SIGHUP}) sigaddset(&mask, s);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);  // before any thread starts: they all inherit it
  try {
    gateway_server server(std::move(cfg));
    std::atomic<bool> done{false};
    std::thread signals([&server, &done, mask, argc, argv] {
      for (;;) {
        int sig = 0;
        if (sigwait(&mask, &sig) != 0) continue;
        if (done) return;  // run() returned: the server is going away
        if (sig == SIGHUP) {
          try {
            server.reload(parse_gateway_args(argc, argv));
          } catch (const gateway_cli_exit& e) {
            spdlog::get("gateway")->error("reload refused: {}", e.text);
          } catch (const std::exception& e) {
            spdlog::get("gateway")->error("reload refused: {}", e.what());
          }
        } else if (sig == SIGINT) {
          server.stop();  // also ends a drain under way
        } else {
          server.drain();
        }
      }
    });
    server.run();
    done = true;
    pthread_kill(signals.native_handle(), SIGUSR2);  // wakes sigwait: the thread sees done and ends
    signals.join();
    spdlog::get("gateway")->info("stopped");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-gateway: %s\n", e.what());
    return 1;
  }
  return 0;
}

// End to end: the switchyard-server binary itself: flags, signals, exit codes.

#include "bench/server_process.hpp"
#include "switchyard/client.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

using namespace switchyard;
using bench::server_process;
using test::wait_until;

namespace {

server_process start_server() {
  auto s = server_process::start(SWITCHYARD_SERVER_BINARY, {}, std::chrono::seconds(10));
  if (!s) FAIL(s.error());
  return std::move(*s);
}

// Runs a shell command; returns its exit status and stdout.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

void check_clean_stop(int sig) {
  auto server = start_server();
  std::atomic<bool> fired{false};
  std::mutex mu;
  std::error_code reason;
  auto c = client::connect({.port = server.port(), .on_disconnect = [&](std::error_code ec) {
                              std::lock_guard lock(mu);
                              reason = ec;
                              fired = true;
                            }});
  REQUIRE(c);
  const auto code = server.signal_and_wait(sig, std::chrono::seconds(10));
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  REQUIRE(wait_until([&] { return fired.load(); }));
  std::lock_guard lock(mu);
  CHECK(reason == errc::shutting_down);
}

}  // namespace

TEST_CASE("SIGTERM stops the server cleanly with exit code 0", "[e2e][broker]") { check_clean_stop(SIGTERM); }

TEST_CASE("SIGINT stops the server cleanly with exit code 0", "[e2e][broker]") { check_clean_stop(SIGINT); }

TEST_CASE("switchyard-server --help describes every flag and exits 0", "[e2e][broker]") {
  const auto [status, out] = run(std::string(SWITCHYARD_SERVER_BINARY) + " --help");
  CHECK(status == 0);
  for (const char* flag : {"--listen", "--data-dir", "--max-frame", "--max-connections", "--hello-timeout-ms",
                           "--heartbeat-ms", "--max-pending-bytes", "--slow-consumer", "--log-level", "--config"})
    CHECK(out.find(flag) != std::string::npos);
}

TEST_CASE("switchyard-server refuses bad flags with exit code 2", "[e2e][broker]") {
  CHECK(run(std::string(SWITCHYARD_SERVER_BINARY) + " --max-frame 10 2>/dev/null").first == 2);
  CHECK(run(std::string(SWITCHYARD_SERVER_BINARY) + " --no-such-flag 2>/dev/null").first == 2);
  CHECK(run(std::string(SWITCHYARD_SERVER_BINARY) + " --listen nowhere 2>/dev/null").first == 2);
}

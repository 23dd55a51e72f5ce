// End to end: the switchyard-server binary itself: flags, signals, exit codes.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include <string>

using namespace switchyard;
using test::disconnect_probe;
using test::run_for_exit_code;
using test::start_server_process;
using test::wait_until;

namespace {

void check_clean_stop(int sig) {
  auto server = start_server_process();
  disconnect_probe probe;
  auto c = client::connect({.port = server.port(), .on_disconnect = probe.callback()});
  REQUIRE(c);
  const auto code = server.signal_and_wait(sig, std::chrono::seconds(10));
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  REQUIRE(wait_until([&] { return probe.fired.load(); }));
  CHECK(probe.get() == errc::shutting_down);
}

}  // namespace

TEST_CASE("SIGTERM stops the server cleanly with exit code 0", "[e2e][broker]") { check_clean_stop(SIGTERM); }

TEST_CASE("SIGINT stops the server cleanly with exit code 0", "[e2e][broker]") { check_clean_stop(SIGINT); }

TEST_CASE("switchyard-server --help describes every flag and exits 0", "[e2e][broker]") {
  const auto [status, out] = run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --help");
  CHECK(status == 0);
  for (const char* flag : {"--listen", "--data-dir", "--max-frame", "--max-connections", "--hello-timeout-ms",
                           "--heartbeat-ms", "--max-pending-bytes", "--slow-consumer", "--log-level", "--config"})
    CHECK(out.find(flag) != std::string::npos);
}

TEST_CASE("switchyard-server refuses bad flags with exit code 2", "[e2e][broker]") {
  CHECK(run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --max-frame 10 2>/dev/null").first == 2);
  CHECK(run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --no-such-flag 2>/dev/null").first == 2);
  CHECK(run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --listen nowhere 2>/dev/null").first == 2);
}

TEST_CASE("switchyard-server names a bad listen host and a port-file that is a directory, and leaves no stray file",
          "[e2e][broker]") {
  const std::string bin = SWITCHYARD_SERVER_BINARY;
  auto [code, out] = run_for_exit_code(bin + " --listen 256.1.1.1:0 --data-dir '' 2>&1");
  CHECK(code == 2);
  CHECK(out.find("\"256.1.1.1\" is not an IPv4 or IPv6 address") != std::string::npos);
  const auto dir = std::filesystem::temp_directory_path() / ("switchyard-port-dir-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::tie(code, out) =
      run_for_exit_code(bin + " --listen 127.0.0.1:0 --data-dir '' --port-file " + dir.string() + " 2>&1");
  CHECK(code == 2);
  CHECK(out.find("is a directory") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.string() + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("switchyard-server reports a config file syntax error with its line and exits 2", "[e2e][broker]") {
  const auto file = std::filesystem::temp_directory_path() / ("switchyard-bad-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << "max-connections = 5\nlisten = \"127.0.0.1:0\n";
  const auto [code, out] =
      run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --config " + file.string() + " 2>&1");
  std::filesystem::remove(file);
  CHECK(code == 2);
  CHECK(out.find("line 2") != std::string::npos);
  CHECK(out.find("max-connections must be") == std::string::npos);
}

TEST_CASE("switchyard-server that cannot start names what is at fault in one line, without traffic totals",
          "[e2e][broker]") {
  const std::string bin = SWITCHYARD_SERVER_BINARY;
  const auto file = std::filesystem::temp_directory_path() / ("switchyard-not-a-dir-" + std::to_string(::getpid()));
  std::ofstream(file) << "a file, not a folder\n";
  auto [code, out] = run_for_exit_code(bin + " --listen 127.0.0.1:0 --data-dir " + file.string() + " 2>&1");
  std::filesystem::remove(file);
  CHECK(code == 1);
  CHECK(out.find("switchyard-server: cannot use --data-dir " + file.string() + ": Not a directory") !=
        std::string::npos);
  CHECK(out.find("traffic:") == std::string::npos);
  std::tie(code, out) = run_for_exit_code(bin + " --no-such-flag 2>&1");
  CHECK(code == 2);
  CHECK(out.starts_with("switchyard-server: "));
}

TEST_CASE("a server killed with SIGKILL restarts on the same port with its log intact", "[e2e][broker]") {
  auto server = start_server_process();
  const auto port = server.port();
  {
    auto c = client::connect({.port = port});
    REQUIRE(c);
    REQUIRE((*c)->append("restart.check", std::as_bytes(std::span("kept", 4))));
  }
  REQUIRE(server.signal_and_wait(SIGKILL, std::chrono::seconds(10)) == -SIGKILL);
  auto again = server.restart(std::chrono::seconds(10));
  REQUIRE(again);
  CHECK(server.port() == port);
  auto c = client::connect({.port = port});
  REQUIRE(c);
  auto r = (*c)->read("restart.check");
  REQUIRE(r);
  REQUIRE(r->records.size() == 1);
  CHECK(r->records[0].seq == 1);
}

TEST_CASE("switchyard-server refuses a non-loopback address without authentication with exit code 2",
          "[e2e][broker][auth]") {
  const auto [code, out] =
      run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --listen 0.0.0.0:0 --data-dir '' 2>&1");
  CHECK(code == 2);
  CHECK(out.find("--allow-anonymous") != std::string::npos);
}

TEST_CASE("switchyard-server reports an invalid auth file with its line and exits 2", "[e2e][broker][auth]") {
  const auto file =
      std::filesystem::temp_directory_path() / ("switchyard-auth-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << "[principals.a]\nadmin = true\ntoken_sha256 = [\"abc\"]\n";
  const auto [code, out] =
      run_for_exit_code(std::string(SWITCHYARD_SERVER_BINARY) + " --listen 127.0.0.1:0 --data-dir '' --auth-file " +
                        file.string() + " 2>&1");
  std::filesystem::remove(file);
  CHECK(code == 2);
  CHECK(out.find(":3:") != std::string::npos);
  CHECK(out.find("token_sha256") != std::string::npos);
}

// End to end: the example programs run against a real server, and their
// command line (examples/example_args.hpp): --help, --address or
// SWITCHYARD_ADDRESS, and usage errors that exit 2 before connecting.

#include "tests/support/process.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <string>

using switchyard::test::run_command;
using switchyard::test::run_for_exit_code;

namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

const char* const examples[] = {SWITCHYARD_EXAMPLE_PUBSUB, SWITCHYARD_EXAMPLE_GATEWAY, SWITCHYARD_EXAMPLE_SEND};

// Runs `command` with SWITCHYARD_ADDRESS unset (unless `command` sets it):
// exit code, stdout and stderr together.
std::pair<int, std::string> run(const std::string& command) {
  return run_for_exit_code("env -u SWITCHYARD_ADDRESS " + command + " 2>&1");
}

void check_delivered(const std::string& out) {
  CHECK(contains(out, "orders.*.created got orders.eu.created: {\"order\":42}"));
  CHECK(contains(out, "orders.> got orders.eu.created: {\"order\":42}"));
}

}  // namespace

TEST_CASE("the pub/sub example delivers to orders.*.created and orders.>", "[e2e][examples]") {
  switchyard::test::test_server server;
  const auto [code, out] =
      run(std::string(SWITCHYARD_EXAMPLE_PUBSUB) + " --address 127.0.0.1:" + std::to_string(server.port()));
  INFO(out);
  CHECK(code == 0);
  check_delivered(out);
}

TEST_CASE("the examples take the broker's address from SWITCHYARD_ADDRESS", "[e2e][examples]") {
  switchyard::test::test_server server;
  const auto [code, out] = run("SWITCHYARD_ADDRESS=127.0.0.1:" + std::to_string(server.port()) + " " +
                               SWITCHYARD_EXAMPLE_PUBSUB);
  INFO(out);
  CHECK(code == 0);
  check_delivered(out);
}

TEST_CASE("every example prints its usage for --help and exits 0 without connecting", "[e2e][examples]") {
  for (const char* example : examples) {
    INFO(example);
    // Port 1: nothing listens there, so a connect attempt would fail (exit 1).
    const auto r = run_command("env SWITCHYARD_ADDRESS=127.0.0.1:1 " + std::string(example) + " --help 2>/dev/null");
    INFO(r.out);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.out.starts_with("usage: switchyard-example-"));
    CHECK(contains(r.out, "--address HOST:PORT  the broker (default: $SWITCHYARD_ADDRESS, else 127.0.0.1:7878)"));
  }
}

TEST_CASE("the examples refuse bad arguments with a usage error (exit 2) before connecting", "[e2e][examples]") {
  const std::string pubsub = SWITCHYARD_EXAMPLE_PUBSUB, gateway = SWITCHYARD_EXAMPLE_GATEWAY,
                    send = SWITCHYARD_EXAMPLE_SEND;
  const std::pair<std::string, std::string> cases[] = {
      {pubsub + " 127.0.0.1 7878", "unexpected argument '127.0.0.1'"},
      {pubsub + " --address", "--address needs a value"},
      {pubsub + " --address localhost", "--address must be HOST:PORT (port 1..65535), got 'localhost'"},
      {pubsub + " --address 127.0.0.1:70000", "--address must be HOST:PORT (port 1..65535), got '127.0.0.1:70000'"},
      {"SWITCHYARD_ADDRESS=7878 " + pubsub, "SWITCHYARD_ADDRESS must be HOST:PORT (port 1..65535), got '7878'"},
      {gateway + " --inbox gw-7 --port 7878", "unknown option --port: give the broker as --address HOST:PORT"},
      {gateway + " --ttl-ms soon", "--ttl-ms must be a whole number from 1 to 3600000, got 'soon'"},
      {gateway + " --verbose", "unknown option --verbose"},
      {send, "give a route key and a payload"},
      {send + " user:alice", "give a payload"},
      {send + " user:alice hi there", "unexpected argument 'there'"},
      {send + " user:alice hi --host 127.0.0.1", "unknown option --host: give the broker as --address HOST:PORT"},
  };
  for (const auto& [command, message] : cases) {
    INFO(command);
    const auto [code, out] = run(command);
    INFO(out);
    CHECK(code == 2);
    CHECK(contains(out, message));
    CHECK(contains(out, "usage: switchyard-example-"));
  }
}

// The real switchyard-cli binary's pub and sub (admin/pubsub_commands.cpp)
// against a broker on 127.0.0.1: pub from an argument and from stdin, with
// and without --confirm; sub in the background until --count, a signal or
// the broker's end.

#include "switchyard/client.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <string>

using namespace switchyard;
using test::background_cli;
using test::cli;
using test::cli_stderr;
using test::collector;
using test::connect_admin;
using test::connect_to;
using test::contains;
using test::lines_of;
using test::one_json_object;
using test::run_for_exit_code;
using test::test_server;
using test::wait_for_cli_subscription;

namespace {

// A subscriber collecting the payloads published to `pattern`.
struct listener {
  std::unique_ptr<client> c;
  collector<std::string> got;
  listener(std::uint16_t port, std::string_view pattern) : c(connect_to(port, "listener")) {
    REQUIRE(c->subscribe(pattern, [this](const message& m) { got.add(std::string(m.payload_text())); }));
  }
};

std::string cli_at(std::uint16_t port) {
  return std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:" + std::to_string(port);
}

}  // namespace

TEST_CASE("pub publishes its message to the channel and --json says how many bytes", "[admin]") {
  test_server server;
  listener sub(server.port(), "orders.>");
  const auto [code, out] = cli(server.port(), "pub orders.eu '{\"order\":42}' --json");
  CHECK(code == 0);
  CHECK(out == R"({"channel":"orders.eu","bytes":12,"confirmed":false})"
               "\n");
  // The CLI waited until the broker processed it: it was delivered.
  REQUIRE(sub.c->flush() == std::error_code{});
  REQUIRE(test::wait_until([&] { return sub.got.count == 1; }));
  CHECK(sub.got.snapshot().front() == R"({"order":42})");
}

TEST_CASE("pub with - publishes all of stdin, bytes as they are", "[admin]") {
  test_server server;
  listener sub(server.port(), "raw");
  const auto [code, out] =
      run_for_exit_code("printf 'two\\nlines\\000' | " + cli_at(server.port()) + " pub raw - 2>/dev/null");
  CHECK(code == 0);
  CHECK(out == "published 10 bytes to raw\n");
  REQUIRE(test::wait_until([&] { return sub.got.count == 1; }));
  CHECK(sub.got.snapshot().front() == std::string("two\nlines\0", 10));
}

TEST_CASE("pub --confirm waits for the broker's confirmation and says so", "[admin]") {
  test_server server;
  listener sub(server.port(), "a.b");
  const auto [code, out] = cli(server.port(), "pub a.b hi --confirm --json");
  CHECK(code == 0);
  CHECK(out == R"({"channel":"a.b","bytes":2,"confirmed":true})"
               "\n");
  REQUIRE(test::wait_until([&] { return sub.got.count == 1; }));
}

TEST_CASE("pub to a channel with a wildcard is a usage error and publishes nothing", "[admin]") {
  test_server server;
  listener sub(server.port(), ">");
  const auto [code, out] = cli(server.port(), "pub 'orders.*' x --json");
  CHECK(code == 1);
  CHECK(out.starts_with(R"({"error":{"code":"invalid_channel","message":"pub orders.*: )"));
  REQUIRE(sub.c->flush() == std::error_code{});
  CHECK(server.live_metrics().counters.published == 0);
}

TEST_CASE("sub --count prints the matching messages one JSON object per line and exits 0", "[admin]") {
  test_server server;
  auto admin = connect_admin(server.port());
  background_cli sub(server.port(), {"sub", "orders.>", "--count", "3", "--json"});
  REQUIRE(wait_for_cli_subscription(*admin));
  auto pub = connect_to(server.port(), "publisher");
  REQUIRE_FALSE(pub->publish_confirmed("orders.eu", std::as_bytes(std::span("one", 3))));
  REQUIRE_FALSE(pub->publish_confirmed("other", std::as_bytes(std::span("skipped", 7))));
  REQUIRE_FALSE(pub->publish_confirmed("orders.us", std::as_bytes(std::span("\x00\x01\xff", 3))));
  REQUIRE_FALSE(pub->publish_confirmed("orders.eu.x", std::as_bytes(std::span("three", 5))));
  REQUIRE_FALSE(pub->publish_confirmed("orders.eu", std::as_bytes(std::span("past the count", 14))));
  REQUIRE(sub.wait() == 0);
  const auto lines = lines_of(sub.out());
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == R"({"channel":"orders.eu","encoding":"text","payload":"one"})");
  CHECK(lines[1] == R"({"channel":"orders.us","encoding":"base64","payload":"AAH/"})");
  CHECK(lines[2] == R"({"channel":"orders.eu.x","encoding":"text","payload":"three"})");
}

TEST_CASE("sub prints the channel and the payload of each message on a line", "[admin]") {
  test_server server;
  auto admin = connect_admin(server.port());
  background_cli sub(server.port(), {"sub", "*", "--count", "2"});
  REQUIRE(wait_for_cli_subscription(*admin));
  auto pub = connect_to(server.port(), "publisher");
  REQUIRE_FALSE(pub->publish_confirmed("news", std::as_bytes(std::span("hello world", 11))));
  REQUIRE_FALSE(pub->publish_confirmed("bin", std::as_bytes(std::span("\x00\x01\xff", 3))));
  REQUIRE(sub.wait() == 0);
  CHECK(sub.out() == "news  hello world\nbin  base64:AAH/\n");
}

TEST_CASE("sub ends with exit 0 on SIGINT and on SIGTERM", "[admin]") {
  test_server server;
  auto admin = connect_admin(server.port());
  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    background_cli sub(server.port(), {"sub", "quiet.>"});
    REQUIRE(wait_for_cli_subscription(*admin));
    sub.signal(sig);
    CHECK(sub.wait() == 0);
    CHECK(sub.out().empty());
    // Gone from the broker, so that the next round waits for its own.
    REQUIRE(test::wait_until([&] {
      auto page = admin->connections();
      return page && page->total == 1;
    }));
  }
}

TEST_CASE("sub exits 2 naming the reason when the broker closes the connection", "[admin]") {
  test_server server;
  auto admin = connect_admin(server.port());
  background_cli sub(server.port(), {"sub", "x"});
  REQUIRE(wait_for_cli_subscription(*admin));
  admin->close();
  server.stop();
  CHECK(sub.wait() == 2);
  CHECK(contains(sub.err(), "switchyard-cli: sub x: the connection ended: "));
}

// The real switchyard-cli binary's offer commands (admin/offer_commands.cpp):
// send --expires-ms, pending, flags list / set; against a broker on
// 127.0.0.1 with gateways and dispatchers made by the client library.

#include "switchyard/client.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <string_view>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using test::cli;
using test::cli_stderr;
using test::collector;
using test::connect_to;
using test::contains;
using test::lines_of;
using test::one_json_object;
using test::test_server;

namespace {

// A gateway: a lease, inbox `inbox` open on it, `users` routed there, and
// the time left of each delivery.
struct gateway_conn {
  std::unique_ptr<client> c;
  collector<std::chrono::milliseconds> time_left;
  gateway_conn(std::uint16_t port, std::string_view inbox, std::vector<std::string> users)
      : c(connect_to(port, std::string(inbox))) {
    auto l = c->lease_grant(30s);
    REQUIRE(l);
    REQUIRE_FALSE(c->open_inbox(inbox, l->id, [this](const inbox_message& m) { time_left.add(m.time_left); }));
    for (const auto& u : users) REQUIRE(c->registry_put(u, inbox, l->id));
  }
};

}  // namespace

TEST_CASE("send --expires-ms delivers to the user's gateway and says when it expires", "[admin][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-7", {"user:alice"});
  const auto [code, out] = cli(server.port(), "send user:alice 'ride 1' --expires-ms 30000 --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(
      contains(out, R"({"route_key":"user:alice","inbox":"gw-7","bytes":6,"expires_in_ms":30000,"outcome":"routed"})"));
  REQUIRE(test::wait_until([&] { return gw.time_left.count == 1; }));
  const auto [code2, text] = cli(server.port(), "send user:alice 'ride 2' --expires-ms 30000");
  CHECK(code2 == 0);
  CHECK(text == "sent 6 bytes to user:alice through inbox gw-7 (expires in 30s)\n");
}

TEST_CASE("send --expires-ms to a route key without a route exits 6 with no_route", "[admin][offers]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "send user:nobody x --expires-ms 1000 --json");
  INFO(out);
  CHECK(code == 6);
  CHECK(contains(out, R"({"error":{"code":"no_route","message":"send user:nobody: no route)"));
}

TEST_CASE("an expiry or a percentage out of range is a usage error and nothing is sent", "[admin][offers]") {
  test_server server;
  for (const char* args : {"send user:alice x --expires-ms 0", "send user:alice x --expires-ms -5",
                           "send user:alice x --expires-ms 4294967296", "send user:alice x --expires-ms soon",
                           "flags set offers 101", "flags set offers -1", "flags set offers half", "flags set offers",
                           "pending", "pending user:alice --limit x", "flags", "flags get offers"}) {
    INFO(args);
    const auto [code, err] = cli_stderr(server.port(), args);
    CHECK(code == 1);
    CHECK(contains(err, "switchyard-cli: "));
  }
  CHECK(server.live_metrics().counters.connections_accepted == 0);
}

// ---- The following need the broker's offers support (docs/protocol.md §15).

TEST_CASE("flags set turns a flag on for a share of the connections and prints it", "[admin][offers]") {
  test_server server;
  auto a = connect_to(server, "a");
  const auto [code, out] = cli(server.port(), "flags set offers 100 --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  // `a` and the CLI itself asked for "offers".
  CHECK(out == R"({"name":"offers","percent":100,"connections_on":2,"connections_off":0})"
               "\n");
  // The first CLI's connection may not be gone yet: at least `a` and this one are off.
  const auto [code2, table] = cli(server.port(), "flags set offers 0");
  INFO(table);
  CHECK(code2 == 0);
  const auto rows = lines_of(table);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == "FLAG    PERCENT  ON  OFF");
  CHECK(rows[1].starts_with("offers        0   0    "));
}

TEST_CASE("flags list shows every flag with its percentage and connections", "[admin][offers]") {
  test_server server;
  REQUIRE(cli(server.port(), "flags set offers 25").first == 0);
  const auto [code, out] = cli(server.port(), "flags list --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(out.starts_with(R"({"flags":[)"));
  CHECK(contains(out, R"({"name":"offers","percent":25,"connections_on":)"));
  const auto [code2, table] = cli(server.port(), "flags list");
  INFO(table);
  CHECK(code2 == 0);
  CHECK(table.starts_with("FLAG"));
  CHECK(contains(table, "PERCENT  ON  OFF\n"));
  CHECK(contains(table, "offers"));
}

TEST_CASE("flags set of an unknown flag exits 3 with not_found", "[admin][offers]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "flags set no-such-flag 10 --json");
  INFO(out);
  CHECK(code == 3);
  CHECK(contains(out, R"({"error":{"code":"not_found","message":"flags set no-such-flag 10: no such flag)"));
}

TEST_CASE("pending lists a user's unacknowledged offers oldest first, and says when there is none", "[admin][offers]") {
  test_server server;
  REQUIRE(cli(server.port(), "flags set offers 100").first == 0);
  gateway_conn gw(server.port(), "gw-7", {"user:alice"});
  auto dispatcher = connect_to(server, "dispatcher");
  const std::array<std::string_view, 1> keys{"user:alice"};
  REQUIRE(dispatcher->send_offer(keys, "ride 1", {.offer_id = 41, .expires_in = 60s}));
  const std::string binary("\x01\xff", 2);
  REQUIRE(dispatcher->send_offer(keys, binary, {.offer_id = 42, .expires_in = 60s}));

  const auto [code, out] = cli(server.port(), "pending user:alice --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(out.starts_with(R"({"route_key":"user:alice","offers":[{"offer_id":"41","time_left_ms":)"));
  CHECK(contains(out, R"("encoding":"text","payload":"ride 1"})"));
  CHECK(contains(out, R"({"offer_id":"42","time_left_ms":)"));
  CHECK(contains(out, R"("encoding":"base64","payload":"Af8="})"));

  const auto [code2, table] = cli(server.port(), "pending user:alice --limit 1");
  INFO(table);
  CHECK(code2 == 0);
  const auto rows = lines_of(table);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].starts_with("OFFER  TIME LEFT"));
  CHECK(rows[1].starts_with("   41"));
  CHECK(rows[1].ends_with("text      ride 1"));

  REQUIRE_FALSE(gw.c->ack(41));
  REQUIRE_FALSE(gw.c->ack(42));
  REQUIRE_FALSE(gw.c->flush());
  const auto [code3, none] = cli(server.port(), "pending user:alice");
  CHECK(code3 == 0);
  CHECK(none == "no pending offers for user:alice\n");
}

TEST_CASE("send --expires-ms gives a gateway with the offers flag on the time the message had left",
          "[admin][offers]") {
  test_server server;
  REQUIRE(cli(server.port(), "flags set offers 100").first == 0);
  gateway_conn gw(server.port(), "gw-7", {"user:alice"});
  REQUIRE(cli(server.port(), "send user:alice x --expires-ms 30000").first == 0);
  REQUIRE(test::wait_until([&] { return gw.time_left.count == 1; }));
  const auto left = gw.time_left.snapshot().front();
  CHECK(left > 0ms);
  CHECK(left <= 30s);
}

TEST_CASE("send --offer --receipt-ms waits for the gateway's ack and prints the receipt", "[admin][offers]") {
  test_server server;
  auto gw = connect_to(server.port(), "gw-9");
  auto l = gw->lease_grant(30s);
  REQUIRE(l);
  // The gateway acks every offer it gets.
  REQUIRE_FALSE(gw->open_inbox("gw-9", l->id, [&gw](const inbox_message& m) { (void)gw->ack(m); }));
  REQUIRE(gw->registry_put("user:alice", "gw-9", l->id));
  const auto [code, out] =
      cli(server.port(), "send user:alice 'job 1' --offer 41 --expires-ms 10000 --receipt-ms 5000 --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"({"route_key":"user:alice","inbox":"gw-9","bytes":5,"offer":41,"outcome":"routed",)"
                      R"("receipt":{"outcome":"acked","inbox":"gw-9","elapsed_us":)"));
  const auto [code2, text] =
      cli(server.port(), "send user:alice 'job 2' --offer 42 --expires-ms 10000 --receipt-ms 5000");
  CHECK(code2 == 0);
  CHECK(contains(text, "offer 42 to user:alice: routed through inbox gw-9\nreceipt: acked after "));
}

TEST_CASE("send --offer without an ack prints the timeout receipt", "[admin][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-7", {"user:alice"});  // never acks
  const auto [code, out] = cli(server.port(), "send user:alice x --offer 5 --expires-ms 10000 --receipt-ms 200 --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"("receipt":{"outcome":"timeout","inbox":"gw-7")"));
}

TEST_CASE("send --receipt-ms needs --offer, --offer needs --expires-ms, and --stream excludes it", "[admin][offers]") {
  test_server server;
  for (const char* args : {"send user:alice x --receipt-ms 100", "send user:alice x --offer 1 --stream s",
                           "send user:alice x --offer 0 --expires-ms 100", "send user:alice x --offer 1"}) {
    INFO(args);
    const auto [code, err] = cli_stderr(server.port(), args);
    CHECK(code == 1);
  }
}

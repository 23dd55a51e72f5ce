// The real switchyard-cli binary's routing commands added to routes get /
// list and leases list (admin/routing_commands.cpp): send, routes delete,
// leases revoke, leases list a page at a time, inboxes list; against a
// broker on 127.0.0.1 with gateways made by the client library.

#include "switchyard/client.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

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

// A gateway: a lease, its inbox `inbox` open on it, and `users` routed there.
struct gateway_conn {
  std::unique_ptr<client> c;
  lease_id lease = 0;
  collector<std::string> got;
  gateway_conn(std::uint16_t port, std::string name, std::string_view inbox, std::vector<std::string> users)
      : c(connect_to(port, std::move(name))) {
    auto l = c->lease_grant(30s);
    REQUIRE(l);
    lease = l->id;
    REQUIRE_FALSE(
        c->open_inbox(inbox, lease, [this](const inbox_message& m) { got.add(std::string(m.payload_text())); }));
    for (const auto& u : users) REQUIRE(c->registry_put(u, inbox, lease));
  }
};

// The value of "key":"<value>" in a one-line JSON object; empty if absent.
std::string json_string(const std::string& json, const std::string& key) {
  const std::string start = "\"" + key + "\":\"";
  const auto at = json.find(start);
  if (at == std::string::npos) return {};
  const auto from = at + start.size();
  return json.substr(from, json.find('"', from) - from);
}

}  // namespace

TEST_CASE("send prints the inbox a user's message went to, and the gateway receives it", "[admin]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-a", "gw-7", {"user:alice"});
  const auto [code, out] = cli(server.port(), "send user:alice 'hi alice' --json");
  CHECK(code == 0);
  CHECK(out == R"({"route_key":"user:alice","inbox":"gw-7","bytes":8})"
               "\n");
  REQUIRE(test::wait_until([&] { return gw.got.count == 1; }));
  CHECK(gw.got.snapshot().front() == "hi alice");
  const auto [code2, text] = cli(server.port(), "send user:alice again");
  CHECK(code2 == 0);
  CHECK(text == "sent 5 bytes to user:alice through inbox gw-7\n");
}

TEST_CASE("send to a route key without a route exits 6 with no_route", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "send user:nobody hi --json");
  CHECK(code == 6);
  CHECK(out.starts_with(R"({"error":{"code":"no_route","message":"send user:nobody: no route)"));
  CHECK(out.ends_with(R"("exit_code":6}})"
                      "\n"));
  const auto [code2, err] = cli_stderr(server.port(), "send user:nobody hi");
  CHECK(code2 == 6);
  CHECK(contains(err, "no route"));
}

TEST_CASE("routes delete removes a registry entry, and an unknown key exits 3", "[admin]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-a", "gw-1", {"user:alice", "user:bob"});
  const auto [code, out] = cli(server.port(), "routes delete user:alice --json");
  CHECK(code == 0);
  CHECK(out == R"({"key":"user:alice","deleted":true})"
               "\n");
  CHECK(gw.c->registry_get("user:alice").error() == errc::not_found);
  CHECK(gw.c->registry_get("user:bob"));
  const auto [code2, err] = cli(server.port(), "routes delete user:alice --json");
  CHECK(code2 == 3);
  CHECK(contains(err, R"({"error":{"code":"not_found","message":"routes delete user:alice: no route)"));
}

TEST_CASE("leases revoke removes a lease with the routes and inboxes bound to it, and an unknown lease exits 3",
          "[admin]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-a", "gw-1", {"user:alice"});
  const std::string id = std::to_string(gw.lease);
  const auto [code, out] = cli(server.port(), "leases revoke " + id + " --json");
  CHECK(code == 0);
  CHECK(out == R"({"lease":")" + id +
                   R"(","revoked":true})"
                   "\n");
  CHECK(gw.c->registry_get("user:alice").error() == errc::not_found);
  CHECK(gw.c->lease_time_to_live(gw.lease).error() == errc::not_found);
  const auto [code2, err] = cli_stderr(server.port(), "leases revoke " + id);
  CHECK(code2 == 3);
  CHECK(err == "switchyard-cli: leases revoke " + id + ": no such lease (unknown, expired or revoked already)\n");
}

TEST_CASE("a lease id or cursor that is not a whole number is a usage error and nothing is sent", "[admin]") {
  test_server server;
  for (const char* args : {"leases revoke abc", "leases revoke -5", "leases list --cursor x"}) {
    INFO(args);
    const auto [code, err] = cli_stderr(server.port(), args);
    CHECK(code == 1);
    CHECK(contains(err, "must be a whole number (0 or more), got '"));
  }
  CHECK(server.live_metrics().counters.connections_accepted == 0);
}

TEST_CASE("leases list goes past 1000 leases a page at a time with --cursor, each lease once", "[admin]") {
  test_server server;
  auto c = connect_to(server.port());
  std::set<std::string> granted;
  for (int i = 0; i < 1200; ++i) {
    auto l = c->lease_grant(60s);
    REQUIRE(l);
    granted.insert(std::to_string(l->id));
  }
  std::set<std::string> listed;
  const auto take = [&](const std::string& out) {
    for (std::size_t at = out.find(R"({"id":")"); at != std::string::npos; at = out.find(R"({"id":")", at + 1)) {
      const auto from = at + 7;
      CHECK(listed.insert(out.substr(from, out.find('"', from) - from)).second);
    }
  };
  const auto [code, first] = cli(server.port(), "leases list --json");
  CHECK(code == 0);
  CHECK(one_json_object(first));
  CHECK(contains(first, R"(],"total":1200,"next_cursor":")"));
  take(first);
  CHECK(listed.size() == 1000);
  const std::string cursor = json_string(first, "next_cursor");
  REQUIRE(cursor != "0");
  const auto [code2, second] = cli(server.port(), "leases list --json --cursor " + cursor);
  CHECK(code2 == 0);
  CHECK(second.ends_with(R"(],"total":1200,"next_cursor":"0"})"
                         "\n"));
  take(second);
  CHECK(listed == granted);
  // As a table, a page names the next one's cursor.
  const auto [code3, table] = cli(server.port(), "leases list --limit 2");
  CHECK(code3 == 0);
  const auto lines = lines_of(table);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].ends_with("LEASE  TTL MS  REMAINING MS"));
  CHECK(lines[3].starts_with("2 of 1200 leases; next page: --cursor "));
}

TEST_CASE("inboxes list shows each open inbox with its connection and lease", "[admin]") {
  test_server server;
  gateway_conn a(server.port(), "gateway-a", "gw-a", {"user:alice"});
  gateway_conn b(server.port(), "gateway-b", "gw-b", {});
  const auto [code, out] = cli(server.port(), "inboxes list --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"({"id":"gw-a","conn":)"));
  CHECK(contains(out, R"(,"name":"gateway-a","lease":")" + std::to_string(a.lease) + "\"}"));
  CHECK(contains(out, R"(,"name":"gateway-b","lease":")" + std::to_string(b.lease) + "\"}"));
  const auto [code2, table] = cli(server.port(), "inboxes list");
  CHECK(code2 == 0);
  const auto lines = lines_of(table);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].starts_with("INBOX"));
  CHECK(lines[1].starts_with("gw-a "));
  CHECK(lines[2].starts_with("gw-b "));
}

TEST_CASE("inboxes list says so when no inbox is open", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "inboxes list");
  CHECK(code == 0);
  CHECK(out == "no inboxes\n");
}

TEST_CASE("send --stream stores the message in the log and delivers it with its place", "[admin]") {
  test::temp_dir dir;
  test_server server(test::with_data(dir));
  gateway_conn gw(server.port(), "gw-a", "gw-7", {"user:alice"});
  const auto [code, out] = cli(server.port(), "send user:alice 'kept' --stream u.alice --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"({"route_key":"user:alice","inbox":"gw-7","bytes":4,"stream":"u.alice","seq":1,"epoch":")"));
  REQUIRE(test::wait_until([&] { return gw.got.count == 1; }));
  // Without a route it is stored all the same, and exit 6 says so.
  const auto [code2, text] = cli(server.port(), "send user:bob 'kept too' --stream u.alice");
  CHECK(code2 == 6);
  CHECK(contains(text, "stored 8 bytes in u.alice at 2 (epoch "));
  CHECK(contains(text, "), no live route\n"));
}

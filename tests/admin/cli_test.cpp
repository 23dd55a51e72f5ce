// The real switchyard-cli binary against a broker on 127.0.0.1 (in
// process, with a data folder): --json output, exit codes and --help.

#include "switchyard/client.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/fake_service.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

using namespace switchyard;
using test::cli;
using test::cli_stderr;
using test::connect_to;
using test::contains;
using test::one_json_object;
using test::run_for_exit_code;
using test::temp_dir;
using test::test_server;
using test::with_data;

namespace {

void append(client& c, std::string_view stream, std::string_view payload) {
  REQUIRE(c.append(stream, std::as_bytes(std::span(payload.data(), payload.size()))));
}

}  // namespace

TEST_CASE("switchyard-cli --help and every command's --help exit 0", "[admin]") {
  for (const char* args : {"--help",
                           "ping --help",
                           "pub --help",
                           "sub --help",
                           "send --help",
                           "streams --help",
                           "streams list --help",
                           "streams info --help",
                           "streams retention --help",
                           "streams read --help",
                           "streams tail --help",
                           "streams delete --help",
                           "routes --help",
                           "routes get --help",
                           "routes list --help",
                           "routes delete --help",
                           "leases --help",
                           "leases list --help",
                           "leases revoke --help",
                           "inboxes --help",
                           "inboxes list --help",
                           "drain --help",
                           "keygen --help",
                           "hash-token --help",
                           "stats --help",
                           "conns --help",
                           "pending --help",
                           "flags --help",
                           "flags list --help",
                           "flags set --help",
                           "cluster --help",
                           "cluster status --help"}) {
    INFO(args);
    const auto [code, out] = run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + " " + args);
    CHECK(code == 0);
    CHECK(contains(out, "Usage: switchyard-cli"));
  }
}

TEST_CASE("streams info --json prints the stream as one JSON object", "[admin]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_records = 1000;
  test_server server(cfg);
  auto c = connect_to(server.port());
  append(*c, "orders.eu", "one");
  append(*c, "orders.eu", "two");
  const auto epoch = c->stream_info("orders.eu")->epoch;
  const auto [code, out] = cli(server.port(), "streams info orders.eu --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(out.starts_with(R"({"name":"orders.eu","epoch":")" + std::to_string(epoch) +
                        R"(","first_seq":1,"last_seq":2,"records":2,"bytes":6,"created_ms":)"));
  CHECK(contains(out, R"("retention":{"max_records":1000,"max_age_ms":0,"max_bytes":0,"source":"default"}})"));
}

TEST_CASE("streams list --json lists streams by prefix with a limit and the more flag", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (const char* name : {"chat.2", "chat.1", "orders", "chat.3"}) append(*c, name, "x");
  {
    const auto [code, out] = cli(server.port(), "--json streams list --prefix chat. --limit 2");
    INFO(out);
    CHECK(code == 0);
    CHECK(one_json_object(out));
    CHECK(out.starts_with(R"({"streams":[{"name":"chat.1",)"));
    CHECK(contains(out, R"(},{"name":"chat.2",)"));
    CHECK_FALSE(contains(out, "chat.3"));
    CHECK(out.ends_with(R"(}}],"more":true})"
                        "\n"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams list --json");
    INFO(out);
    CHECK(code == 0);
    CHECK(contains(out, R"("name":"orders")"));
    CHECK(out.ends_with(R"("more":false})"
                        "\n"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams list --json --prefix none.");
    CHECK(code == 0);
    CHECK(out == "{\"streams\":[],\"more\":false}\n");
  }
}

TEST_CASE("streams retention --json sets, shows and clears a stream's own retention", "[admin]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_age = std::chrono::milliseconds(86'400'000);
  test_server server(cfg);
  {
    // An unknown stream is created, empty, with its own limits; omitted ones are 0.
    const auto [code, out] = cli(server.port(), "streams retention audit --max-records 10 --max-bytes 4096 --json");
    INFO(out);
    CHECK(code == 0);
    CHECK(one_json_object(out));
    CHECK(contains(out, R"("name":"audit")"));
    CHECK(contains(out, R"("first_seq":1,"last_seq":0,"records":0,"bytes":0,)"));
    CHECK(contains(out, R"("retention":{"max_records":10,"max_age_ms":0,"max_bytes":4096,"source":"own"})"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams retention audit --json");  // no change: shows it
    CHECK(code == 0);
    CHECK(contains(out, R"("retention":{"max_records":10,"max_age_ms":0,"max_bytes":4096,"source":"own"})"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams retention audit --clear --json");
    CHECK(code == 0);
    CHECK(contains(out, R"("retention":{"max_records":0,"max_age_ms":86400000,"max_bytes":0,"source":"default"})"));
  }
  auto c = connect_to(server.port());
  auto st = c->stream_info("audit");
  REQUIRE(st);
  CHECK_FALSE(st->own_retention);
}

TEST_CASE("streams info of an unknown stream exits 3 with a JSON error object", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const auto [code, out] = cli(server.port(), "streams info ghost --json");
  CHECK(code == 3);
  CHECK(out == R"({"error":{"code":"not_found","message":"streams info ghost: no such stream","exit_code":3}})"
               "\n");
  const auto [code2, err] = cli_stderr(server.port(), "streams info ghost");
  CHECK(code2 == 3);
  CHECK(err == "switchyard-cli: streams info ghost: no such stream\n");
}

TEST_CASE("a retention limit over the maximum exits 3 with bad_request and creates nothing", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const auto [code, out] = cli(server.port(), "streams retention s --max-records 9007199254740992 --json");
  CHECK(code == 3);
  CHECK(contains(out, R"({"error":{"code":"bad_request",)"));
  auto c = connect_to(server.port());
  auto all = c->stream_list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("an unreachable broker exits 2 and bad usage exits 1, with JSON errors", "[admin]") {
  std::uint16_t closed_port = 0;
  {
    test_server gone;  // a port that was just free: nothing listens there now
    closed_port = gone.port();
  }
  {
    const auto [code, out] = cli(closed_port, "ping --json");
    CHECK(code == 2);
    CHECK(contains(out, R"({"error":{"code":"connection_failed","message":"cannot connect to 127.0.0.1:)"));
    CHECK(contains(out, R"("exit_code":2}})"));
  }
  const std::string bin = SWITCHYARD_CLI_BINARY;
  for (const char* args : {"", "streams", "streams info", "streams retention s --clear --max-records 1",
                           "streams list --limit many", "--address nowhere ping", "--address 127.0.0.1:0 ping"}) {
    INFO(args);
    const auto [code, out] = run_for_exit_code(bin + " " + args + " 2>/dev/null");
    CHECK(code == 1);
    CHECK(out.empty());
    const auto [json_code, json_out] = run_for_exit_code(bin + " --json " + args + " 2>/dev/null");
    CHECK(json_code == 1);
    CHECK(json_out.starts_with(R"({"error":{"code":"usage","message":")"));
  }
}

TEST_CASE("streams read and tail step over expired records and say how many were left out", "[admin][offers]") {
  temp_dir dir;
  std::atomic<std::uint64_t> now_ms{1'700'000'000'000};
  auto cfg = with_data(dir);
  cfg.log_wall_clock_ms = [&] { return now_ms.load(); };
  test_server server(cfg);
  auto c = connect_to(server.port());
  const auto body = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  REQUIRE(c->publish_durable("rides.eu", "rides", body("gone"), std::chrono::seconds(1)));
  REQUIRE(c->publish_durable("rides.eu", "rides", body("kept"), std::chrono::seconds(60)));
  REQUIRE(c->publish_durable("rides.eu", "rides", body("gone too"), std::chrono::seconds(1)));
  now_ms += 1'000;
  const auto [code, out] = cli(server.port(), "streams read rides --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"("records":[{"seq":2,)"));
  CHECK(out.ends_with(R"(],"expired":2,"more":false,"next_seq":4})"
                      "\n"));
  const auto [code2, text] = cli(server.port(), "streams read rides");
  CHECK(code2 == 0);
  CHECK(contains(text, "(2 expired records left out)"));
  const auto [code3, tail] = cli(server.port(), "streams tail rides --from 0 --json");
  CHECK(code3 == 0);
  // One line: the record that did not expire.
  CHECK(std::count(tail.begin(), tail.end(), '\n') == 1);
  CHECK(contains(tail, R"("seq":2,)"));
  CHECK(contains(tail, R"("payload":"kept")"));
}

TEST_CASE("streams read --json prints text payloads as text and binary ones as base64", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  append(*c, "mixed", R"({"order":42})");
  append(*c, "mixed", std::string("\x00\x01\xFF", 3));
  append(*c, "mixed", "two\nlines");
  append(*c, "mixed", "caf\xC3\xA9");
  const auto [code, out] = cli(server.port(), "streams read mixed --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"("first_seq":1,"last_seq":4,"records":[{"seq":1,"timestamp_ms":)"));
  CHECK(contains(out, R"("encoding":"text","payload":"{\"order\":42}"})"));
  CHECK(contains(out, R"("encoding":"base64","payload":"AAH/"})"));
  CHECK(contains(out, R"("encoding":"base64","payload":"dHdvCmxpbmVz"})"));
  CHECK(contains(out, "\"encoding\":\"text\",\"payload\":\"caf\xC3\xA9\"}"));
  CHECK(out.ends_with(R"(],"expired":0,"more":false,"next_seq":5})"
                      "\n"));
  const auto [code2, page] = cli(server.port(), "streams read mixed --from 2 --count 1 --json");
  CHECK(code2 == 0);
  CHECK(contains(page, R"("records":[{"seq":2,)"));
  CHECK(page.ends_with(R"(],"expired":0,"more":true,"next_seq":3})"
                       "\n"));
}

TEST_CASE("streams read shows the channel or the route keys each record was delivered to", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  const std::string_view payload = "hi";
  const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
  REQUIRE(c->publish_durable("room.7", "conv", bytes));
  const std::string_view users[] = {"user:alice", "user:bob"};
  REQUIRE(c->send_durable(users, "conv", bytes));
  append(*c, "conv", "plain");
  const auto [code, out] = cli(server.port(), "streams read conv --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"("payload":"hi","channel":"room.7"})"));
  CHECK(contains(out, R"("payload":"hi","route_keys":["user:alice","user:bob"]})"));
  CHECK(contains(out, R"("payload":"plain"})"));
  const auto [code2, table] = cli(server.port(), "streams read conv");
  INFO(table);
  CHECK(code2 == 0);
  CHECK(contains(table, "channel room.7"));
  CHECK(contains(table, "users user:alice,user:bob"));
}

TEST_CASE("ping --json reports the round trip and the granted capabilities", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "ping --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"("rtt_ms":)"));
  // No "log": the test server has no data folder. "admin": the CLI asks for it.
  CHECK(contains(out, R"("capabilities":["dropped-notice","publish-ack","routing","offers","admin"]})"));
}

TEST_CASE("ping --json reports the server's instance id as a string and its version", "[admin]") {
  auto cfg = test_server::default_config();
  cfg.instance_id = 18'446'744'073'709'551'557u;  // above 2^53: a JSON number would lose it
  test_server server(cfg);
  const auto [code, out] = cli(server.port(), "ping --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"("server_instance":"18446744073709551557")"));
  CHECK(contains(out, R"("server_version":")"));
}

TEST_CASE("ping prints the server's version among its lines", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "ping");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "\nserver version   " SWITCHYARD_VERSION "\n"));
}

TEST_CASE("human output of streams list is aligned columns", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  append(*c, "a", "x");
  append(*c, "a.longer.name", "xyz");
  REQUIRE(c->set_stream_retention("a", {.max_records = 5, .max_age = std::chrono::hours(1)}));
  const auto [code, out] = cli(server.port(), "streams list");
  INFO(out);
  CHECK(code == 0);
  CHECK(out.starts_with("STREAM         FIRST  LAST  RECORDS  BYTES  CREATED"));
  CHECK(contains(out, "\na                  1     1        1      1  "));
  CHECK(contains(out, "\na.longer.name      1     1        1      3  "));
  CHECK(contains(out, "records<=5 age<=1h (own)\n"));
  CHECK(contains(out, "none (default)\n"));
}

TEST_CASE("routes get --json shows where a user is routed, and an unknown key exits 3", "[admin]") {
  test_server server;
  auto gw = connect_to(server.port(), "gw");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  REQUIRE(gw->registry_put("user:alice", "gw-7", lease->id));
  const auto [code, out] = cli(server.port(), "routes get user:alice --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"({"key":"user:alice","value":"gw-7","version":)"));
  CHECK(contains(out, "\"lease\":\"" + std::to_string(lease->id) + "\""));
  const auto [code2, err] = cli(server.port(), "routes get user:bob --json");
  CHECK(code2 == 3);
  CHECK(contains(err, R"({"error":{"code":"not_found","message":"routes get user:bob: no route)"));
}

TEST_CASE("routes list and leases list print the live entries, in --json and as tables", "[admin]") {
  test_server server;
  auto gw = connect_to(server.port(), "gw");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  for (const char* user : {"user:carol", "user:alice", "user:bob"}) REQUIRE(gw->registry_put(user, "gw-1", lease->id));
  REQUIRE(gw->registry_put("room:7", "gw-1", lease->id));
  const auto [code, out] = cli(server.port(), "routes list --prefix user: --json");
  INFO(out);
  CHECK(code == 0);
  const auto a = out.find("user:alice"), b = out.find("user:bob"), c = out.find("user:carol");
  CHECK(a < b);
  CHECK(b < c);
  CHECK(c != std::string::npos);
  CHECK_FALSE(contains(out, "room:7"));
  CHECK(out.ends_with("],\"more\":false}\n"));
  const auto [code2, cut] = cli(server.port(), "routes list --limit 2");
  CHECK(code2 == 0);
  CHECK(contains(cut, "KEY"));
  CHECK(contains(cut, "more routes"));
  const auto [code3, leases] = cli(server.port(), "leases list --json");
  INFO(leases);
  CHECK(code3 == 0);
  CHECK(contains(leases, "{\"leases\":[{\"id\":\"" + std::to_string(lease->id) + "\",\"ttl_ms\":30000,"));
}

TEST_CASE("drain --json drains the broker over the window given and prints one JSON object", "[admin]") {
  test_server server;
  auto other = connect_to(server);
  const auto [code, out] = cli(server.port(), "drain --window 300ms --json");
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, "\"draining\":true"));
  CHECK(contains(out, "\"window_ms\":300"));
  // The broker closes every connection and ends by itself.
  CHECK(server.wait_finished(std::chrono::seconds(10)));
}

TEST_CASE("drain with a window without a unit is a usage error and sends nothing", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "drain --window 30 --json");
  CHECK(code == 1);
  CHECK(contains(out, "--window must be a duration"));
  CHECK(server.live_metrics().ready);
}

TEST_CASE("stats --json prints the settings, counters and gauges as one JSON object", "[admin]") {
  test_server server;
  auto c = connect_to(server, "publisher");
  for (int i = 0; i < 3; ++i) REQUIRE_FALSE(c->publish("orders.eu", std::string_view("o")));
  REQUIRE_FALSE(c->flush());
  const auto [code, out] = cli(server.port(), "stats --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(contains(out, R"("version":")" SWITCHYARD_VERSION R"(")"));
  CHECK(contains(out, R"("listen":"127.0.0.1:)" + std::to_string(server.port()) + "\""));
  CHECK(contains(out, R"("published_total":3)"));
  CHECK(contains(out, R"("connections":2)"));  // the publisher and the CLI
  CHECK(contains(out, R"("counters":{)"));
  CHECK(contains(out, R"("gauges":{)"));
}

TEST_CASE("stats prints the settings, then counters and gauges as aligned columns", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "stats");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "\nCOUNTER "));
  CHECK(contains(out, "\nGAUGE "));
  CHECK(contains(out, "\nconnections_accepted_total "));
  CHECK(contains(out, "\nready "));
}

TEST_CASE("conns lists the connections with their names, a page at a time with a cursor", "[admin]") {
  test_server server;
  auto a = connect_to(server, "gateway-a");
  auto b = connect_to(server, "gateway-b");
  REQUIRE(b->subscribe("x.>", [](const message&) {}));
  const auto [code, out] = cli(server.port(), "conns --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(out.starts_with(R"({"total":3,"next_cursor":0,"conns":[{"id":)"));
  CHECK(contains(out, R"("name":"gateway-a")"));
  CHECK(contains(out, R"("name":"gateway-b")"));
  CHECK(contains(out, R"("name":"switchyard-cli")"));
  CHECK(contains(out, R"("subscriptions":1)"));
  // Sorted by subscriptions, one a page: gateway-b first, then a cursor.
  const auto [code1, first] = cli(server.port(), "conns --sort subs --limit 1");
  INFO(first);
  CHECK(code1 == 0);
  CHECK(contains(first, "gateway-b"));
  CHECK(contains(first, "1 of 3 connections; next page: --cursor 1"));
  const auto [code2, second] = cli(server.port(), "conns --sort subs --limit 1 --cursor 1 --json");
  CHECK(code2 == 0);
  CHECK_FALSE(contains(second, "gateway-b"));
  CHECK(contains(second, R"("next_cursor":2)"));
}

TEST_CASE("conns with an unknown sort is a usage error and sends nothing", "[admin]") {
  test_server server;
  const auto [code, out] = cli(server.port(), "conns --sort size --json");
  CHECK(code == 1);
  CHECK(contains(out, "--sort must be id, idle, pending, dropped, subs, bytes-in or bytes-out"));
  CHECK(server.live_metrics().counters.connections_accepted == 0);
}

TEST_CASE("the CLI prints its version for --version and -V and exits 0 without a broker", "[admin]") {
  for (const char* flag : {" --version", " -V"}) {
    const auto [code, out] = run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + flag);
    CHECK(code == 0);
    CHECK(out == "switchyard-cli " SWITCHYARD_VERSION "\n");
  }
}

TEST_CASE("an unknown command is named, with the commands there are, and exits 1", "[admin]") {
  const std::string bin(SWITCHYARD_CLI_BINARY);
  const auto [code, err] = run_for_exit_code(bin + " bogus 2>&1");
  CHECK(code == 1);
  CHECK(err.starts_with("switchyard-cli: unknown command 'bogus' (commands: ping, pub, sub, send, streams,"));
  const auto [code2, err2] = run_for_exit_code(bin + " streams bogus 2>&1");
  CHECK(code2 == 1);
  CHECK(err2.starts_with(
      "switchyard-cli: unknown command 'streams bogus' (commands: list, info, retention, read, tail, delete)"));
  const auto [code3, err3] = run_for_exit_code(bin + " streams 2>&1");
  CHECK(code3 == 1);
  CHECK(err3.starts_with("switchyard-cli: a command is required: streams {list, info, retention, read, tail, delete}"));
}

TEST_CASE("a command without its required argument names the command and the argument and exits 1", "[admin]") {
  const std::string bin(SWITCHYARD_CLI_BINARY);
  for (const auto& [args, named] : std::initializer_list<std::pair<const char*, const char*>>{
           {" pub", "switchyard-cli: pub: "},
           {" send user:alice", "switchyard-cli: send: "},
           {" streams info", "switchyard-cli: streams info: "}}) {
    INFO(args);
    const auto [code, err] = run_for_exit_code(bin + args + " 2>&1");
    CHECK(code == 1);
    CHECK(err.starts_with(named));
    CHECK(err.find("is required") != std::string::npos);
    CHECK(err.find("a command is required") == std::string::npos);
  }
}

TEST_CASE("negative and non-numeric counts are usage errors and nothing is sent", "[admin]") {
  test_server server;
  for (const char* args : {"streams read s --from -1", "streams read s --count abc", "conns --limit -3",
                           "streams retention s --max-records 1e3", "conns --cursor x"}) {
    INFO(args);
    const auto [code, err] = cli_stderr(server.port(), args);
    CHECK(code == 1);
    CHECK(contains(err, "must be a whole number (0 or more), got '"));
  }
  CHECK(server.live_metrics().counters.connections_accepted == 0);
}

TEST_CASE("SWITCHYARD_ADDRESS gives the broker's address when --address does not", "[admin]") {
  test_server server;
  const auto [code, out] = run_for_exit_code("SWITCHYARD_ADDRESS=127.0.0.1:" + std::to_string(server.port()) + " " +
                                             SWITCHYARD_CLI_BINARY + " ping --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "\"address\":\"127.0.0.1:" + std::to_string(server.port()) + "\""));
}

TEST_CASE("a port where another service listens is reported as not a Switchyard broker", "[admin]") {
  test::fake_service http("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  const auto [code, err] = cli_stderr(http.port(), "ping");
  INFO(err);
  CHECK(code == 2);
  CHECK(contains(err, "not a Switchyard broker"));
}

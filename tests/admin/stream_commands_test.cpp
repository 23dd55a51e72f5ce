// The real switchyard-cli binary's stream commands added to list, info,
// retention and read (admin/stream_commands.cpp): streams tail (to the end,
// and --follow in the background until --count or a signal), streams
// delete, and the stream names retention limits accept; against a broker
// on 127.0.0.1 with a data folder.

#include "switchyard/client.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <string>

using namespace switchyard;
using test::background_cli;
using test::cli;
using test::cli_stderr;
using test::connect_to;
using test::contains;
using test::lines_of;
using test::one_json_object;
using test::temp_dir;
using test::test_server;
using test::with_data;

namespace {

void append(client& c, std::string_view stream, std::string_view payload) {
  REQUIRE(c.append(stream, std::as_bytes(std::span(payload.data(), payload.size()))));
}

}  // namespace

TEST_CASE("streams delete removes a stream and prints what it held", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (int i = 0; i < 3; ++i) append(*c, "orders", "abc");
  append(*c, "kept", "x");
  const auto epoch = c->stream_info("orders")->epoch;
  const auto [code, out] = cli(server.port(), "streams delete orders --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(one_json_object(out));
  CHECK(out.starts_with(R"({"deleted":true,"stream":{"name":"orders","epoch":")" + std::to_string(epoch) +
                        R"(","first_seq":1,"last_seq":3,"records":3,"bytes":9,)"));
  CHECK(c->stream_info("orders").error() == errc::not_found);
  CHECK(c->stream_info("kept"));
  append(*c, "other", "y");
  const auto [code2, text] = cli(server.port(), "streams delete other");
  CHECK(code2 == 0);
  CHECK(text ==
        "deleted stream other: 1 records, 1 bytes (seq 1..1); a new append to other starts a new stream (a "
        "new epoch, from seq 1)\n");
}

TEST_CASE("streams delete of an unknown stream exits 3 with not_found", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const auto [code, out] = cli(server.port(), "streams delete ghost --json");
  CHECK(code == 3);
  CHECK(out == R"({"error":{"code":"not_found","message":"streams delete ghost: no such stream","exit_code":3}})"
               "\n");
}

TEST_CASE("streams retention refuses limits for a stream name with spaces before sending anything", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const auto [code, err] = cli_stderr(server.port(), "streams retention 'bad name with spaces' --max-records 1");
  CHECK(code == 1);
  CHECK(contains(err, "printable ASCII without spaces"));
  CHECK(server.live_metrics().counters.connections_accepted == 0);
  auto c = connect_to(server.port());
  auto all = c->stream_list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("streams tail prints the last records to the end of the stream and exits", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (int i = 1; i <= 15; ++i) append(*c, "log", "line " + std::to_string(i));
  {
    const auto [code, out] = cli(server.port(), "streams tail log");
    INFO(out);
    CHECK(code == 0);
    const auto lines = lines_of(out);
    REQUIRE(lines.size() == 10);  // the last 10 by default
    CHECK(lines.front().starts_with("6  "));
    CHECK(lines.front().ends_with("  -  text  line 6"));
    CHECK(lines.back().ends_with("  text  line 15"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams tail log --from 14 --json");
    INFO(out);
    CHECK(code == 0);
    const auto lines = lines_of(out);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].starts_with(R"({"stream":"log","epoch":")"));
    CHECK(contains(lines[0], R"(","seq":14,"timestamp_ms":)"));
    CHECK(lines[1].ends_with(R"("encoding":"text","payload":"line 15"})"));
  }
  {
    const auto [code, out] = cli(server.port(), "streams tail log --last 3 --count 2");
    CHECK(code == 0);
    const auto lines = lines_of(out);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].starts_with("13  "));
  }
}

TEST_CASE("streams tail of an unknown stream exits 3 with not_found", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const auto [code, err] = cli_stderr(server.port(), "streams tail ghost --follow");
  CHECK(code == 3);
  CHECK(err == "switchyard-cli: streams tail ghost: no such stream\n");
}

TEST_CASE("streams tail --follow --count prints records appended later and exits 0 after the count", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  append(*c, "events", "one");
  append(*c, "events", "two");
  background_cli tail(server.port(),
                      {"streams", "tail", "events", "--from", "1", "--follow", "--count", "4", "--json"});
  REQUIRE(tail.wait_for_lines(2));
  append(*c, "events", "three");
  const std::string_view users[] = {"user:alice"};
  REQUIRE(c->send_durable(users, "events", std::as_bytes(std::span("four", 4))));
  append(*c, "events", "five");  // past the count: not printed
  REQUIRE(tail.wait() == 0);
  const auto lines = lines_of(tail.out());
  REQUIRE(lines.size() == 4);
  CHECK(contains(lines[2], R"("seq":3,)"));
  CHECK(lines[2].ends_with(R"("payload":"three"})"));
  CHECK(lines[3].ends_with(R"("payload":"four","route_keys":["user:alice"]})"));
}

TEST_CASE("streams tail --follow ends with exit 0 on SIGINT and on SIGTERM", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  append(*c, "s", "x");
  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    background_cli tail(server.port(), {"streams", "tail", "s", "--follow"});
    REQUIRE(tail.wait_for_lines(1));
    tail.signal(sig);
    CHECK(tail.wait() == 0);
  }
}

TEST_CASE("streams tail --follow goes on with a stream deleted and created again, from its first record", "[admin]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  append(*c, "s", "old 1");
  append(*c, "s", "old 2");
  background_cli tail(server.port(), {"streams", "tail", "s", "--follow", "--count", "3"});
  REQUIRE(tail.wait_for_lines(2));
  REQUIRE(c->delete_stream("s"));
  append(*c, "s", "new 1");
  REQUIRE(tail.wait() == 0);
  const auto lines = lines_of(tail.out());
  REQUIRE(lines.size() == 3);
  CHECK(lines[2].starts_with("1  "));
  CHECK(lines[2].ends_with("  new 1"));
  CHECK(contains(tail.err(), "following the new stream from its first record"));
}

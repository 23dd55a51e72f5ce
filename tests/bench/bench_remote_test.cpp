// The real switchyard-bench binary against a broker it did not start
// (--address), as on a shared broker: what it reports about that broker,
// and that it leaves none of its leases, routes or records behind.

#include "switchyard/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <string>

using namespace std::chrono_literals;
using switchyard::test::run_for_exit_code;
using switchyard::test::start_server_process;
using switchyard::test::wait_until;

namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

std::string address_of(const switchyard::bench::server_process& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

// switchyard-bench --address `address` `args`: exit code and stdout (the
// summary, or with --json the JSON line; stderr, with the summary then, is
// appended when `with_stderr`).
std::pair<int, std::string> run_bench(const std::string& address, const std::string& args, bool with_stderr = false) {
  return run_for_exit_code(std::string(SWITCHYARD_BENCH_BINARY) + " --address " + address + " " + args +
                           (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

std::unique_ptr<switchyard::client> observer(const switchyard::bench::server_process& server) {
  auto c = switchyard::client::connect({.host = "127.0.0.1", .port = server.port(), .client_name = "bench-observer"});
  if (!c) FAIL("connect: " << c.error().message());
  return std::move(*c);
}

// Stats figure `name` of `server`, asked by an admin observer (its own
// connection counted); FAILs when the broker has no such figure.
std::uint64_t stat_of(const switchyard::bench::server_process& server, const std::string& name) {
  auto admin = switchyard::client::connect(
      {.host = "127.0.0.1", .port = server.port(), .client_name = "bench-observer-admin", .admin = true});
  REQUIRE(admin);
  const auto stats = (*admin)->stats();
  REQUIRE(stats);
  for (const auto& v : stats->values)
    if (v.name == name) return v.value;
  FAIL("no stats figure " << name);
  return 0;
}

// The value of a string field of a JSON line ("" if absent).
std::string json_string(const std::string& json, const std::string& key) {
  const std::string start = "\"" + key + "\":\"";
  const auto at = json.find(start);
  if (at == std::string::npos) return {};
  const auto end = json.find('"', at + start.size());
  return json.substr(at + start.size(), end - at - start.size());
}

}  // namespace

TEST_CASE("switchyard-bench refuses --durability with --address", "[bench]") {
  // Refused before any connection: the address need not answer.
  const auto [code, out] = run_bench("127.0.0.1:1", "durable --count 10 --durability sync");
  INFO(out);
  CHECK(code == 2);
  CHECK(contains(out, "--durability sets the mode of the broker the bench starts"));
}

TEST_CASE("switchyard-bench durable reports the durability mode of the broker at --address", "[bench]") {
  auto server = start_server_process({"--durability", "none"});
  const auto [code, out] = run_bench(address_of(server), "--json durable --count 100 --size 64", true);
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "durable (none, the mode of the broker at " + address_of(server) + ")"));
  CHECK(contains(out, R"("fsync":"none: never fsynced by the server, acknowledged after commit","durability":"none")"));
}

TEST_CASE("switchyard-bench says server figures are not measured for a broker of --address, never nan", "[bench]") {
  auto server = start_server_process();
  SECTION("leases") {
    const auto [code, out] = run_bench(address_of(server), "leases --leases 100 --window 16");
    INFO(out);
    CHECK(code == 0);
    CHECK(contains(out, "memory:     server RSS not measured for a broker of --address, "));
    CHECK_FALSE(contains(out, "nan"));
    const auto [json_code, json] = run_bench(address_of(server), "--json leases --leases 100 --window 16");
    INFO(json);
    CHECK(json_code == 0);
    CHECK(contains(json, R"("server_rss_bytes_per_lease":null,)"));
  }
  SECTION("connections") {
    const auto [code, out] = run_bench(address_of(server), "connections --count 20 --declare 4096");
    INFO(out);
    CHECK(code == 0);
    CHECK(contains(out, "idle after hello: server RSS not measured for a broker of --address"));
    CHECK_FALSE(contains(out, "nan"));
  }
  SECTION("handshakes") {
    const auto [code, out] = run_bench(address_of(server), "handshakes --clients 1 --seconds 0.2");
    INFO(out);
    CHECK(code == 0);
    CHECK(contains(out, " us per connect ("));
    CHECK(contains(out, "; broker not measured for a broker of --address"));
    CHECK_FALSE(contains(out, "nan"));
  }
  SECTION("CPU per message, every workload") {
    for (const char* args : {"fanout --count 1000 --size 64", "route --users 100 --gateways 4 --count 500 --window 0",
                             "durable --count 100 --size 64 --fsync-probe 0"}) {
      INFO(args);
      const auto [code, json] = run_bench(address_of(server), std::string("--json ") + args);
      INFO(json);
      CHECK(code == 0);
      CHECK(contains(json, R"("broker_s":null,"total_s":null,"us_per_msg":null,)"));
      CHECK(contains(json, R"("broker_note":"not measured for a broker of --address")"));
    }
  }
}

TEST_CASE("switchyard-bench durable probes the disk of a broker of --address on this machine and counts its fsyncs",
          "[bench]") {
  auto server = start_server_process();
  const auto [code, out] =
      run_bench(address_of(server), "--json durable --count 100 --size 64 --window 8 --fsync-probe 0.05", true);
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"("group_commit":{"appends":100,"batches":)"));
  CHECK(contains(out, R"("fsync_probe":{"dir":")"));
}

TEST_CASE("switchyard-bench revokes its leases on a broker of --address, and their routes go with them", "[bench]") {
  auto server = start_server_process();
  auto c = observer(server);
  for (const char* args :
       {"leases --leases 300 --window 16", "route --users 200 --gateways 4 --count 500 --size 64 --window 16",
        "route --users 200 --gateways 4 --count 500 --size 64 --window 0",
        "offers --users 200 --gateways 4 --count 500 --rounds 1 --rate 1000 --seconds 0.2 "
        "--pending 200 --size 64 --window 16"}) {
    INFO(args);
    const auto [code, out] = run_bench(address_of(server), args);
    INFO(out);
    CHECK(code == 0);
    CHECK(contains(out, "  cleanup: revoked "));
    CHECK_FALSE(contains(out, "left on the broker"));
    const auto leases = c->lease_list();
    REQUIRE(leases);
    CHECK(leases->empty());
    const auto entries = c->registry_list("");
    REQUIRE(entries);
    CHECK(entries->empty());
  }
  // The offers workload withdrew its pending offers: none left for its users.
  CHECK(stat_of(server, "offers_pending") == 0);
}

TEST_CASE("switchyard-bench appends to a stream of its own per run on a broker of --address and empties it",
          "[bench]") {
  auto server = start_server_process({"--durability", "none"});
  auto c = observer(server);
  std::set<std::string> streams;
  for (const char* args : {"--json durable --count 200 --size 64", "--json durable --count 200 --size 64",
                           "--json replay --count 200 --size 64"}) {
    INFO(args);
    const auto [code, out] = run_bench(address_of(server), args, true);
    INFO(out);
    CHECK(code == 0);
    const auto stream = json_string(out, "stream");
    CHECK(stream.starts_with("bench."));
    // The summary says what is left, and why.
    CHECK(contains(out, "left on the broker: stream " + stream + ", emptied"));
    CHECK(contains(out, "no request deletes a stream"));
    streams.insert(stream);
  }
  CHECK(streams.size() == 3);
  const auto listed = c->stream_list();
  REQUIRE(listed);
  CHECK(listed->size() == 3);
  for (const auto& s : *listed) {
    INFO(s.name);
    CHECK(streams.count(s.name) == 1);
    // The broker trims in the background, about once a second.
    CHECK(wait_until(
        [&] {
          const auto info = c->stream_info(s.name);
          return info && info->records == 0;
        },
        30s));
  }
}

TEST_CASE("switchyard-bench refuses --sub-address without --address", "[bench]") {
  const auto [code, out] =
      run_for_exit_code(std::string(SWITCHYARD_BENCH_BINARY) + " fanout --count 10 --sub-address 127.0.0.1:1 2>&1");
  INFO(out);
  CHECK(code == 2);
  CHECK(contains(out, "--sub-address needs --address"));
}

TEST_CASE("switchyard-bench fanout with --sub-address connects its subscribers there and its publisher to --address",
          "[bench]") {
  // Two separate brokers: nothing crosses, so the subscribers end idle; what
  // is checked is where each client connected.
  auto pub_broker = start_server_process();
  auto sub_broker = start_server_process();
  const auto [code, out] = run_bench(address_of(pub_broker),
                                     "fanout --subs 3 --count 10 --idle 0.3 --sub-address " + address_of(sub_broker));
  INFO(out);
  // Every accepted count includes the observer's own connection; the
  // publisher's broker also saw the bench's publisher (and its Stats).
  CHECK(stat_of(sub_broker, "connections_accepted_total") == 3 + 1);
  const auto at_pub = stat_of(pub_broker, "connections_accepted_total");
  CHECK(at_pub >= 1 + 1);
  CHECK(at_pub <= 2 + 1);
  (void)code;
}

TEST_CASE("switchyard-bench route with --sub-address connects its gateways there and its service to --address",
          "[bench]") {
  // Two separate brokers: the service's sends find no route (nothing
  // crosses); what is checked is where each client connected.
  auto service_broker = start_server_process();
  auto gateway_broker = start_server_process();
  const auto [code, out] =
      run_bench(address_of(service_broker),
                "route --users 20 --gateways 2 --count 10 --idle 0.3 --sub-address " + address_of(gateway_broker));
  INFO(out);
  // Each count includes the observer's own connection: the gateway broker
  // saw exactly the two gateways.
  CHECK(stat_of(gateway_broker, "connections_accepted_total") == 2 + 1);
  CHECK(stat_of(service_broker, "connections_accepted_total") >= 1 + 1);
  // Across nodes, order is checked per user (docs/cluster.md, "Order").
  CHECK(contains(out, "(order per user)"));
  (void)code;
}

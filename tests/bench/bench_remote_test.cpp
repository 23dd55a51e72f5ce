// The real switchyard-bench binary against a broker it did not start
// (--address), as on a shared broker: what it reports about that broker,
// and what it refuses.

#include "tests/support/process.hpp"

#include <catch2/catch.hpp>

#include <string>

using switchyard::test::run_for_exit_code;
using switchyard::test::start_server_process;

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

TEST_CASE("switchyard-bench says server figures are not measured for a broker of --address, never nan",
          "[bench]") {
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
    CHECK(contains(out, "CPU per connect: broker not measured for a broker of --address, clients "));
    CHECK_FALSE(contains(out, "nan"));
  }
}

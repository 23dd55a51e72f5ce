// End to end: the example programs run against a real server, and their
// command line (examples/example_args.hpp): --help, --address or
// SWITCHYARD_ADDRESS, and usage errors that exit 2 before connecting. The
// dispatch example's run is checked for its structure and invariants, not
// its figures (they depend on timing only through the caps).

#include "tests/support/process.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <string>

using switchyard::test::run_command;
using switchyard::test::run_for_exit_code;

namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

const char* const examples[] = {SWITCHYARD_EXAMPLE_PUBSUB, SWITCHYARD_EXAMPLE_GATEWAY, SWITCHYARD_EXAMPLE_SEND,
                                SWITCHYARD_EXAMPLE_DISPATCH};

// Runs `command` with SWITCHYARD_ADDRESS unset (unless `command` sets it):
// exit code, stdout and stderr together.
std::pair<int, std::string> run(const std::string& command) {
  return run_for_exit_code("env -u SWITCHYARD_ADDRESS " + command + " 2>&1");
}

// The number after "key": in `json` (-1 if absent or not a number).
long long json_number(const std::string& json, const std::string& key) {
  const std::string start = "\"" + key + "\":";
  const auto at = json.find(start);
  if (at == std::string::npos) return -1;
  try {
    return std::stoll(json.substr(at + start.size()));
  } catch (const std::exception&) {
    return -1;
  }
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
  const auto [code, out] =
      run("SWITCHYARD_ADDRESS=127.0.0.1:" + std::to_string(server.port()) + " " + SWITCHYARD_EXAMPLE_PUBSUB);
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
      {std::string(SWITCHYARD_EXAMPLE_DISPATCH) + " --requests 0",
       "--requests must be a whole number from 1 to 100000, got '0'"},
      {std::string(SWITCHYARD_EXAMPLE_DISPATCH) + " --never-ack 101",
       "--never-ack must be a whole number from 0 to 100, got '101'"},
      {std::string(SWITCHYARD_EXAMPLE_DISPATCH) + " --policy band", "unknown option --policy"},
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

TEST_CASE("the dispatch example runs both policies on the broker's offers and accounts for every offer",
          "[e2e][examples]") {
  switchyard::test::test_server server;
  // 200 requests at 250/s per policy; 20% of the devices never ack, so the
  // timeout path (fallback, next driver) runs under either policy; a cap
  // of 2 per 100 requests binds, so drivers are answered `capped` too.
  const auto [code, out] =
      run(std::string(SWITCHYARD_EXAMPLE_DISPATCH) +
          " --requests 200 --never-ack 20 --cap 2 --json --address 127.0.0.1:" + std::to_string(server.port()));
  INFO(out);
  CHECK(code == 0);
  // The human lines (stderr with --json), one per policy, as the seed prints them.
  CHECK(contains(out, "push to 3 nearest: offers="));
  CHECK(contains(out, "1 offer, fairness band + cap 2 per 100 requests (400 ms): offers="));
  CHECK(contains(out, "fallback to platform push"));
  // The JSON: the last line.
  const auto last = out.rfind('{', out.rfind("\"policies\""));
  REQUIRE(last != std::string::npos);
  const std::string json = out.substr(last);
  CHECK(contains(json, R"("drivers":200,"gateways":20,"requests":200,"rate":250,"cap_k":2,"cap_window_ms":400,)"));
  CHECK(contains(json, R"("never_ack":40,)"));
  CHECK(contains(json, R"("ok":true})"));
  const auto band_at = json.find(R"({"policy":"band_cap")");
  const auto top3_at = json.find(R"({"policy":"push_top3")");
  REQUIRE(top3_at != std::string::npos);
  REQUIRE(band_at != std::string::npos);
  const std::string top3 = json.substr(top3_at, band_at - top3_at), band = json.substr(band_at);
  for (const auto* p : {&top3, &band}) {
    const std::string& policy = *p;
    INFO(policy);
    const auto offers = json_number(policy, "offers");
    // Every routed offer got one first receipt: acked or timed out.
    CHECK(json_number(policy, "acked") + json_number(policy, "timeouts") == offers);
    CHECK(json_number(policy, "fallbacks") == json_number(policy, "timeouts"));
    CHECK(json_number(policy, "timeouts") > 0);
    // Every offer reached its gateway; the devices acked or ignored each,
    // and each one ignored timed out (a slow device may time out too).
    CHECK(json_number(policy, "gw_delivered") == offers);
    CHECK(json_number(policy, "gw_acks") + json_number(policy, "gw_ignored") == offers);
    CHECK(json_number(policy, "gw_acks") == json_number(policy, "acked") + json_number(policy, "late_acks"));
    CHECK(json_number(policy, "gw_ignored") <= json_number(policy, "timeouts"));
    // Every send that reached a driver was withdrawn at half its window;
    // what was still pending then had not been acked.
    CHECK(json_number(policy, "withdrawals") >= 200);
    CHECK(json_number(policy, "withdraw_not_found") == 0);
    CHECK(json_number(policy, "withdraw_pending") <= json_number(policy, "timeouts"));
    CHECK(json_number(policy, "no_route") == 0);
    CHECK(json_number(policy, "errors") == 0);
    CHECK(json_number(policy, "drivers_offered") >= 1);
    CHECK(json_number(policy, "drivers_offered") <= 200);
    CHECK(json_number(policy, "max_per_driver") <= offers);
    CHECK(contains(policy, R"("checks_passed":true)"));
  }
  // Three devices acked per request when broadcasting (200 candidates:
  // never short of one), uncapped.
  CHECK(json_number(top3, "acked") == 3 * 200);
  CHECK(json_number(top3, "unserved") == 0);
  CHECK(json_number(top3, "capped") == 0);
  CHECK(contains(top3, R"("cap_bound":null)"));
  // With the band each request has one device acked, or is unserved when
  // every one of its 15 candidates was capped or timed out.
  CHECK(json_number(band, "acked") + json_number(band, "unserved") == 200);
  CHECK(json_number(band, "capped") > 0);
  CHECK(json_number(band, "sends") == json_number(band, "offers") + json_number(band, "capped"));
  // No driver over K = 2 per window, over the windows the run spanned.
  CHECK(json_number(band, "max_per_driver") <= json_number(band, "cap_bound"));
  CHECK(json_number(band, "cap_bound") >= 2);
  CHECK(json_number(band, "offers") < json_number(top3, "offers"));
}

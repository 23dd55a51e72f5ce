// End to end: the broker's operational log lines at info (docs/operations.md,
// "Logs"): lease expiries summed per sweep and retention trims, one line
// per event kind at most once a second, never one per lease or record.

#include "switchyard/client.hpp"
#include "tests/support/broker_log_capture.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <regex>
#include <string>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

// The sum of the first number captured by `pattern` over every line of
// `text` that matches it.
std::uint64_t sum_of(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  std::uint64_t sum = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    sum += std::stoull((*it)[1].str());
  return sum;
}

std::size_t lines_with(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("expired leases are logged per sweep with the routes and inboxes they took, not a line each", "[e2e][logs]") {
  broker_log_capture log;
  auto config = test_server::default_config();
  config.log_level = "info";
  config.lease_min_ttl = 100ms;
  config.sweep_period = 20ms;
  test_server server(config);
  auto gw = connect_to(server, "gateway");
  // One lease carrying three routes and an inbox; and two more leases.
  // 1 s: the puts and the inbox must land before it expires, however slowly
  // this process runs.
  auto lease = gw->lease_grant(1000ms);
  REQUIRE(lease);
  for (int i = 0; i < 3; ++i) REQUIRE(gw->registry_put("user-" + std::to_string(i), "gw-1", lease->id));
  REQUIRE_FALSE(gw->open_inbox("gw-1", lease->id, [](const inbox_message&) {}));
  REQUIRE(gw->lease_grant(1000ms));
  REQUIRE(gw->lease_grant(1000ms));
  const std::string leases = R"(lease sweep: (\d+) leases expired)";
  REQUIRE(wait_until([&] { return sum_of(log.text(), leases) == 3; }, 10s));
  const auto text = log.text();
  INFO(text);
  CHECK(sum_of(text, R"(, (\d+) routes and)") == 3);
  CHECK(sum_of(text, R"(routes and (\d+) inboxes removed with them)") == 1);
  CHECK(lines_with(text, "lease sweep:") <= 2);  // one line at most a second: never one per lease
}

TEST_CASE("records trimmed by retention are logged as counts, not one line each", "[e2e][logs]") {
  broker_log_capture log;
  temp_dir dir;
  auto config = with_data(dir);
  config.log_level = "info";
  config.retention_max_records = 2;
  config.sweep_period = 20ms;
  test_server server(config);
  auto c = connect_to(server, "appender");
  for (int i = 0; i < 7; ++i) REQUIRE(c->append("audit", text("record")));
  const std::string trimmed = R"(retention: (\d+) records trimmed since the last report)";
  REQUIRE(wait_until([&] { return sum_of(log.text(), trimmed) == 5; }, 10s));
  const auto text = log.text();
  INFO(text);
  CHECK(text.find("(5 in all, 5 of them by commits)") != std::string::npos);
  CHECK(lines_with(text, "retention: ") <= 5);
}

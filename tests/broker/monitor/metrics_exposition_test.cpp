// Unit tests for the Prometheus text of a snapshot (metrics_exposition):
// names, HELP and TYPE per family, cumulative buckets. promtool checks the
// real endpoint's output in tests/e2e/http_monitor_test.cpp.

#include "broker/monitor/metric_catalog.hpp"
#include "broker/monitor/metrics_exposition.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

using namespace switchyard::broker;
using namespace std::chrono_literals;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

}  // namespace

TEST_CASE("every catalog figure is exposed with the switchyard_ prefix, its HELP, TYPE and value",
          "[broker][metrics]") {
  metrics_snapshot m;
  m.counters.published = 42;
  m.connections = 3;
  const auto text = prometheus_text(m, {"1.2.3", 99, 1500});
  for (const auto& f : metrics_of(m)) {
    INFO(f.name);
    CHECK(has_line(text, "# HELP switchyard_" + std::string(f.name) + " " + std::string(f.help)));
    CHECK(has_line(text, "# TYPE switchyard_" + std::string(f.name) + (f.counter ? " counter" : " gauge")));
    CHECK(has_line(text, "switchyard_" + std::string(f.name) + " " + std::to_string(f.value)));
  }
  CHECK(has_line(text, "switchyard_published_total 42"));
  CHECK(has_line(text, "switchyard_connections 3"));
  CHECK(has_line(text, R"(switchyard_build_info{version="1.2.3",server_instance="99"} 1)"));
  CHECK(has_line(text, "switchyard_uptime_seconds 1.500"));
}

TEST_CASE("histogram buckets are cumulative, end in +Inf equal to the count, and carry the sum in seconds",
          "[broker][metrics]") {
  metrics_snapshot m;
  m.counters.delivery_latency.observe(20us);
  m.counters.delivery_latency.observe(20us);
  m.counters.delivery_latency.observe(2ms);
  m.append_latency.observe(30s);
  const auto text = prometheus_text(m, {"x", 1, 0});
  CHECK(has_line(text, "# TYPE switchyard_delivery_latency_seconds histogram"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="1e-05"} 0)"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="2.5e-05"} 2)"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="0.001"} 2)"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="0.0025"} 3)"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="10"} 3)"));
  CHECK(has_line(text, R"(switchyard_delivery_latency_seconds_bucket{le="+Inf"} 3)"));
  CHECK(has_line(text, "switchyard_delivery_latency_seconds_sum 0.002040000"));
  CHECK(has_line(text, "switchyard_delivery_latency_seconds_count 3"));
  CHECK(has_line(text, R"(switchyard_log_append_latency_seconds_bucket{le="10"} 0)"));
  CHECK(has_line(text, R"(switchyard_log_append_latency_seconds_bucket{le="+Inf"} 1)"));
}

TEST_CASE("label values and help text are escaped", "[broker][metrics]") {
  const auto text = prometheus_text(metrics_snapshot{}, {"a\"b\\c\nd", 1, 0});
  CHECK(has_line(text, R"(switchyard_build_info{version="a\"b\\c\nd",server_instance="1"} 1)"));
}

TEST_CASE("docs/operations.md lists every catalog figure with its type", "[broker][metrics][docs]") {
  std::ifstream in(std::string(SWITCHYARD_SOURCE_DIR) + "/docs/operations.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& m : switchyard::broker::metrics_of(switchyard::broker::metrics_snapshot{})) {
    INFO(m.name);
    CHECK(doc.find("| `" + std::string(m.name) + "` | " + (m.counter ? "counter" : "gauge") + " |") !=
          std::string::npos);
  }
}

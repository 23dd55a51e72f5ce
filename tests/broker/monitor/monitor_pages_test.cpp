// Unit tests for what the monitoring port renders (monitor_pages): rates,
// the JSON of /stats and /connz, and HTML escaping on the status page.

#include "broker/monitor/monitor_pages.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace switchyard::broker;
using namespace std::chrono_literals;

TEST_CASE("rates are the counters' growth per second between two snapshots", "[broker][monitor]") {
  metrics_snapshot a, b;
  a.counters.published = 100;
  b.counters.published = 400;
  b.counters.bytes_out = 3000;
  b.group_commit.records = 15;
  const auto r = rates_between(a, b, 1.5);
  CHECK(r.seconds == 1.5);
  CHECK(r.published == Approx(200));
  CHECK(r.bytes_out == Approx(2000));
  CHECK(r.appends == Approx(10));
  CHECK(rates_between(a, b, 0).seconds == 0);
  CHECK(rates_between(b, a, 1).published == 0);  // a restart's counters never give a negative rate
}

TEST_CASE("connz JSON has the fields and order of conns --json", "[broker][monitor]") {
  switchyard::protocol::conn_info_fields c;
  c.id = 7;
  c.name = "gw \"eu\"";
  c.client_id = "cid";
  c.address = "127.0.0.1:5000";
  c.age_ms = 10;
  c.idle_ms = 2;
  c.capabilities = {"routing", "log"};
  c.subscriptions = 3;
  c.inboxes = {"gw-eu"};
  c.inbox_leases = {18446744073709551615ull};
  c.tls = true;
  const auto json = connz_json(std::span(&c, 1), 5, 7);
  CHECK(json ==
        R"({"total":5,"next_cursor":7,"conns":[{"id":7,"name":"gw \"eu\"","client_id":"cid","principal":"",)"
        R"("address":"127.0.0.1:5000","age_ms":10,"idle_ms":2,"capabilities":["routing","log"],"subscriptions":3,)"
        R"("inboxes":[{"id":"gw-eu","lease":"18446744073709551615"}],"pending_bytes":0,"dropped":0,"bytes_in":0,)"
        R"("bytes_out":0,"tls":true}]})");
}

TEST_CASE("stats JSON groups counters, gauges and histogram summaries", "[broker][monitor]") {
  stats_report st;
  st.version = "1.0";
  st.instance_id = 12;
  st.uptime_ms = 5;
  st.settings = {{"listen", "127.0.0.1:7878"}};
  st.values = {{"published_total", 4, true}, {"connections", 2, false}};
  metrics_snapshot m;
  m.counters.delivery_latency.observe(30us);
  const auto json = stats_json(st, m);
  CHECK(json.starts_with(
      R"({"version":"1.0","server_instance":"12","uptime_ms":5,"settings":{"listen":"127.0.0.1:7878"},)"
      R"("counters":{"published_total":4},"gauges":{"connections":2},"histograms":{)"));
  CHECK(json.find(R"("delivery_latency_seconds":{"count":1,"sum_seconds":0.000030,"p50_le_us":50,"p99_le_us":50,)") !=
        std::string::npos);
}

TEST_CASE("the status page escapes client-chosen names and says why it is not ready", "[broker][monitor]") {
  stats_report st;
  st.version = "1.0";
  metrics_snapshot m;
  switchyard::protocol::conn_info_fields c;
  c.id = 1;
  c.name = "<script>alert(1)</script>";
  status_view v;
  v.stats = &st;
  v.metrics = &m;
  v.ready = {false, "draining"};
  v.conns = std::span(&c, 1);
  v.conns_total = 1;
  const auto html = status_html(v);
  CHECK(html.find("<script>") == std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(html.find("not ready: draining") != std::string::npos);
  CHECK(html.find("<meta http-equiv=\"refresh\" content=\"2\">") != std::string::npos);
}

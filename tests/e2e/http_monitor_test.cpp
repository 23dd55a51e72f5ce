// End to end: the HTTP monitoring port (--http; broker/monitor/http_monitor.hpp)
// of a real broker, read with a real HTTP client, checked with the real
// promtool (Debian's prometheus package) and rendered by a real headless
// Chromium.

#include "broker/monitor/http_monitor.hpp"
#include "switchyard/client.hpp"
#include "tests/support/broker_log_capture.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

broker::server_config monitored(broker::server_config c = test_server::default_config()) {
  c.http_host = "127.0.0.1";
  c.http_port = 0;
  return c;
}

// Publishes `n` messages to a subscriber and waits for them.
void some_traffic(test_server& server, int n) {
  auto sub = connect_to(server, "subscriber");
  auto pub = connect_to(server, "publisher");
  std::atomic<int> got{0};
  REQUIRE(sub->subscribe("orders.>", [&](const message&) { ++got; }));
  for (int i = 0; i < n; ++i) REQUIRE_FALSE(pub->publish("orders.eu", std::string_view("order")));
  REQUIRE_FALSE(pub->flush());
  REQUIRE(wait_until([&] { return got == n; }));
}

// The value of an unlabelled sample line "name value" in a /metrics body.
double sample(const std::string& body, const std::string& name) {
  const std::regex line("(^|\n)" + name + " ([0-9.e+-]+)\n");
  std::smatch m;
  if (!std::regex_search(body, m, line)) FAIL("no sample " << name);
  return std::stod(m[2].str());
}

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

}  // namespace

TEST_CASE("without --http the broker opens no monitoring port", "[e2e][http]") {
  test_server server;
  CHECK(server.http_port() == 0);
}

TEST_CASE("/metrics is the Prometheus text format that promtool check metrics accepts", "[e2e][http]") {
  temp_dir dir;
  test_server server(monitored(with_data(dir)));
  REQUIRE(server.http_port() != 0);
  some_traffic(server, 20);
  auto c = connect_to(server, "appender");
  REQUIRE(c->append("audit", text("a")));

  const auto r = http_get(server.http_port(), "/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r.body.find("# TYPE switchyard_published_total counter\n") != std::string::npos);
  CHECK(r.body.find("# TYPE switchyard_connections gauge\n") != std::string::npos);
  CHECK(r.body.find("# TYPE switchyard_delivery_latency_seconds histogram\n") != std::string::npos);
  CHECK(sample(r.body, "switchyard_published_total") == 20);
  CHECK(sample(r.body, "switchyard_streams") == 1);
  CHECK(sample(r.body, "switchyard_log_appends_total") == 1);
  // Every delivery was written: at least one write observed, and the
  // +Inf bucket holds the count.
  const double writes = sample(r.body, "switchyard_delivery_latency_seconds_count");
  CHECK(writes >= 1);
  CHECK(sample(r.body, "switchyard_delivery_latency_seconds_bucket\\{le=\"\\+Inf\"\\}") == writes);
  CHECK(sample(r.body, "switchyard_log_append_latency_seconds_count") == 1);

  temp_dir out;
  const auto file = out.path() / "metrics.txt";
  std::ofstream(file) << r.body;
  const auto [code, said] = run_for_exit_code("promtool check metrics < " + quoted(file) + " 2>&1");
  INFO(said);
  CHECK(code == 0);
  CHECK(said.empty());  // no lint warnings either
}

TEST_CASE("/healthz answers ok and /readyz turns 503 draining once a drain begins", "[e2e][http]") {
  auto config = monitored();
  // Long: the server stops itself once its clients are gone, and this
  // test must still be looking then, however slowly it runs.
  config.drain_window = 60s;
  test_server server(config);
  auto held = connect_to(server, "held");  // keeps the drain under way while we look
  CHECK(http_get(server.http_port(), "/healthz").body == "ok\n");
  const auto before = http_get(server.http_port(), "/readyz");
  CHECK(before.status == 200);
  CHECK(before.body == "ready\n");

  client_options o;
  o.port = server.port();
  o.admin = true;
  auto op = client::connect(o);
  REQUIRE(op);
  REQUIRE_FALSE((*op)->drain(60s));
  REQUIRE(wait_until([&] { return http_get(server.http_port(), "/readyz").status == 503; }));
  CHECK(http_get(server.http_port(), "/readyz").body == "not ready: draining\n");
  CHECK(http_get(server.http_port(), "/healthz").status == 200);  // alive all the same
}

TEST_CASE("/stats carries the settings, counters, gauges and latency histograms", "[e2e][http]") {
  test_server server(monitored());
  some_traffic(server, 7);
  const auto r = http_get(server.http_port(), "/stats");
  REQUIRE(r.status == 200);
  CHECK(r.content_type == "application/json");
  CHECK(r.body.find(R"("version":")") != std::string::npos);
  CHECK(r.body.find(R"("http":"127.0.0.1:)" + std::to_string(server.http_port()) + "\"") != std::string::npos);
  CHECK(r.body.find(R"("published_total":7)") != std::string::npos);
  CHECK(r.body.find(R"("delivered_total":7)") != std::string::npos);
  CHECK(r.body.find(R"("delivery_latency_seconds":{"count":)") != std::string::npos);
  CHECK(r.body.find(R"("log_append_latency_seconds":{"count":0,)") != std::string::npos);
}

TEST_CASE("/connz lists connections with the fields of conns --json and pages with a cursor", "[e2e][http]") {
  test_server server(monitored());
  auto a = connect_to(server, "alpha");
  auto b = connect_to(server, "beta");
  auto c = connect_to(server, "gamma");
  REQUIRE(
      wait_until([&] { return http_get(server.http_port(), "/connz").body.find("\"total\":3") != std::string::npos; }));

  const auto first = http_get(server.http_port(), "/connz?sort=id&limit=2");
  REQUIRE(first.status == 200);
  CHECK(first.body.find(R"("name":"alpha")") != std::string::npos);
  CHECK(first.body.find(R"("name":"beta")") != std::string::npos);
  CHECK(first.body.find(R"("name":"gamma")") == std::string::npos);
  CHECK(first.body.find(R"("address":"127.0.0.1:)") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(first.body, m, std::regex(R"("next_cursor":([0-9]+))")));
  const auto rest = http_get(server.http_port(), "/connz?limit=2&cursor=" + m[1].str());
  CHECK(rest.body.find(R"("name":"gamma")") != std::string::npos);
  CHECK(rest.body.find(R"("next_cursor":0)") != std::string::npos);
}

TEST_CASE("/connz refuses an unknown sort, a limit out of range and an unknown parameter with 400", "[e2e][http]") {
  test_server server(monitored());
  for (const auto* target : {"/connz?sort=size", "/connz?limit=0", "/connz?limit=1001", "/connz?limit=-1",
                             "/connz?cursor=abc", "/connz?colour=red"}) {
    INFO(target);
    const auto r = http_get(server.http_port(), target);
    CHECK(r.status == 400);
    CHECK(r.body.find("\"error\"") != std::string::npos);
  }
}

TEST_CASE("an unknown path is 404, a POST 405 with Allow, and HEAD has the headers only", "[e2e][http]") {
  test_server server(monitored());
  CHECK(http_get(server.http_port(), "/nope").status == 404);
  const auto post = http_request(server.http_port(), "POST", "/metrics", "Content-Length: 0\r\n");
  CHECK(post.status == 405);
  CHECK(post.allow == "GET, HEAD");
  const auto head = http_request(server.http_port(), "HEAD", "/metrics");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
}

TEST_CASE("a request header past 8 KiB is refused and the broker serves on", "[e2e][http]") {
  test_server server(monitored());
  const auto r = http_request(server.http_port(), "GET", "/healthz", "X-Big: " + std::string(9000, 'x') + "\r\n");
  CHECK((r.closed || r.status == 400));
  CHECK(http_get(server.http_port(), "/healthz").status == 200);
  auto c = connect_to(server, "still-serving");
  CHECK(c->connected());
}

TEST_CASE("the monitoring port holds at most 64 connections at once", "[e2e][http]") {
  test_server server(monitored());
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> idle;
  for (std::size_t i = 0; i < http::http_endpoint::max_clients; ++i) {
    auto& s = idle.emplace_back(io);
    s.connect({asio::ip::make_address("127.0.0.1"), server.http_port()});
  }
  // Past the cap a connection is closed at accept, unanswered.
  REQUIRE(wait_until([&] { return http_get(server.http_port(), "/healthz").closed; }));
  idle.clear();  // the idle ones close: the port answers again
  REQUIRE(wait_until([&] { return http_get(server.http_port(), "/healthz").status == 200; }));
}

TEST_CASE("a monitoring port already in use stops the start naming it, before the broker announces it listens",
          "[e2e][http]") {
  asio::io_context io;
  asio::ip::tcp::acceptor taken(io, {asio::ip::make_address("127.0.0.1"), 0});
  broker_log_capture log;
  auto c = monitored();
  c.log_level = "info";
  c.http_port = taken.local_endpoint().port();
  broker::server s(c);
  CHECK_THROWS_WITH(s.start(),
                    Catch::Contains("--http") && Catch::Contains("127.0.0.1:" + std::to_string(c.http_port)));
  CHECK(log.text().find("listening on") == std::string::npos);
}

TEST_CASE("a non-loopback --http is refused without --http-public", "[e2e][http]") {
  auto c = monitored();
  c.http_host = "0.0.0.0";
  CHECK_THROWS_WITH(broker::server(c), Catch::Contains("--http-public"));
  c.http_public = true;
  CHECK_NOTHROW(broker::server(c));
}

TEST_CASE("the status page renders in headless Chromium with the broker's state, and a screenshot is kept",
          "[e2e][http]") {
  temp_dir dir;
  test_server server(monitored(with_data(dir)));
  some_traffic(server, 50);
  auto gw = connect_to(server, "gateway-eu-1");
  auto lease = gw->lease_grant(30s);
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox("gw-eu-1", lease->id, [](const inbox_message&) {}));
  REQUIRE(gw->append("orders", text("o1")));
  const auto page = http_get(server.http_port(), "/");
  REQUIRE(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");

  temp_dir profile;
  const std::string url = "http://127.0.0.1:" + std::to_string(server.http_port()) + "/";
  const std::string chromium =
      "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage "
      "--user-data-dir=" +
      quoted(profile.path()) + " --window-size=1280,1100 ";
  // The DOM as the browser built it: the page parsed, the state shown.
  const auto [dom_code, dom] = run_for_exit_code(chromium + "--dump-dom " + url + " 2>/dev/null");
  REQUIRE(dom_code == 0);
  CHECK(dom.find("id=\"state\">ready</span>") != std::string::npos);
  CHECK(dom.find("gateway-eu-1") != std::string::npos);
  CHECK(dom.find("gw-eu-1") != std::string::npos);
  CHECK(std::regex_search(dom, std::regex(R"(<td>orders</td>)")));

  const std::filesystem::path shots = SWITCHYARD_SCREENSHOT_DIR;
  std::filesystem::create_directories(shots);
  const auto png = shots / "status-page.png";
  std::filesystem::remove(png);
  const auto [shot_code, said] = run_for_exit_code(chromium + "--screenshot=" + quoted(png) + " " + url + " 2>&1");
  INFO(said);
  REQUIRE(shot_code == 0);
  REQUIRE(std::filesystem::exists(png));
  std::ifstream in(png, std::ios::binary);
  char magic[8]{};
  in.read(magic, 8);
  CHECK(std::string(magic, 8) == "\x89PNG\r\n\x1a\n");
  CHECK(std::filesystem::file_size(png) > 10'000);  // a page, not a blank
}

TEST_CASE("the Grafana dashboard and the Prometheus job in contrib/ use only metrics the broker exposes",
          "[e2e][http]") {
  const std::filesystem::path contrib = SWITCHYARD_SOURCE_DIR "/contrib";
  const auto [config_code, config_said] =
      run_for_exit_code("promtool check config " + quoted(contrib / "prometheus.yml") + " 2>&1");
  INFO(config_said);
  CHECK(config_code == 0);

  temp_dir dir;
  test_server server(monitored(with_data(dir)));
  const auto metrics = http_get(server.http_port(), "/metrics").body;
  std::ifstream in(contrib / "grafana-dashboard.json");
  const std::string dashboard((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(dashboard.size() > 1000);
  const std::regex name(R"(switchyard_[a-z_]+)");
  int checked = 0;
  for (auto it = std::sregex_iterator(dashboard.begin(), dashboard.end(), name); it != std::sregex_iterator(); ++it) {
    const std::string n = it->str();
    INFO(n);
    const bool exposed = metrics.find("\n# TYPE " + n) != std::string::npos ||
                         metrics.find("\n" + n + " ") != std::string::npos ||
                         metrics.find("\n" + n + "{") != std::string::npos;
    CHECK(exposed);
    ++checked;
  }
  CHECK(checked >= 20);
}

// SIGHUP (broker::server::reload) against every row of the settings table:
// each setting changed in the config file is either applied (and logged
// as a change) or named in the "take effect only at a restart" warning.

#include "broker/config/setting_table.hpp"
#include "tests/support/broker_log_capture.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tls_certs.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace switchyard;
using broker::takes_effect;

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// The first line of `log` after `from` that starts with `prefix` ("" if none).
std::string line_after(const std::string& log, std::size_t from, std::string_view prefix) {
  for (auto at = log.find(prefix, from); at != std::string::npos; at = log.find(prefix, at + 1)) {
    if (at != 0 && log[at - 1] != '\n') continue;
    return log.substr(at, log.find('\n', at) - at);
  }
  return {};
}

// The first line of `log` after `from` that holds `part` ("" if none).
std::string line_holding(const std::string& log, std::size_t from, std::string_view part) {
  const auto at = log.find(part, from);
  if (at == std::string::npos) return {};
  const auto begin = log.rfind('\n', at);
  const auto start = begin == std::string::npos || begin < from ? from : begin + 1;
  return log.substr(start, log.find('\n', at) - start);
}

std::string quoted(const std::string& text) { return "\"" + text + "\""; }

// A value other than the running one for every setting, as config-file
// lines (with the settings it needs to validate), for a broker running
// with TLS from `certs` ("ca-broker"). A row missing here fails the walk:
// a new setting gets a value to reload with.
std::map<std::string, std::string> changed_values(const test::tls_certs& certs) {
  const std::string other_cert =
      "tls-cert = " + quoted(certs.pem("other-ca-broker")) + "\ntls-key = " + quoted(certs.key("other-ca-broker"));
  return {
      {"listen", "listen = \"127.0.0.1:1\""},
      {"data-dir", "data-dir = \"elsewhere\""},
      {"port-file", "port-file = \"port.txt\""},
      {"http", "http = \"127.0.0.1:0\""},
      {"http-public", "http = \"127.0.0.1:0\"\nhttp-public = true"},
      {"max-frame", "max-frame = 65536"},
      {"max-connections", "max-connections = 77"},
      {"admin-slots", "admin-slots = 9"},
      {"max-hellos-per-s", "max-hellos-per-s = 500"},
      {"hello-burst", "max-hellos-per-s = 500\nhello-burst = 50"},
      {"drain-window-ms", "drain-window-ms = 4000"},
      {"shutdown-grace-ms", "shutdown-grace-ms = 900"},
      {"hello-timeout-ms", "hello-timeout-ms = 3000"},
      {"heartbeat-ms", "heartbeat-ms = 7000"},
      {"max-pending-bytes", "max-pending-bytes = 33554432"},
      {"write-coalesce-turns", "write-coalesce-turns = 3"},
      {"write-coalesce-us", "write-coalesce-us = 5000"},
      {"write-coalesce-bytes", "write-coalesce-bytes = 32768"},
      {"frame-timeout-ms", "frame-timeout-ms = 5000"},
      {"max-incomplete-bytes", "max-incomplete-bytes = 33554432"},
      {"max-subscriptions", "max-subscriptions = 99"},
      {"max-inboxes", "max-inboxes = 98"},
      {"max-leases", "max-leases = 97"},
      {"max-registry-entries", "max-registry-entries = 96"},
      {"max-offers", "max-offers = 95"},
      {"max-offer-bytes", "max-offer-bytes = 1048576"},
      {"max-pending-per-key", "max-pending-per-key = 4"},
      {"max-offer-expiry-ms", "max-offer-expiry-ms = 60000"},
      {"exposure-window-ms", "exposure-window-ms = 60000"},
      {"max-exposure-keys", "max-exposure-keys = 94"},
      {"flag", "flag = [\"offers=50\"]"},
      {"slow-consumer", "slow-consumer = \"disconnect\""},
      {"lease-min-ttl-ms", "lease-min-ttl-ms = 2000"},
      {"lease-max-ttl-ms", "lease-max-ttl-ms = 60000"},
      {"sweep-ms", "sweep-ms = 50"},
      {"max-expiries-per-sweep", "max-expiries-per-sweep = 500"},
      {"stall-threshold-ms", "stall-threshold-ms = 200"},
      {"durability", "durability = \"batch\""},
      {"sync-interval-ms", "sync-interval-ms = 20"},
      {"log-max-bytes", "log-max-bytes = 16777216"},
      {"retention-max-records", "retention-max-records = 1000"},
      {"retention-max-age-ms", "retention-max-age-ms = 60000"},
      {"retention-max-bytes", "retention-max-bytes = 1000000"},
      {"durable-channel", "durable-channel = [\"orders.>\"]"},
      {"verify-on-start", "verify-on-start = true"},
      {"verify-log", "verify-log = true"},
      {"json", "verify-log = true\njson = true"},
      {"tls-cert", other_cert},
      {"tls-key", other_cert},
      {"tls-ca", "tls-ca = " + quoted(certs.pem("ca"))},
      {"tls-verify-client", "tls-ca = " + quoted(certs.pem("ca")) + "\ntls-verify-client = true"},
      {"auth-file", "auth-file = \"auth.toml\""},
      {"allow-anonymous", "allow-anonymous = true"},
      {"cluster-node-id",
       "cluster-node-id = \"n1\"\ncluster-etcd = [\"127.0.0.1:2379\"]\ncluster-nats = [\"nats://127.0.0.1:4222\"]"},
      {"cluster-name", "cluster-name = \"other\""},
      {"cluster-etcd", "cluster-etcd = [\"127.0.0.1:2379\"]"},
      {"cluster-nats", "cluster-nats = [\"nats://127.0.0.1:4222\"]"},
      {"cluster-advertise", "cluster-advertise = \"10.0.0.1:7878\""},
      {"cluster-lease-ttl-s", "cluster-lease-ttl-s = 9"},
      {"cluster-interest-timeout-ms", "cluster-interest-timeout-ms = 2500"},
      {"cluster-forward-timeout-ms", "cluster-forward-timeout-ms = 2500"},
      {"cluster-nats-queue-bytes", "cluster-nats-queue-bytes = 33554432"},
      {"cluster-drain-after-s", "cluster-drain-after-s = 120"},
      {"auth-failure-delay-ms", "auth-failure-delay-ms = 50"},
      {"auth-failures-per-min", "auth-failures-per-min = 3"},
      {"log-level", "log-level = \"debug\""},
      {"log-format", "log-format = \"json\""},
  };
}

// `base` with the lines of `change` ("key = value", one per line) put in:
// a key of both takes the value of `change` (TOML refuses a key twice).
std::string merged(const std::map<std::string, std::string>& base, const std::string& change) {
  auto keys = base;
  std::size_t at = 0;
  while (at < change.size()) {
    const auto end = std::min(change.find('\n', at), change.size());
    const std::string line = change.substr(at, end - at);
    const auto eq = line.find(" = ");
    REQUIRE(eq != std::string::npos);
    keys[line.substr(0, eq)] = line.substr(eq + 3);
    at = end + 1;
  }
  std::string out;
  for (const auto& [k, v] : keys) out += k + " = " + v + "\n";
  return out;
}

bool names_in_changes(const std::string& line, std::string_view name) {
  const std::string n(name);
  return line.find(": " + n + " ") != std::string::npos || line.find(", " + n + " ") != std::string::npos;
}

bool names_in_warning(const std::string& line, std::string_view name) {
  const std::string n(name);
  for (const auto& shape : {"SIGHUP: " + n + ",", "SIGHUP: " + n + " changed", ", " + n + ",", ", " + n + " changed"})
    if (line.find(shape) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a reload applies every setting the config file changed or names it as taking effect at a restart",
          "[e2e][reload]") {
  test::temp_dir dir;
  const auto file = dir.path() / "broker.toml";
  const test::tls_certs certs;
  const std::map<std::string, std::string> base_keys{{"listen", quoted("127.0.0.1:0")},
                                                     {"data-dir", quoted((dir.path() / "data").string())},
                                                     {"log-level", quoted("info")},
                                                     {"tls-cert", quoted(certs.pem("ca-broker"))},
                                                     {"tls-key", quoted(certs.key("ca-broker"))}};
  const auto values = changed_values(certs);
  const std::string base = merged(base_keys, "");
  write_file(file, base);
  const std::string file_arg = file.string();
  const char* argv[] = {"switchyard-server", "--config", file_arg.c_str()};
  test::broker_log_capture log;
  test::test_server server(broker::parse_server_args(3, argv));

  std::size_t walked = 0;
  for (const auto& s : broker::settings()) {
    INFO("setting " << s.name);
    const auto value = values.find(std::string(s.name));
    REQUIRE(value != values.end());
    const std::size_t mark = log.text().size();
    write_file(file, merged(base_keys, value->second));
    server.reload();
    const std::string text = log.text();
    const std::string reread = line_after(text, mark, "SIGHUP: " + file_arg + " re-read: ");
    const std::string restart = line_holding(text, mark, "take effect only at a restart");
    INFO("log: " << text.substr(mark));
    REQUIRE_FALSE(reread.empty());  // the file was read and validated
    const bool applied = names_in_changes(reread, s.name);
    const bool named = names_in_warning(restart, s.name);
    CHECK(applied != named);  // exactly one of the two
    CHECK(applied == (s.effect == takes_effect::at_reload));
    // Back to the base file, so that the next row starts from the same config.
    write_file(file, base);
    server.reload();
    ++walked;
  }
  CHECK(walked == broker::settings().size());
  CHECK(walked == values.size());
}

TEST_CASE("a reload that turns TLS on names the TLS settings as taking effect at a restart", "[e2e][reload]") {
  test::temp_dir dir;
  const test::tls_certs certs;
  const auto file = dir.path() / "broker.toml";
  const std::string base = "listen = \"127.0.0.1:0\"\ndata-dir = \"\"\nlog-level = \"info\"\n";
  write_file(file, base);
  const std::string file_arg = file.string();
  const char* argv[] = {"switchyard-server", "--config", file_arg.c_str()};
  test::broker_log_capture log;
  test::test_server server(broker::parse_server_args(3, argv));
  write_file(file, base + "tls-cert = " + quoted(certs.pem("ca-broker")) +
                       "\ntls-key = " + quoted(certs.key("ca-broker")) + "\n");
  server.reload();
  const std::string text = log.text();
  const std::string warning = line_after(text, 0, "SIGHUP: tls-cert, tls-key changed in the file but take effect only");
  CHECK_FALSE(warning.empty());
  CHECK_FALSE(line_after(text, 0, "SIGHUP: " + file_arg + " re-read: nothing changed").empty());
  // Still plain: a plain client connects.
  CHECK(test::connect_to(server, "plain") != nullptr);
}

TEST_CASE("a reload that lowers max-offer-expiry-ms refuses a longer expiry from then on", "[e2e][reload]") {
  test::temp_dir dir;
  const auto file = dir.path() / "broker.toml";
  write_file(file, "listen = \"127.0.0.1:0\"\ndata-dir = \"\"\nlog-level = \"warn\"\n");
  const std::string file_arg = file.string();
  const char* argv[] = {"switchyard-server", "--config", file_arg.c_str()};
  test::test_server server(broker::parse_server_args(3, argv));
  auto c = test::connect_to(server, "sender");
  const std::string_view keys[] = {"user:a"};
  CHECK(c->send_offer(keys, "x", {.offer_id = 1, .expires_in = std::chrono::milliseconds(2000)}).has_value());
  write_file(file, "listen = \"127.0.0.1:0\"\ndata-dir = \"\"\nlog-level = \"warn\"\nmax-offer-expiry-ms = 1000\n");
  server.reload();
  const auto refused = c->send_offer(keys, "x", {.offer_id = 2, .expires_in = std::chrono::milliseconds(2000)});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error() == errc::bad_request);
  CHECK(c->send_offer(keys, "x", {.offer_id = 3, .expires_in = std::chrono::milliseconds(1000)}).has_value());
}

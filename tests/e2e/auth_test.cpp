// End to end: authentication and permissions (docs/security.md) with a
// real broker, a real auth file in a temporary folder, real clients and
// raw connections for what the library would not send.

#include "auth/credentials.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tls_certs.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>
#include <sodium.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace switchyard;
using switchyard::test::raw_connection;
using switchyard::test::raw_frame;
using switchyard::test::temp_dir;
using switchyard::test::test_server;
using switchyard::test::wait_until;
namespace wire = switchyard::protocol::wire;

namespace {

std::string token_hash(const std::string& token) { return auth::to_hex(auth::sha256(token)); }

struct key_pair {
  std::array<std::uint8_t, 32> public_key{};
  std::array<std::uint8_t, 64> secret{};
  key_pair() {
    REQUIRE(sodium_init() >= 0);
    crypto_sign_keypair(public_key.data(), secret.data());
  }
  std::string public_hex() const { return auth::to_hex(public_key); }
  std::string seed_hex() const { return auth::to_hex(std::span(secret).first(32)); }
  std::array<std::uint8_t, 64> sign(std::span<const std::uint8_t> nonce) const {
    const auto m = protocol::auth_challenge_message(nonce);
    std::array<std::uint8_t, 64> sig{};
    crypto_sign_detached(sig.data(), nullptr, m.data(), m.size(), secret.data());
    return sig;
  }
};

// A broker with an auth file in its own folder (and a data folder, for
// the stream permissions). The file can be rewritten and reloaded.
class auth_broker {
 public:
  explicit auth_broker(const std::string& auth_file, std::uint32_t failures_per_min = 0) {
    write(auth_file);
    auto cfg = test::with_data(dir_);
    cfg.auth_file = file();
    cfg.auth_failure_delay = std::chrono::milliseconds(0);
    cfg.auth_failures_per_min = failures_per_min;
    server_ = std::make_unique<test_server>(cfg);
  }
  auth_broker(const std::string& auth_file, broker::server_config cfg) {
    write(auth_file);
    cfg.auth_file = file();
    server_ = std::make_unique<test_server>(cfg);
  }
  std::string file() const { return (dir_.path() / "auth.toml").string(); }
  void write(const std::string& text) const { std::ofstream(file(), std::ios::trunc) << text; }
  test_server& server() { return *server_; }
  std::uint16_t port() const { return server_->port(); }

 private:
  temp_dir dir_{"switchyard-auth"};
  std::unique_ptr<test_server> server_;
};

client_options as_token(std::uint16_t port, const std::string& token) {
  client_options o;
  o.port = port;
  o.client_name = "auth-test";
  o.token = token;
  o.reconnect.enabled = false;
  return o;
}

std::unique_ptr<client> connect_ok(const client_options& o) {
  auto c = client::connect(o);
  if (!c) FAIL("connect: " << c.error().message());
  return std::move(*c);
}

std::error_code connect_error(const client_options& o) {
  auto c = client::connect(o);
  return c ? std::error_code{} : c.error();
}

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

const std::error_code forbidden = make_error_code(errc::forbidden);
const std::error_code unauthorized = make_error_code(errc::unauthorized);

// Sends a hello by hand (request id 1) with a token or a public key,
// asking for `capabilities`.
void send_hello(raw_connection& raw, std::string_view token, std::span<const std::uint8_t> public_key = {},
                std::span<const std::string_view> capabilities = {}) {
  protocol::frame_builder fb;
  protocol::hello_fields h;
  h.protocol_major = protocol::protocol_major;
  h.credentials = token;
  h.public_key = public_key;
  h.capabilities = capabilities;
  raw.send(fb.hello(1, h));
}

// A raw connection welcomed as `token`'s principal, granted "routing" and
// "offers".
void welcome_raw(raw_connection& raw, std::string_view token) {
  const std::array<std::string_view, 2> caps{"routing", "offers"};
  send_hello(raw, token, {}, caps);
  raw_frame storage;
  REQUIRE(raw.next_of(wire::Message::Welcome, storage) != nullptr);
}

// The next Error on `raw` answers `request_id` forbidden (not fatal), and
// its message names each of `parts` (docs/protocol.md §8: the operation,
// the resource and the principal).
void check_forbidden(raw_connection& raw, std::uint64_t request_id, std::initializer_list<std::string_view> parts) {
  raw_frame storage;
  const auto* f = raw.next_of(wire::Message::Error, storage);  // (past a heartbeat Ping)
  REQUIRE(f != nullptr);
  CHECK(f->request_id() == request_id);
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::forbidden);
  CHECK_FALSE(f->message_as_Error()->fatal());
  REQUIRE(f->message_as_Error()->message() != nullptr);
  const std::string text = f->message_as_Error()->message()->str();
  for (const auto part : parts) CHECK_THAT(text, Catch::Contains(std::string(part)));
}

// The auth file most tests use: a service, two gateways and an operator.
std::string standard_file(const key_pair& gw2_key) {
  return "[principals.orders]\n"
         "token_sha256 = [\"" +
         token_hash("orders-token") +
         "\"]\n"
         "publish = { allow = [\"orders.>\", \"audit.*\"], deny = [\"orders.secret\"] }\n"
         "subscribe = { allow = [\">\"], deny = [\"admin.>\", \"orders.hidden\"] }\n"
         "send = { allow = [\"user.*\"] , deny = [\"user.vip\"] }\n"
         "registry_get = { allow = [\"user.*\"] }\n"
         "stream_append = { allow = [\"orders\"] }\n"
         "stream_read = { allow = [\"orders\"] }\n"
         "\n"
         "[principals.gw1]\n"
         "token_sha256 = [\"" +
         token_hash("gw1-token") +
         "\"]\n"
         "inbox = { allow = [\"gw1\", \"shared\"] }\n"
         "registry_put = { allow = [\"user.*\"] }\n"
         "registry_get = { allow = [\"user.*\"] }\n"
         "registry_delete = { allow = [\"user.*\"] }\n"
         "subscribe = { allow = [\"gw.gw1.>\"] }\n"
         "\n"
         "[principals.gw2]\n"
         "ed25519_public_keys = [\"" +
         gw2_key.public_hex() +
         "\"]\n"
         "inbox = { allow = [\"gw2\", \"shared\"] }\n"
         "registry_put = { allow = [\"user.*\"] }\n"
         "registry_delete = { allow = [\"user.*\"] }\n"
         "\n"
         "[principals.operator]\n"
         "token_sha256 = [\"" +
         token_hash("operator-token") +
         "\"]\n"
         "admin = true\n";
}

// Ownership: gw2 (by its key) owns what a test sets up; gw1, on a raw
// connection, tries to touch it.
struct ownership_case {
  key_pair gw2_key;
  auth_broker b{standard_file(gw2_key)};
  std::unique_ptr<client> gw2;
  raw_connection gw1{b.port()};
  protocol::frame_builder fb;
  ownership_case() {
    client_options o = as_token(b.port(), "");
    o.key = gw2_key.seed_hex();
    gw2 = connect_ok(o);
    welcome_raw(gw1, "gw1-token");
  }
};

// Messages a client's subscription received, thread-safe.
struct inbox_box {
  std::mutex mu;
  std::vector<std::string> items;
  void add(std::string s) {
    std::lock_guard lock(mu);
    items.push_back(std::move(s));
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mu);
    return items;
  }
};

}  // namespace

// ---- Credentials ----

TEST_CASE("a client with a listed token is welcomed, one without credentials is refused unauthorized", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto ok = connect_ok(as_token(b.port(), "orders-token"));
  CHECK(ok->connected());
  CHECK(connect_error(as_token(b.port(), "")) == unauthorized);
  CHECK(connect_error(as_token(b.port(), "wrong-token")) == unauthorized);
}

namespace {

// What refused a hello with `token` on `raw`: the first frame, REQUIREd
// to be an Error.
struct refusal {
  wire::ErrorCode code;
  bool fatal;
  std::uint32_t retry_after_ms;
};
refusal refusal_of_hello(raw_connection& raw, std::string_view token) {
  send_hello(raw, token);
  raw_frame storage;
  const auto* f = raw.next(storage);
  REQUIRE(f != nullptr);
  REQUIRE(f->message_type() == wire::Message::Error);
  const auto* e = f->message_as_Error();
  return {e->code(), e->fatal(), e->retry_after_ms()};
}

}  // namespace

TEST_CASE("a refused hello is answered unauthorized without a retry hint and closed, without a welcome",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  raw_connection raw(b.port());
  const auto r = refusal_of_hello(raw, "not-a-token");
  CHECK(r.code == wire::ErrorCode::unauthorized);
  CHECK(r.fatal);
  CHECK(r.retry_after_ms == 0);  // docs/protocol.md §3: waiting does not help
  CHECK(raw.closed_by_peer());
}

TEST_CASE("a hello from an address past auth-failures-per-min is refused rate_limited with a retry hint",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2), 1);
  CHECK(connect_error(as_token(b.port(), "guess")) == unauthorized);
  raw_connection raw(b.port());
  const auto r = refusal_of_hello(raw, "orders-token");
  CHECK(r.code == wire::ErrorCode::rate_limited);
  CHECK(r.fatal);
  CHECK(r.retry_after_ms > 0);
}

TEST_CASE("a refused hello waits the failure delay before its answer", "[e2e][auth]") {
  key_pair gw2;
  temp_dir dir{"switchyard-auth"};
  auto cfg = test_server::default_config();
  cfg.auth_failure_delay = std::chrono::milliseconds(300);
  cfg.auth_failures_per_min = 0;
  auth_broker b(standard_file(gw2), cfg);
  raw_connection raw(b.port());
  send_hello(raw, "not-a-token");
  raw_frame storage;
  // Nothing within the first 150 ms (half the delay: a lower bound, not a
  // speed assertion), then the refusal.
  CHECK(raw.next(storage, std::chrono::milliseconds(150)) == nullptr);
  const auto* f = raw.next(storage, std::chrono::seconds(5));
  REQUIRE(f != nullptr);
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::unauthorized);
}

TEST_CASE("an Ed25519 key the auth file lists is welcomed after the challenge, and the key never leaves the client",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  client_options o = as_token(b.port(), "");
  o.key = gw2.seed_hex();
  auto c = connect_ok(o);
  // Welcomed as gw2: its inbox permission works, gw1's does not.
  auto lease = c->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  CHECK_FALSE(c->open_inbox("gw2", lease->id, [](const inbox_message&) {}));
  CHECK(c->open_inbox("gw1", lease->id, [](const inbox_message&) {}) == forbidden);
}

TEST_CASE("a key file written as switchyard-cli keygen writes it authenticates", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  temp_dir dir{"switchyard-key"};
  const auto file = (dir.path() / "gw2.key").string();
  std::ofstream(file) << "# switchyard Ed25519 secret key; public key: " << gw2.public_hex() << "\n"
                      << gw2.seed_hex() << "\n";
  client_options o = as_token(b.port(), "");
  o.key_file = file;
  CHECK(connect_ok(o)->connected());
  o.key_file = (dir.path() / "missing.key").string();
  CHECK(connect_error(o) == std::make_error_code(std::errc::invalid_argument));
}

TEST_CASE("an Ed25519 key the auth file does not list is refused after the challenge", "[e2e][auth]") {
  key_pair gw2, stranger;
  auth_broker b(standard_file(gw2));
  client_options o = as_token(b.port(), "");
  o.key = stranger.seed_hex();
  CHECK(connect_error(o) == unauthorized);
}

TEST_CASE("a signature of another connection's challenge is refused (no replay)", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  protocol::frame_builder fb;
  raw_frame storage;

  // First connection: a correct proof is welcomed.
  raw_connection first(b.port());
  send_hello(first, "", gw2.public_key);
  const auto* c1 = first.next(storage);
  REQUIRE(c1 != nullptr);
  REQUIRE(c1->message_type() == wire::Message::AuthChallenge);
  const auto* n1 = c1->message_as_AuthChallenge()->nonce();
  REQUIRE(n1->size() == protocol::auth_nonce_size);
  const std::vector<std::uint8_t> nonce1(n1->begin(), n1->end());
  const auto proof1 = gw2.sign(nonce1);
  first.send(fb.auth_proof(proof1));
  const auto* w = first.next(storage);
  REQUIRE(w != nullptr);
  CHECK(w->message_type() == wire::Message::Welcome);

  // Second connection: its nonce is another one, and the first proof does not answer it.
  raw_connection second(b.port());
  send_hello(second, "", gw2.public_key);
  const auto* c2 = second.next(storage);
  REQUIRE(c2 != nullptr);
  REQUIRE(c2->message_type() == wire::Message::AuthChallenge);
  const auto* n2 = c2->message_as_AuthChallenge()->nonce();
  CHECK(std::vector<std::uint8_t>(n2->begin(), n2->end()) != nonce1);
  second.send(fb.auth_proof(proof1));
  const auto* refused = second.next(storage);
  REQUIRE(refused != nullptr);
  REQUIRE(refused->message_type() == wire::Message::Error);
  CHECK(refused->message_as_Error()->code() == wire::ErrorCode::unauthorized);
}

TEST_CASE("a hello with a key that answers the challenge with another frame is refused", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  raw_connection raw(b.port());
  send_hello(raw, "", gw2.public_key);
  raw_frame storage;
  protocol::frame_builder fb;
  REQUIRE(raw.next_of(wire::Message::AuthChallenge, storage) != nullptr);
  raw.send(fb.ping(2));
  const auto* f = raw.next(storage);
  REQUIRE(f != nullptr);
  REQUIRE(f->message_type() == wire::Message::Error);
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::unauthorized);
}

TEST_CASE("failed hellos from one address are rate limited after auth-failures-per-min, before credentials are checked",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2), 3);
  for (int i = 0; i < 3; ++i) CHECK(connect_error(as_token(b.port(), "guess-" + std::to_string(i))) == unauthorized);
  // The fourth is not even checked: a right token is refused as well.
  CHECK(connect_error(as_token(b.port(), "guess-4")) == make_error_code(errc::rate_limited));
  CHECK(connect_error(as_token(b.port(), "orders-token")) == make_error_code(errc::rate_limited));
  b.server().stop();
  CHECK(b.server().counters().auth_failures == 3);
  CHECK(b.server().counters().auth_rate_limited == 2);
}

TEST_CASE("with client certificates a subject listed in tls_subjects authenticates without a token",
          "[e2e][auth][tls]") {
  static const test::tls_certs certs;
  auto cfg = test_server::default_config();
  cfg.tls_cert = certs.pem("ca-broker");
  cfg.tls_key = certs.key("ca-broker");
  cfg.tls_ca = certs.pem("ca");
  cfg.tls_verify_client = true;
  cfg.auth_failure_delay = std::chrono::milliseconds(0);
  auth_broker b("[principals.cert-gw]\ntls_subjects = [\"CN=client\"]\npublish = { allow = [\"tls.>\"] }\n", cfg);
  client_options o = as_token(b.port(), "");
  o.tls.enabled = true;
  o.tls.ca_file = certs.pem("ca");
  o.tls.cert_file = certs.pem("ca-client");
  o.tls.key_file = certs.key("ca-client");
  auto c = connect_ok(o);
  CHECK_FALSE(c->publish_confirmed("tls.x", bytes("a")));
  CHECK(c->publish_confirmed("other.x", bytes("a")) == forbidden);
}

// ---- Permissions ----

TEST_CASE("publish: an allowed channel passes, a denied one is forbidden and the connection stays", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto c = connect_ok(as_token(b.port(), "orders-token"));
  CHECK_FALSE(c->publish_confirmed("orders.eu.created", bytes("x")));
  CHECK_FALSE(c->publish_confirmed("audit.orders", bytes("x")));
  CHECK(c->publish_confirmed("admin.shutdown", bytes("x")) == forbidden);
  CHECK(c->publish_confirmed("audit.orders.deep", bytes("x")) == forbidden);  // `*` is one token
  // Deny wins over the allow `orders.>`.
  CHECK(c->publish_confirmed("orders.secret", bytes("x")) == forbidden);
  CHECK(c->connected());
  CHECK_FALSE(c->publish_confirmed("orders.eu.updated", bytes("x")));
}

TEST_CASE("a forbidden answer names the operation, the resource and the principal", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  raw_connection raw(b.port());
  send_hello(raw, "orders-token");
  raw_frame storage;
  REQUIRE(raw.next_of(wire::Message::Welcome, storage) != nullptr);
  const std::array<std::uint8_t, 1> payload{1};
  protocol::frame_builder fb;
  raw.send(fb.publish(7, "admin.x", payload, {}));
  const auto* f = raw.next(storage);
  REQUIRE(f != nullptr);
  REQUIRE(f->message_type() == wire::Message::Error);
  CHECK(f->request_id() == 7);
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::forbidden);
  CHECK_FALSE(f->message_as_Error()->fatal());
  const std::string text = f->message_as_Error()->message()->str();
  CHECK(text.find("publish") != std::string::npos);
  CHECK(text.find("admin.x") != std::string::npos);
  CHECK(text.find("orders") != std::string::npos);
}

TEST_CASE("a forbidden answer for an admin-only request names the request and the principal", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  raw_connection raw(b.port());
  welcome_raw(raw, "orders-token");
  protocol::frame_builder fb;
  raw.send(fb.lease_list(4, 0));
  check_forbidden(raw, 4, {"LeaseList", "admin", "principal 'orders'"});
}

TEST_CASE("subscribe: a pattern no allow covers, or a deny covers, is forbidden", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw = connect_ok(as_token(b.port(), "gw1-token"));
  CHECK(gw->subscribe("gw.gw1.>", [](const message&) {}));
  CHECK(gw->subscribe("gw.gw1.events.*", [](const message&) {}));
  CHECK(gw->subscribe("gw.gw2.>", [](const message&) {}).error() == forbidden);
  CHECK(gw->subscribe("gw.*", [](const message&) {}).error() == forbidden);  // wider than gw.gw1.>
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  CHECK(svc->subscribe("admin.>", [](const message&) {}).error() == forbidden);
  CHECK(svc->subscribe("admin.users", [](const message&) {}).error() == forbidden);
  CHECK(svc->subscribe("orders.hidden", [](const message&) {}).error() == forbidden);
}

TEST_CASE("a wildcard subscription that overlaps denied channels receives everything but them", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  inbox_box got;
  REQUIRE(svc->subscribe(">", [&](const message& m) { got.add(std::string(m.channel)); }));
  REQUIRE(svc->subscribe("orders.*", [&](const message& m) { got.add("2:" + std::string(m.channel)); }));
  REQUIRE_FALSE(svc->flush());
  auto op = connect_ok(as_token(b.port(), "operator-token"));
  for (const char* ch : {"admin.users", "orders.hidden", "orders.visible", "admin.x.y", "news"})
    REQUIRE_FALSE(op->publish_confirmed(ch, bytes("m")));
  REQUIRE_FALSE(op->publish_confirmed("end", bytes("m")));
  REQUIRE(wait_until([&] { return got.get().size() >= 4; }));
  const auto items = got.get();
  const std::multiset<std::string> seen(items.begin(), items.end());
  CHECK(seen == std::multiset<std::string>{"orders.visible", "2:orders.visible", "news", "end"});
}

TEST_CASE("send: allowed route keys are delivered, a denied one is forbidden", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw = connect_ok(as_token(b.port(), "gw1-token"));
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  inbox_box got;
  REQUIRE_FALSE(
      gw->open_inbox("gw1", lease->id, [&](const inbox_message& m) { got.add(std::string(m.payload_text())); }));
  REQUIRE(gw->registry_put("user.1", "gw1", lease->id));
  REQUIRE(gw->registry_put("user.vip", "gw1", lease->id));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  CHECK(svc->send("user.1", "hello"));
  CHECK(svc->send("user.vip", "hello").error() == forbidden);  // deny wins
  CHECK(svc->send("robot-1", "hello").error() == forbidden);   // not allowed
  const std::array<std::string_view, 2> keys{"user.1", "user.vip"};
  CHECK(svc->send_many(keys, bytes("both")).error() == forbidden);  // one denied key refuses the send
  REQUIRE(wait_until([&] { return got.get().size() >= 1; }));
  CHECK(got.get() == std::vector<std::string>{"hello"});
}

TEST_CASE("registry put, get and delete are checked per key", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw = connect_ok(as_token(b.port(), "gw1-token"));
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  CHECK(gw->registry_put("user.1", "gw1", lease->id));
  CHECK(gw->registry_put("config.x", "v", lease->id).error() == forbidden);
  CHECK(gw->registry_get("user.1"));
  CHECK(gw->registry_get("config.x").error() == forbidden);
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  CHECK(svc->registry_get("user.1"));
  CHECK(svc->registry_put_ttl("user.2", "svc", std::chrono::seconds(5)).error() == forbidden);  // no registry_put
  CHECK(svc->registry_delete("user.1") == forbidden);
  CHECK_FALSE(gw->registry_delete("user.1"));
}

TEST_CASE("inbox ids are checked", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw = connect_ok(as_token(b.port(), "gw1-token"));
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  CHECK_FALSE(gw->open_inbox("gw1", lease->id, [](const inbox_message&) {}));
  CHECK(gw->open_inbox("gw9", lease->id, [](const inbox_message&) {}) == forbidden);
}

TEST_CASE("stream append and read are checked per stream name", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  CHECK(svc->append("orders", bytes("r1")));
  CHECK(svc->append("payments", bytes("r1")).error() == forbidden);
  CHECK(svc->read("orders", 1));
  CHECK(svc->stream_info("orders"));
  auto op = connect_ok(as_token(b.port(), "operator-token"));
  REQUIRE(op->append("payments", bytes("p1")));
  CHECK(svc->read("payments", 1).error() == forbidden);
  CHECK(svc->stream_info("payments").error() == forbidden);
  // A durable publish appends too: it needs both permissions.
  CHECK(svc->publish_durable("orders.eu", "orders", bytes("d")));
  CHECK(svc->publish_durable("orders.eu", "payments", bytes("d")).error() == forbidden);
}

TEST_CASE("lists, retention, stream deletion and drain need an admin principal", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  REQUIRE(svc->append("orders", bytes("r")));
  CHECK(svc->lease_list().error() == forbidden);
  CHECK(svc->registry_list("").error() == forbidden);
  CHECK(svc->stream_list().error() == forbidden);
  CHECK(svc->set_stream_retention("orders", {.max_records = 5}).error() == forbidden);
  CHECK(svc->delete_stream("orders").error() == forbidden);
  client_options ask_admin = as_token(b.port(), "orders-token");
  ask_admin.admin = true;
  auto svc_admin = connect_ok(ask_admin);
  const auto caps = svc_admin->capabilities();
  CHECK(std::find(caps.begin(), caps.end(), "admin") == caps.end());  // not granted to a non-admin
  CHECK(svc_admin->drain(std::chrono::milliseconds(100)) == make_error_code(errc::not_supported));

  client_options op_opts = as_token(b.port(), "operator-token");
  op_opts.admin = true;
  auto op = connect_ok(op_opts);
  const auto op_caps = op->capabilities();
  CHECK(std::find(op_caps.begin(), op_caps.end(), "admin") != op_caps.end());
  CHECK(op->lease_list());
  CHECK(op->registry_list(""));
  CHECK(op->stream_list());
  CHECK(op->set_stream_retention("orders", {.max_records = 5}));
  CHECK(op->delete_stream("orders"));
}

TEST_CASE("stats and the connection list need an admin principal, and the list names each connection's principal",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  client_options ask_admin = as_token(b.port(), "orders-token");
  ask_admin.admin = true;
  auto svc = connect_ok(ask_admin);  // asks for admin, is not granted it
  CHECK(svc->stats().error() == make_error_code(errc::not_supported));
  CHECK(svc->connections().error() == make_error_code(errc::not_supported));
  client_options op_opts = as_token(b.port(), "operator-token");
  op_opts.admin = true;
  auto op = connect_ok(op_opts);
  REQUIRE(op->stats());
  const auto page = op->connections();
  REQUIRE(page);
  REQUIRE(page->connections.size() == 2);
  CHECK(page->connections[0].principal == "orders");
  CHECK(page->connections[1].principal == "operator");
}

TEST_CASE("cluster status needs an admin principal", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  client_options ask_admin = as_token(b.port(), "orders-token");
  ask_admin.admin = true;
  auto svc = connect_ok(ask_admin);  // asks for admin, is not granted it
  CHECK(svc->cluster_status().error() == make_error_code(errc::not_supported));
  client_options op_opts = as_token(b.port(), "operator-token");
  op_opts.admin = true;
  auto op = connect_ok(op_opts);
  // Allowed, and answered as on any single node.
  CHECK(op->cluster_status().error() == make_error_code(errc::not_found));
}

// ---- Ownership ----

TEST_CASE("a lease belongs to its principal: another cannot keep it alive, read or revoke it, but an admin can",
          "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw1 = connect_ok(as_token(b.port(), "gw1-token"));
  client_options o2 = as_token(b.port(), "");
  o2.key = gw2.seed_hex();
  auto other = connect_ok(o2);
  auto lease = gw1->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  CHECK(other->lease_keepalive(lease->id).error() == forbidden);
  CHECK(other->lease_time_to_live(lease->id).error() == forbidden);
  CHECK(other->lease_revoke(lease->id) == forbidden);
  CHECK(gw1->lease_keepalive(lease->id));
  auto op = connect_ok(as_token(b.port(), "operator-token"));
  CHECK(op->lease_time_to_live(lease->id));
  CHECK_FALSE(op->lease_revoke(lease->id));
  CHECK(gw1->lease_keepalive(lease->id).error() == make_error_code(errc::not_found));
}

TEST_CASE("a forbidden answer for another principal's lease names the request, the lease and the principal",
          "[e2e][auth]") {
  ownership_case t;
  auto lease = t.gw2->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  const std::string resource = "lease " + std::to_string(lease->id);
  t.gw1.send(t.fb.lease_keepalive(4, lease->id));
  check_forbidden(t.gw1, 4, {"LeaseKeepAlive", resource, "principal 'gw1'"});
  t.gw1.send(t.fb.lease_time_to_live(5, lease->id));
  check_forbidden(t.gw1, 5, {"LeaseTimeToLive", resource, "principal 'gw1'"});
  t.gw1.send(t.fb.lease_revoke(6, lease->id));
  check_forbidden(t.gw1, 6, {"LeaseRevoke", resource, "principal 'gw1'"});
  // A registry entry or an inbox under it: the lease is the resource.
  t.gw1.send(t.fb.registry_put(7, "user.1", "gw1", lease->id, 0));
  check_forbidden(t.gw1, 7, {"RegistryPut", resource, "principal 'gw1'"});
  t.gw1.send(t.fb.inbox_open(8, "gw1", lease->id));
  check_forbidden(t.gw1, 8, {"InboxOpen", resource, "principal 'gw1'"});
}

TEST_CASE("a forbidden answer for another principal's registry key names the request, the key and the principal",
          "[e2e][auth]") {
  ownership_case t;
  REQUIRE(t.gw2->registry_put_ttl("user.8", "gw2", std::chrono::seconds(30)));
  t.gw1.send(t.fb.registry_delete(4, "user.8"));
  check_forbidden(t.gw1, 4, {"RegistryDelete", "registry key 'user.8'", "principal 'gw1'"});
  t.gw1.send(t.fb.registry_put(5, "user.8", "gw1", 0, 30'000));
  check_forbidden(t.gw1, 5, {"RegistryPut", "registry key 'user.8'", "principal 'gw1'"});
}

TEST_CASE("a forbidden answer for another principal's inbox names the request, the inbox and the principal",
          "[e2e][auth]") {
  ownership_case t;
  auto lease = t.gw2->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  REQUIRE_FALSE(t.gw2->open_inbox("shared", lease->id, [](const inbox_message&) {}));
  t.gw1.send(t.fb.inbox_open(4, "shared", 0));
  check_forbidden(t.gw1, 4, {"InboxOpen", "inbox 'shared'", "principal 'gw1'"});
}

TEST_CASE("a Withdraw of another principal's offer is forbidden, naming the request, the offer and the principal",
          "[e2e][auth]") {
  ownership_case t;
  auto svc = connect_ok(as_token(t.b.port(), "orders-token"));
  offer_options offer;
  offer.offer_id = 7001;
  offer.expires_in = std::chrono::seconds(30);
  const std::array<std::string_view, 1> keys{"user.1"};
  REQUIRE(svc->send_offer(keys, "ride", offer));
  t.gw1.send(t.fb.withdraw(4, 7001));
  check_forbidden(t.gw1, 4, {"Withdraw", "offer 7001", "principal 'gw1'"});
  // Still live: its owner withdraws it.
  CHECK(svc->withdraw(7001));
}

TEST_CASE("registry entries and inboxes under a principal's lease cannot be taken over by another", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto gw1 = connect_ok(as_token(b.port(), "gw1-token"));
  client_options o2 = as_token(b.port(), "");
  o2.key = gw2.seed_hex();
  auto other = connect_ok(o2);
  auto l1 = gw1->lease_grant(std::chrono::seconds(30));
  auto l2 = other->lease_grant(std::chrono::seconds(30));
  REQUIRE(l1);
  REQUIRE(l2);
  REQUIRE(gw1->registry_put("user.7", "gw1", l1->id));
  // Not under gw1's lease, and not over gw1's entry with its own lease.
  CHECK(other->registry_put("user.8", "gw2", l1->id).error() == forbidden);
  CHECK(other->registry_put("user.7", "gw2", l2->id).error() == forbidden);
  CHECK(other->registry_delete("user.7") == forbidden);
  CHECK(gw1->registry_get("user.7")->value == "gw1");
  CHECK(other->open_inbox("gw2", l1->id, [](const inbox_message&) {}) == forbidden);
  CHECK_FALSE(other->open_inbox("gw2", l2->id, [](const inbox_message&) {}));
  // An entry with its own TTL belongs to its writer too.
  REQUIRE(gw1->registry_put_ttl("user.9", "gw1", std::chrono::seconds(30)));
  CHECK(other->registry_delete("user.9") == forbidden);
  CHECK_FALSE(gw1->registry_delete("user.9"));
  // The inbox id both may use, bound to gw1's lease: while gw1 is away
  // (its lease alive, so the inbox waits for it), gw2 cannot take it.
  REQUIRE_FALSE(gw1->open_inbox("shared", l1->id, [](const inbox_message&) {}));
  gw1->close();
  CHECK(other->open_inbox("shared", l2->id, [](const inbox_message&) {}) == forbidden);
}

// ---- Reload ----

TEST_CASE(
    "a reload applies at once: an added principal connects, a removed one is disconnected, changed "
    "permissions hold for live connections",
    "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  std::atomic<int> closed_code{0};
  client_options gw_opts = as_token(b.port(), "gw1-token");
  gw_opts.on_disconnect = [&](std::error_code ec) { closed_code = ec.value(); };
  auto gw = connect_ok(gw_opts);
  CHECK(connect_error(as_token(b.port(), "new-token")) == unauthorized);
  CHECK_FALSE(svc->publish_confirmed("orders.x", bytes("x")));  // the connection's last allowed channel
  CHECK(svc->publish_confirmed("billing.x", bytes("x")) == forbidden);

  // orders may now publish to billing.>, gw1 is gone, newcomer exists.
  b.write(
      "[principals.orders]\n"
      "token_sha256 = [\"" +
      token_hash("orders-token") +
      "\"]\n"
      "publish = { allow = [\"billing.>\"] }\n"
      "[principals.newcomer]\n"
      "token_sha256 = [\"" +
      token_hash("new-token") +
      "\"]\n"
      "publish = { allow = [\">\"] }\n");
  b.server().reload();
  CHECK_FALSE(svc->publish_confirmed("billing.x", bytes("x")));
  CHECK(svc->publish_confirmed("orders.x", bytes("x")) == forbidden);
  CHECK(wait_until([&] { return closed_code.load() == static_cast<int>(errc::unauthorized); }));
  CHECK(connect_ok(as_token(b.port(), "new-token"))->connected());
  CHECK(connect_error(as_token(b.port(), "gw1-token")) == unauthorized);
}

TEST_CASE("an auth file that does not parse at reload keeps the rules in force", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  b.write("[principals.orders]\ntoken_sha256 = [\"not hex\"]\n");
  b.server().reload();
  CHECK(svc->connected());
  CHECK_FALSE(svc->publish_confirmed("orders.x", bytes("x")));
  CHECK(connect_ok(as_token(b.port(), "gw1-token"))->connected());
}

TEST_CASE("a wildcard subscription loses a channel that a reload denies", "[e2e][auth]") {
  key_pair gw2;
  auth_broker b(standard_file(gw2));
  auto svc = connect_ok(as_token(b.port(), "orders-token"));
  inbox_box got;
  REQUIRE(svc->subscribe("news.>", [&](const message& m) { got.add(std::string(m.channel)); }));
  auto op = connect_ok(as_token(b.port(), "operator-token"));
  REQUIRE_FALSE(op->publish_confirmed("news.a", bytes("1")));
  REQUIRE(wait_until([&] { return got.get().size() == 1; }));
  b.write(
      "[principals.orders]\n"
      "token_sha256 = [\"" +
      token_hash("orders-token") +
      "\"]\n"
      "subscribe = { allow = [\">\"], deny = [\"news.a\"] }\n"
      "[principals.operator]\n"
      "token_sha256 = [\"" +
      token_hash("operator-token") +
      "\"]\n"
      "admin = true\n");
  b.server().reload();
  REQUIRE_FALSE(op->publish_confirmed("news.a", bytes("2")));
  REQUIRE_FALSE(op->publish_confirmed("news.b", bytes("3")));
  REQUIRE(wait_until([&] { return got.get().size() == 2; }));
  CHECK(got.get() == std::vector<std::string>{"news.a", "news.b"});
}

// ---- Logs and protected mode ----

TEST_CASE("a broker without an auth file lets anyone do everything on loopback", "[e2e][auth]") {
  test_server s;
  client_options o = as_token(s.port(), "");
  auto c = connect_ok(o);
  CHECK_FALSE(c->publish_confirmed("admin.x", bytes("x")));
  CHECK(c->lease_list());
}

TEST_CASE("tokens and keys never appear in the broker's log, even at trace level", "[e2e][auth]") {
  key_pair gw2;
  // The sink is added while no broker runs (spdlog's sink list is not
  // thread-safe), and removed after this one stopped.
  auto logger = spdlog::get("broker");
  if (!logger) logger = spdlog::stderr_color_mt("broker");
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(2000);
  logger->sinks().push_back(sink);
  {
    auto cfg = test_server::default_config();
    cfg.log_level = "trace";
    cfg.auth_failure_delay = std::chrono::milliseconds(0);
    auth_broker b(standard_file(gw2), cfg);
    auto ok = connect_ok(as_token(b.port(), "orders-token"));
    CHECK(connect_error(as_token(b.port(), "guessed-secret-token")) == unauthorized);
    client_options o = as_token(b.port(), "");
    o.key = gw2.seed_hex();
    CHECK(connect_ok(o)->connected());
    CHECK_FALSE(ok->publish_confirmed("orders.x", bytes("x")));
    ok->close();
    b.server().stop();
  }
  logger->sinks().pop_back();
  logger->set_level(spdlog::level::warn);
  const auto lines = sink->last_formatted();
  REQUIRE(lines.size() >= 3);  // the hellos and the failure were logged
  bool failure_logged = false;
  for (const auto& line : lines) {
    CHECK(line.find("orders-token") == std::string::npos);
    CHECK(line.find("guessed-secret-token") == std::string::npos);
    CHECK(line.find(gw2.seed_hex()) == std::string::npos);
    failure_logged |= line.find("authentication failed (unknown token)") != std::string::npos;
  }
  CHECK(failure_logged);
}

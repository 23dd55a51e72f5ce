// End to end: switchyard-gateway's server against a real broker on
// 127.0.0.1, with real WebSocket devices (Beast) and services on the client
// library.

#include "gateway/gateway_server.hpp"
#include "gateway/gateway_settings.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/jwt_tokens.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tls_certs.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"
#include "tests/support/ws_device.hpp"

#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

using namespace switchyard;
using namespace switchyard::test;
using namespace std::chrono_literals;
using edge::gateway_config;
using edge::gateway_server;

namespace {

const std::string secret = "gateway-test-secret";

// A broker and a gateway on it (its io loop on a thread of its own). With
// `with_log`, the broker has a data folder (durable sends, resume).
class gateway_fixture {
 public:
  explicit gateway_fixture(std::function<void(gateway_config&)> adjust = {},
                           std::function<std::chrono::system_clock::time_point()> wall = {}, bool with_log = false,
                           std::function<void(broker::server_config&)> adjust_broker = {})
      : wall_(std::move(wall)) {
    broker_cfg_ = with_log ? with_data(dir_) : test_server::default_config();
    if (adjust_broker) adjust_broker(broker_cfg_);
    if (with_log) broker_cfg_.durability = storage::durability::none;  // delivery is under test, not fsync
    broker_.emplace(broker_cfg_);
    std::ofstream(dir_.path() / "secret") << secret << "\n";
    cfg_.listen_port = 0;
    cfg_.brokers = {"127.0.0.1:" + std::to_string(broker_->port())};
    cfg_.jwt_secret_file = (dir_.path() / "secret").string();
    cfg_.inbox_id = "gw-test";
    cfg_.lease_ttl = 2s;
    cfg_.log_level = "error";
    if (adjust) adjust(cfg_);
    start_gateway();
  }
  ~gateway_fixture() { stop_gateway(); }

  void start_gateway() {
    gateway_ = std::make_unique<gateway_server>(cfg_, wall_);
    finished_ = false;
    thread_ = std::thread([this] {
      gateway_->run();
      finished_ = true;
    });
  }
  void stop_gateway() {
    if (!gateway_) return;
    gateway_->stop();
    thread_.join();
    gateway_.reset();
  }
  // The broker stops and starts again on its port and data folder.
  void restart_broker() {
    const auto port = broker_->port();
    broker_.reset();
    auto cfg = broker_cfg_;
    cfg.listen_port = port;
    broker_.emplace(cfg);
  }

  std::uint16_t port() const { return gateway_->port(); }
  // run() returned (a drain finished).
  bool finished() const { return finished_; }
  test_server& broker() { return *broker_; }
  gateway_server& gateway() { return *gateway_; }
  const gateway_config& config() const { return cfg_; }

  // A welcomed device of `user`.
  std::unique_ptr<ws_device> device(const std::string& user, std::string_view extra = {},
                                    const std::string& claims_tail = {}) {
    auto d = std::make_unique<ws_device>(port());
    d->hello(hs256_token(secret, R"({"sub":")" + user + "\"" + claims_tail + "}"), extra);
    const auto w = d->expect("welcome");
    REQUIRE(w["user"] == user);
    return d;
  }

 private:
  temp_dir dir_;
  broker::server_config broker_cfg_;
  std::optional<test_server> broker_;
  gateway_config cfg_;
  std::function<std::chrono::system_clock::time_point()> wall_;
  std::unique_ptr<gateway_server> gateway_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
};

// A GET of `target`, with the WebSocket upgrade headers when `upgrade`.
boost::beast::http::request<boost::beast::http::empty_body> get_request(const std::string& target, bool upgrade) {
  namespace http = boost::beast::http;
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (upgrade) {
    req.set(http::field::upgrade, "websocket");
    req.set(http::field::connection, "Upgrade");
    req.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
    req.set(http::field::sec_websocket_version, "13");
  }
  return req;
}

// The HTTP answer to a GET of `target` on the gateway's port, with the
// WebSocket upgrade headers when `upgrade`.
boost::beast::http::response<boost::beast::http::string_body> http_upgrade_answer(std::uint16_t port,
                                                                                  const std::string& target,
                                                                                  bool upgrade) {
  namespace http = boost::beast::http;
  ws_device raw(port, ws_device::raw_tag{});
  http::write(raw.socket(), get_request(target, upgrade));
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(raw.socket(), buffer, res);
  return res;
}

// What a service's send to `user` returned: the gateway's inbox id, or
// the error.
std::string send_to(client& service, const std::string& user, std::string_view payload) {
  auto r = service.send("user:" + user, payload);
  return r ? *r : r.error().message();
}

}  // namespace

TEST_CASE("a device with a valid token is welcomed and receives sends to its user", "[gateway][e2e]") {
  gateway_fixture f;
  auto alice = f.device("alice");
  auto service = connect_to(f.broker(), "service");
  CHECK(send_to(*service, "alice", "hello alice") == "gw-test");
  const auto m = alice->expect("msg");
  CHECK(m["data"] == "hello alice");
  CHECK(send_to(*service, "bob", "nobody") == make_error_code(errc::no_route).message());
}

TEST_CASE("every socket of a user receives the send, and the route goes with the last socket", "[gateway][e2e]") {
  gateway_fixture f;
  auto phone = f.device("alice");
  auto laptop = f.device("alice");
  auto service = connect_to(f.broker(), "service");
  CHECK(send_to(*service, "alice", "to both") == "gw-test");
  CHECK(phone->expect("msg")["data"] == "to both");
  CHECK(laptop->expect("msg")["data"] == "to both");

  phone.reset();  // one socket left: still routed
  CHECK(wait_until([&] { return f.gateway().counters().sockets == 1; }));
  CHECK(send_to(*service, "alice", "to the laptop") == "gw-test");
  CHECK(laptop->expect("msg")["data"] == "to the laptop");

  laptop.reset();
  CHECK(wait_until([&] { return send_to(*service, "alice", "gone?") == make_error_code(errc::no_route).message(); }));
  CHECK(f.gateway().counters().users == 0);
}

TEST_CASE("a bad token closes with 4001 and an expired one with 4002", "[gateway][e2e]") {
  gateway_fixture f;
  ws_device forged(f.port());
  forged.hello(hs256_token("not-the-secret", R"({"sub":"alice"})"));
  CHECK(forged.wait_closed() == 4001);
  CHECK(forged.close_reason() == "unauthorized");

  ws_device expired(f.port());
  expired.hello(hs256_token(secret, R"({"sub":"alice","exp":)" + std::to_string(unix_time(-60s)) + "}"));
  CHECK(expired.wait_closed() == 4002);

  ws_device no_sub(f.port());
  no_sub.hello(hs256_token(secret, R"({"name":"alice"})"));
  CHECK(no_sub.wait_closed() == 4001);
  CHECK(f.gateway().counters().unauthorized == 3);
}

TEST_CASE("a welcomed socket is closed with 4002 when its token expires", "[gateway][e2e]") {
  // The gateway's wall clock is 300 ms before the token's exp.
  const long long exp = unix_time(3600s);
  gateway_fixture f({}, [exp] { return std::chrono::system_clock::time_point(std::chrono::seconds(exp) - 300ms); });
  auto d = f.device("alice", {}, R"(,"exp":)" + std::to_string(exp));
  CHECK(d->wait_closed() == 4002);
  CHECK(d->close_reason() == "token_expired");
}

TEST_CASE("a socket that sends no hello is closed at the hello timeout", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) { c.hello_timeout = 300ms; });
  ws_device idle(f.port());
  CHECK(idle.wait_closed() == 4004);
  // One that never even upgrades is closed too.
  ws_device raw(f.port(), ws_device::raw_tag{});
  std::array<char, 16> buf{};
  boost::system::error_code ec;
  raw.socket().read_some(asio::buffer(buf), ec);  // blocks until the gateway closes it
  CHECK(ec == asio::error::eof);
}

TEST_CASE("malformed, early, binary and oversized messages close with their codes", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) { c.max_message_bytes = 1024; });
  {
    auto d = f.device("alice");
    d->send("{not json");
    CHECK(d->wait_closed() == 4000);
    CHECK(d->close_reason() == "bad_message: not JSON");
  }
  {
    ws_device d(f.port());
    d.send(R"({"t":"sub","channel":"news"})");
    CHECK(d.wait_closed() == 4005);
    CHECK(d.close_reason() == "hello_required: hello first");
  }
  {
    auto d = f.device("alice");
    d->hello(hs256_token(secret, R"({"sub":"alice"})"));
    CHECK(d->wait_closed() == 4005);
  }
  {
    auto d = f.device("alice");
    d->send_binary("\x01\x02");
    CHECK(d->wait_closed() == 1009);
  }
  {
    auto d = f.device("alice");
    d->send(R"({"t":"hb","pad":")" + std::string(2000, 'x') + "\"}");
    CHECK(d->wait_closed() == 1009);
  }
  // The broker and other devices noticed nothing.
  auto bob = f.device("bob");
  auto service = connect_to(f.broker(), "service");
  CHECK(send_to(*service, "bob", "still here") == "gw-test");
  CHECK(bob->expect("msg")["data"] == "still here");
}

TEST_CASE("a device flooding messages is closed as rate_limited", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) {
    c.max_messages_per_s = 1;
    c.message_burst = 5;
  });
  auto d = f.device("alice");
  for (int i = 0; i < 10; ++i) d->send(R"({"t":"hb"})");
  CHECK(d->wait_closed() == 4006);
}

TEST_CASE("app heartbeats are answered", "[gateway][e2e]") {
  gateway_fixture f;
  auto d = f.device("alice");
  d->send(R"({"t":"hb"})");
  d->expect("hb");
}

TEST_CASE("a device that stops answering pings is closed after the dead deadline", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) {
    c.ping_interval = 100ms;
    c.dead_after = 500ms;
  });
  auto d = f.device("alice");
  // Not reading: Beast answers pings only while it reads.
  std::this_thread::sleep_for(800ms);
  CHECK(d->wait_closed() == 4008);
}

TEST_CASE("a device that answers pings stays connected past the dead deadline", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) {
    c.ping_interval = 100ms;
    c.dead_after = 500ms;
  });
  auto d = f.device("alice");
  CHECK_FALSE(d->next(1500ms));  // reading answers the pings; nothing else comes
  CHECK(d->timed_out());
  CHECK(f.gateway().counters().sockets == 1);
}

TEST_CASE("a device subscribes to the channels its token allows and receives their publications", "[gateway][e2e]") {
  gateway_fixture f;
  auto a = f.device("alice", {}, R"(,"channels":["news","sport.*"])");
  auto b = f.device("bob", {}, R"(,"channels":["sport.*"])");
  a->send(R"({"t":"sub","id":1,"channel":"news"})");
  CHECK(a->expect("ok")["id"] == 1);
  a->send(R"({"t":"sub","id":2,"channel":"sport.tennis"})");
  CHECK(a->expect("ok")["id"] == 2);
  b->send(R"({"t":"sub","id":1,"channel":"sport.tennis"})");
  CHECK(b->expect("ok")["id"] == 1);
  b->send(R"({"t":"sub","id":2,"channel":"news"})");
  const auto refused = b->expect("error");
  CHECK(refused["code"] == "forbidden");
  CHECK(refused["id"] == 2);
  b->send(R"({"t":"sub","id":3,"channel":"sport.>"})");  // a wider pattern than allowed
  CHECK(b->expect("error")["code"] == "forbidden");

  auto publisher = connect_to(f.broker(), "publisher");
  REQUIRE_FALSE(publisher->publish_confirmed("sport.tennis", std::as_bytes(std::span("ace", 3))));
  CHECK(a->expect("pub")["data"] == "ace");
  CHECK(b->expect("pub")["data"] == "ace");
  REQUIRE_FALSE(publisher->publish_confirmed("news", std::as_bytes(std::span("headline", 8))));
  const auto news = a->expect("pub");
  CHECK(news["channel"] == "news");
  CHECK(news["data"] == "headline");

  a->send(R"({"t":"unsub","id":4,"channel":"news"})");
  CHECK(a->expect("ok")["id"] == 4);
  a->send(R"({"t":"unsub","id":5,"channel":"news"})");
  CHECK(a->expect("error")["code"] == "not_found");
  REQUIRE_FALSE(publisher->publish_confirmed("news", std::as_bytes(std::span("late", 4))));
  REQUIRE_FALSE(publisher->publish_confirmed("sport.tennis", std::as_bytes(std::span("set", 3))));
  CHECK(a->expect("pub")["data"] == "set");  // not "late"
  CHECK(b->expect("pub")["data"] == "set");
}

TEST_CASE("an offer reaches a device that declared offers, and its ack is the sender's receipt", "[gateway][e2e]") {
  gateway_fixture f;
  auto capable = f.device("alice", R"("caps":["offers"])");
  auto old_app = f.device("bob");

  collector<receipt> receipts;
  client_options o;
  o.port = f.broker().port();
  o.on_receipt = [&](const receipt& r) { receipts.add(r); };
  auto sender = client::connect(o).value();
  const std::string_view keys[] = {"user:alice", "user:bob"};
  const auto sent = sender->send_offer(keys, std::as_bytes(std::span("ride 7", 6)),
                                       {.offer_id = 77, .expires_in = 10s, .receipt_timeout = 5s});
  REQUIRE(sent);
  const auto offer = capable->expect("offer");
  CHECK(offer["offer"] == "77");
  CHECK(offer["data"] == "ride 7");
  CHECK(offer["ttl_ms"].get<int>() > 0);
  const auto plain = old_app->expect("msg");  // the old shape: no offer id to ack
  CHECK(plain["data"] == "ride 7");
  CHECK_FALSE(plain.contains("offer"));

  capable->send(R"({"t":"ack","offer":"77"})");
  REQUIRE(wait_until([&] { return receipts.count == 1; }));
  const auto r = receipts.snapshot().at(0);
  CHECK(r.offer_id == 77);
  CHECK(r.route_key == "user:alice");
  CHECK(r.outcome == receipt_outcome::acked);
  capable->send(R"({"t":"ack","offer":77})");  // acked already: not held any more
  CHECK(capable->expect("error")["code"] == "not_found");
}

TEST_CASE("a withdrawn offer is retracted on the device", "[gateway][e2e]") {
  gateway_fixture f;
  auto d = f.device("alice", R"("caps":["offers"])");
  auto sender = connect_to(f.broker(), "sender");
  const std::string_view keys[] = {"user:alice"};
  REQUIRE(sender->send_offer(keys, std::as_bytes(std::span("job", 3)), {.offer_id = 5, .expires_in = 10s}));
  CHECK(d->expect("offer")["offer"] == "5");
  REQUIRE(sender->withdraw(5));
  CHECK(d->expect("withdrawn")["offer"] == "5");
}

TEST_CASE("a drain closes every socket with 1001 and a reconnect hint, and refuses new upgrades", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) {
    c.drain_window = 300ms;
    c.drain_jitter = 50ms;
  });
  auto a = f.device("alice");
  auto b = f.device("bob");
  f.gateway().drain();
  CHECK(a->wait_closed() == 1001);
  CHECK(a->close_reason().starts_with("going_away: retry_after_ms="));
  CHECK(b->wait_closed() == 1001);
}

TEST_CASE("a drain with a socket left ends the gateway once it closed, before the window is over", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) { c.drain_window = 60s; });
  {
    auto d = f.device("alice");
    f.gateway().drain();
    // One socket, so all of it is due in the first step.
    CHECK(d->wait_closed() == 1001);
  }
  CHECK(wait_until([&] { return f.finished(); }, 5s));
}

TEST_CASE("a drain of a gateway without sockets ends it at once", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) { c.drain_window = 60s; });
  f.gateway().drain();
  CHECK(wait_until([&] { return f.finished(); }, 5s));
}

TEST_CASE("past max-sockets an upgrade gets HTTP 503 with a Retry-After", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) { c.max_sockets = 1; });
  auto a = f.device("alice");
  namespace http = boost::beast::http;
  const auto res = http_upgrade_answer(f.port(), "/ws", true);
  CHECK(res.result() == http::status::service_unavailable);
  CHECK(res[http::field::retry_after] == "1");
  CHECK(f.gateway().counters().refused == 1);
}

TEST_CASE("anything but a WebSocket upgrade at /ws gets an HTTP error", "[gateway][e2e]") {
  gateway_fixture f;
  namespace http = boost::beast::http;
  for (const auto& [target, upgrade, status] : {std::tuple{"/ws", false, http::status::upgrade_required},
                                                std::tuple{"/other", true, http::status::not_found}}) {
    const auto res = http_upgrade_answer(f.port(), target, upgrade);
    CHECK(res.result() == status);
  }
}

TEST_CASE("a slow consumer is disconnected with 4007 under the disconnect policy", "[gateway][e2e]") {
  gateway_fixture f([](gateway_config& c) {
    c.max_pending_bytes = 64 * 1024;
    c.slow_consumer = edge::slow_consumer_policy::disconnect;
  });
  auto d = f.device("alice");
  // The device reads nothing: kernel buffers fill, then the gateway's queue.
  auto service = connect_to(f.broker(), "service");
  const std::string big(60'000, 'x');
  bool closed = false;
  for (int i = 0; i < 2000 && !closed; ++i) {
    (void)service->send_nowait("user:alice", std::as_bytes(std::span(big.data(), big.size())));
    if (i % 50 == 49) closed = f.gateway().counters().closes_for(edge::device_errc::slow_consumer) > 0;
  }
  CHECK(wait_until([&] { return f.gateway().counters().closes_for(edge::device_errc::slow_consumer) == 1; }));
  // The device may see the close frame or, its buffers full, a reset after
  // the close grace: either way it is gone.
  CHECK(wait_until([&] { return f.gateway().counters().sockets == 0; }));
}

namespace {

// A durable send of `payload` to `user` on `stream`; REQUIREs success.
send_result send_durable_to(client& service, const std::string& user, const std::string& stream,
                            std::string_view payload) {
  const std::string key = "user:" + user;
  const std::string_view keys[] = {key};
  auto r = service.send_durable(keys, stream, std::as_bytes(std::span(payload.data(), payload.size())));
  REQUIRE(r);
  return *r;
}

std::string resume_of(const std::string& stream, std::uint64_t seq, std::uint64_t epoch) {
  return R"("resume":{")" + stream + R"(":{"seq":)" + std::to_string(seq) + R"(,"epoch":")" + std::to_string(epoch) +
         "\"}}";
}

}  // namespace

TEST_CASE("a device that resumes from its last position gets exactly what it missed, then live messages",
          "[gateway][e2e][resume]") {
  gateway_fixture f({}, {}, /*with_log=*/true);
  auto service = connect_to(f.broker(), "service");
  std::uint64_t epoch = 0;
  {
    auto d = f.device("alice");
    for (int i = 1; i <= 3; ++i) {
      const auto sent = send_durable_to(*service, "alice", "u.alice", "m" + std::to_string(i));
      epoch = sent.epoch;
      const auto m = d->expect("msg");
      CHECK(m["data"] == "m" + std::to_string(i));
      CHECK(m["stream"] == "u.alice");
      CHECK(m["seq"] == i);
      CHECK(m["epoch"] == std::to_string(epoch));
    }
  }
  // Offline: sent to no route, but in the log; another user's record between.
  CHECK(wait_until([&] { return !service->registry_get("user:alice"); }));
  CHECK(send_durable_to(*service, "alice", "u.alice", "m4").gateways.at(0).empty());
  send_durable_to(*service, "bob", "u.alice", "not for alice");
  send_durable_to(*service, "alice", "u.alice", "m6");

  auto again = f.device("alice", resume_of("u.alice", 3, epoch));
  const auto m4 = again->expect("msg");
  CHECK(m4["data"] == "m4");
  CHECK(m4["seq"] == 4);
  CHECK(m4["replayed"] == true);
  CHECK(again->expect("msg")["seq"] == 6);
  send_durable_to(*service, "alice", "u.alice", "m7");
  const auto live = again->expect("msg");
  CHECK(live["seq"] == 7);  // (the gateway's own inbox may have read it back with 4 and 6: "replayed" either way)
  CHECK_FALSE(again->next(300ms));  // nothing twice
}

TEST_CASE("a resume the log cannot honour says why, then gives what there is", "[gateway][e2e][resume]") {
  gateway_fixture f({}, {}, /*with_log=*/true);
  auto service = connect_to(f.broker(), "service");
  std::uint64_t epoch = 0;
  for (int i = 1; i <= 5; ++i) epoch = send_durable_to(*service, "alice", "u.alice", "m" + std::to_string(i)).epoch;
  REQUIRE(service->set_stream_retention("u.alice", {.max_records = 2}));
  send_durable_to(*service, "alice", "u.alice", "m6");  // retention runs after an append
  CHECK(wait_until([&] { return service->stream_info("u.alice").value().first_seq == 5; }));

  auto trimmed = f.device("alice", resume_of("u.alice", 1, epoch));
  const auto gap = trimmed->expect("trimmed");
  CHECK(gap["stream"] == "u.alice");
  CHECK(gap["reason"] == "trimmed");
  CHECK(gap["first_seq"] == 5);
  CHECK(trimmed->expect("msg")["seq"] == 5);
  CHECK(trimmed->expect("msg")["seq"] == 6);

  auto other_epoch = f.device("alice", resume_of("u.alice", 5, epoch + 1));
  CHECK(other_epoch->expect("trimmed")["reason"] == "epoch_changed");
  auto gone = f.device("alice", resume_of("u.nobody", 5, epoch));
  CHECK(gone->expect("trimmed")["reason"] == "stream_gone");
  auto from_start = f.device("alice", resume_of("u.alice", 0, 0));
  CHECK(from_start->expect("msg")["seq"] == 5);
  CHECK(from_start->expect("msg")["seq"] == 6);
}

TEST_CASE("devices stay connected through a broker restart and get every durable send once", "[gateway][e2e][resume]") {
  gateway_fixture f({}, {}, /*with_log=*/true);
  auto d = f.device("alice");
  {
    auto service = connect_to(f.broker(), "service");
    send_durable_to(*service, "alice", "u.alice", "before");
    CHECK(d->expect("msg")["data"] == "before");
  }
  f.restart_broker();
  auto service = connect_to(f.broker(), "service");
  // Most likely before the gateway's client is back: stored, not routed.
  send_durable_to(*service, "alice", "u.alice", "while the gateway reconnects");
  // Routed again once the gateway's client restored its lease and routes.
  CHECK(wait_until([&] { return send_durable_to(*service, "alice", "u.alice", "probe").gateways.at(0) == "gw-test"; },
                   20s));
  send_durable_to(*service, "alice", "u.alice", "after");
  std::vector<std::uint64_t> seqs;
  for (auto m = d->next(2s); m; m = d->next(500ms)) {
    if ((*m)["t"] != "msg") continue;
    seqs.push_back((*m)["seq"].get<std::uint64_t>());
  }
  // "before" was 1; every later record was sent to alice (the probes not
  // routed too: they are in the log): all of them arrive, in order, once.
  const auto last = service->stream_info("u.alice").value().last_seq;
  std::vector<std::uint64_t> all(last - 1);
  std::iota(all.begin(), all.end(), 2);
  CHECK(seqs == all);
}

TEST_CASE("a device resumes on a restarted gateway without loss or repeat", "[gateway][e2e][resume]") {
  gateway_fixture f({}, {}, /*with_log=*/true);
  auto service = connect_to(f.broker(), "service");
  auto d = f.device("alice");
  const auto first = send_durable_to(*service, "alice", "u.alice", "one");
  CHECK(d->expect("msg")["seq"] == first.seq);
  f.stop_gateway();
  CHECK(d->wait_closed() == 1001);
  send_durable_to(*service, "alice", "u.alice", "two");  // no gateway holds alice now
  f.start_gateway();
  auto back = f.device("alice", resume_of("u.alice", first.seq, first.epoch));
  const auto two = back->expect("msg");
  CHECK(two["data"] == "two");
  CHECK(two["seq"] == first.seq + 1);
  send_durable_to(*service, "alice", "u.alice", "three");
  CHECK(back->expect("msg")["seq"] == first.seq + 2);
  CHECK_FALSE(back->next(300ms));
}

TEST_CASE("what was stored while a broker restart left a user unrouted reaches the device that stayed connected",
          "[gateway][e2e][resume]") {
  gateway_fixture f({}, {}, /*with_log=*/true);
  {
    auto service = connect_to(f.broker(), "service");
    send_durable_to(*service, "alice", "u.alice", "one");  // nobody connected: in the log only
  }
  // The device gets "one" from its resume: the gateway's own inbox never saw
  // the stream, so only the device's position knows where it stands.
  auto d = f.device("alice", resume_of("u.alice", 0, 0));
  CHECK(d->expect("msg")["seq"] == 1);
  f.restart_broker();
  auto service = connect_to(f.broker(), "service");
  // Most likely before the gateway's client is back: stored, not routed.
  send_durable_to(*service, "alice", "u.alice", "two");
  CHECK(wait_until([&] { return send_durable_to(*service, "alice", "u.alice", "probe").gateways.at(0) == "gw-test"; },
                   20s));
  std::vector<std::uint64_t> seqs;
  for (auto m = d->next(2s); m; m = d->next(500ms))
    if ((*m)["t"] == "msg") seqs.push_back((*m)["seq"].get<std::uint64_t>());
  const auto last = service->stream_info("u.alice").value().last_seq;
  std::vector<std::uint64_t> all(last - 1);
  std::iota(all.begin(), all.end(), 2);
  CHECK(seqs == all);
}

TEST_CASE("a message above 8 KiB but within max-message-bytes is read", "[gateway][e2e]") {
  gateway_fixture f;  // default: 16 KiB
  auto d = f.device("alice");
  d->send(R"({"t":"hb","pad":")" + std::string(12'000, 'x') + "\"}");
  d->expect("hb");
}

TEST_CASE("a durable message that does not fit closes a slow device even under the drop policy",
          "[gateway][e2e][resume]") {
  gateway_fixture f([](gateway_config& c) { c.max_pending_bytes = 64 * 1024; }, {}, /*with_log=*/true);
  auto d = f.device("alice");  // reads nothing
  auto service = connect_to(f.broker(), "service");
  const std::string big(60'000, 'x');
  const std::string key = "user:alice";
  const std::string_view keys[] = {key};
  for (int i = 0; i < 400 && f.gateway().counters().closes_for(edge::device_errc::slow_consumer) == 0; ++i)
    REQUIRE(service->send_durable(keys, "u.alice", std::as_bytes(std::span(big.data(), big.size()))));
  // Closed: the device resumes from its last message, where dropping would
  // have left a hole its position skips.
  CHECK(wait_until([&] { return f.gateway().counters().closes_for(edge::device_errc::slow_consumer) == 1; }));
  CHECK(wait_until([&] { return f.gateway().counters().sockets == 0; }));
  CHECK(f.gateway().counters().dropped == 0);
}

TEST_CASE("a resume larger than the socket's queue arrives whole, read back a part at a time",
          "[gateway][e2e][resume]") {
  gateway_fixture f([](gateway_config& c) { c.max_pending_bytes = 16 * 1024; }, {}, /*with_log=*/true);
  auto service = connect_to(f.broker(), "service");
  const std::string payload(2000, 'p');
  std::uint64_t epoch = 0;
  for (int i = 0; i < 60; ++i) epoch = send_durable_to(*service, "alice", "u.alice", payload).epoch;  // 120 KB
  auto d = f.device("alice", resume_of("u.alice", 0, 0));
  for (std::uint64_t seq = 1; seq <= 60; ++seq) {
    const auto m = d->expect("msg");
    REQUIRE(m["seq"] == seq);
    CHECK(m["epoch"] == std::to_string(epoch));
  }
  CHECK(f.gateway().counters().closed == 0);
}

TEST_CASE("a user's last socket on one gateway leaves the route another gateway put since", "[gateway][e2e]") {
  gateway_fixture f;
  gateway_config second = f.config();
  second.inbox_id = "gw-second";
  gateway_server other(second);
  std::thread runs([&] { other.run(); });
  {
    auto here = f.device("alice");
    ws_device there(other.port());
    there.hello(hs256_token(secret, R"({"sub":"alice"})"));
    there.expect("welcome");  // alice's route now names gw-second
    auto service = connect_to(f.broker(), "service");
    CHECK(send_to(*service, "alice", "x") == "gw-second");
    here.reset();  // gw-test's last socket of alice: it must not delete gw-second's route
    CHECK(wait_until([&] { return f.gateway().counters().users == 0; }));
    CHECK(send_to(*service, "alice", "still routed") == "gw-second");
    CHECK(there.expect("msg")["data"] == "x");
    CHECK(there.expect("msg")["data"] == "still routed");
  }
  other.stop();
  runs.join();
}

TEST_CASE("a resume on a broker without a log says the stream is gone", "[gateway][e2e][resume]") {
  gateway_fixture f;  // no data folder: no log
  auto d = f.device("alice", resume_of("u.alice", 3, 7));
  const auto t = d->expect("trimmed");
  CHECK(t["reason"] == "stream_gone");
  d->send(R"({"t":"hb"})");
  d->expect("hb");  // and the socket stays
}

TEST_CASE("the monitoring port serves health, readiness, metrics that promtool accepts, stats and a page",
          "[gateway][e2e][http]") {
  gateway_fixture f([](gateway_config& c) {
    c.http_host = "127.0.0.1";
    c.http_port = 0;
    c.drain_window = 60s;
  });
  REQUIRE(f.gateway().http_port() != 0);
  auto d = f.device("alice");
  CHECK(http_request(f.gateway().http_port(), "GET", "/healthz").body == "ok\n");
  const auto ready = http_request(f.gateway().http_port(), "GET", "/readyz");
  CHECK(ready.status == 200);
  const auto metrics = http_request(f.gateway().http_port(), "GET", "/metrics");
  CHECK(metrics.status == 200);
  CHECK_THAT(metrics.body, Catch::Contains("switchyard_gateway_sockets 1\n"));
  CHECK_THAT(metrics.body, Catch::Contains("switchyard_gateway_users 1\n"));
  CHECK_THAT(metrics.body, Catch::Contains("switchyard_gateway_broker_connected 1\n"));
  CHECK_THAT(metrics.body, Catch::Contains("switchyard_gateway_closes_total{reason=\"unauthorized\"} 0\n"));
  temp_dir dir;
  const auto file = (dir.path() / "metrics.txt").string();
  std::ofstream(file) << metrics.body;
  CHECK(std::system(("promtool check metrics < " + file + " > /dev/null 2>&1").c_str()) == 0);
  const auto stats = nlohmann::json::parse(http_request(f.gateway().http_port(), "GET", "/stats").body);
  CHECK(stats["inbox"] == "gw-test");
  CHECK(stats["figures"]["welcomed_total"] == 1);
  CHECK_THAT(http_request(f.gateway().http_port(), "GET", "/").body, Catch::Contains("switchyard-gateway"));
  CHECK(http_request(f.gateway().http_port(), "GET", "/nope").status == 404);
  // Draining (the socket is still open: the window is long): not ready.
  f.gateway().drain();
  CHECK(wait_until([&] { return http_request(f.gateway().http_port(), "GET", "/readyz").status == 503; }));
  CHECK_THAT(http_request(f.gateway().http_port(), "GET", "/readyz").body, Catch::Contains("draining"));
}

TEST_CASE("a reload that turns the offers flag off sends plain messages to the sockets already open",
          "[gateway][e2e][reload]") {
  gateway_fixture f;
  auto d = f.device("alice", R"("caps":["offers"])");
  auto sender = connect_to(f.broker(), "sender");
  const std::string_view keys[] = {"user:alice"};
  REQUIRE(sender->send_offer(keys, std::as_bytes(std::span("one", 3)), {.offer_id = 1, .expires_in = 10s}));
  CHECK(d->expect("offer")["offer"] == "1");
  auto off = f.config();
  off.flags = {{"offers", 0}};
  f.gateway().reload(off);
  // The reload runs on the gateway's loop: an app heartbeat after it proves it ran.
  d->send(R"({"t":"hb"})");
  d->expect("hb");
  REQUIRE(sender->send_offer(keys, std::as_bytes(std::span("two", 3)), {.offer_id = 2, .expires_in = 10s}));
  const auto plain = d->expect("msg");
  CHECK(plain["data"] == "two");
  CHECK_FALSE(plain.contains("offer"));
}

TEST_CASE("a gateway reaches a broker over TLS, its certificate checked against the CA given", "[gateway][e2e][tls]") {
  const tls_certs certs;
  const auto tls_broker = [&](broker::server_config& b) {
    b.tls_cert = certs.pem("ca-broker");
    b.tls_key = certs.key("ca-broker");
  };
  gateway_fixture f([&](gateway_config& c) { c.broker_tls_ca = certs.pem("ca"); }, {}, false, tls_broker);
  auto d = f.device("alice");
  client_options o;
  o.port = f.broker().port();
  o.tls = {.enabled = true, .ca_file = certs.pem("ca")};
  auto service = client::connect(o).value();
  CHECK(send_to(*service, "alice", "over TLS") == "gw-test");
  CHECK(d->expect("msg")["data"] == "over TLS");
  // A CA the broker's certificate does not chain to: no start.
  gateway_config wrong = f.config();
  wrong.broker_tls_ca = certs.pem("other-ca");
  wrong.inbox_id = "gw-wrong";
  CHECK_THROWS_WITH(gateway_server(wrong), Catch::Contains("cannot reach the broker"));
}

namespace {

// A gateway serving wss:// with `name`'s certificate (tls_certs), copied to
// gateway.pem/gateway.key in `dir` so that a test can replace the files.
std::function<void(gateway_config&)> wss_with(const tls_certs& certs, const temp_dir& dir, const std::string& name) {
  std::filesystem::copy_file(certs.pem(name), dir.path() / "gateway.pem",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(certs.key(name), dir.path() / "gateway.key",
                             std::filesystem::copy_options::overwrite_existing);
  return [&dir](gateway_config& c) {
    c.tls_cert = (dir.path() / "gateway.pem").string();
    c.tls_key = (dir.path() / "gateway.key").string();
  };
}

// A welcomed wss:// device of `user`, trusting `ca_file`.
std::unique_ptr<wss_device> wss_user(std::uint16_t port, const std::string& ca_file, const std::string& user) {
  auto d = std::make_unique<wss_device>(port, ca_file);
  d->hello(hs256_token(secret, R"({"sub":")" + user + "\"}"));
  REQUIRE(d->expect("welcome")["user"] == user);
  return d;
}

}  // namespace

TEST_CASE("with a certificate the gateway speaks wss://, and a device receives sends over it", "[gateway][e2e][tls]") {
  const tls_certs certs;
  const temp_dir dir;
  gateway_fixture f(wss_with(certs, dir, "ca-broker"));
  auto d = wss_user(f.port(), certs.pem("ca"), "alice");
  auto service = connect_to(f.broker(), "service");
  CHECK(send_to(*service, "alice", "over wss") == "gw-test");
  CHECK(d->expect("msg")["data"] == "over wss");
  d->send(R"({"t":"hb"})");
  d->expect("hb");
  // A device that does not trust the certificate's CA cannot complete the handshake.
  wss_device distrustful(f.port(), certs.pem("other-ca"), ws_device::raw_tag{});
  CHECK_FALSE(distrustful.handshake_tls());
  CHECK(f.gateway().counters().welcomed == 1);
}

TEST_CASE("a plain ws:// upgrade on a wss:// port is closed and counted as a failed handshake", "[gateway][e2e][tls]") {
  const tls_certs certs;
  const temp_dir dir;
  gateway_fixture f(wss_with(certs, dir, "ca-broker"));
  namespace http = boost::beast::http;
  ws_device raw(f.port(), ws_device::raw_tag{});
  http::write(raw.socket(), get_request("/ws", true));
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  boost::beast::error_code ec;
  http::read(raw.socket(), buffer, res, ec);
  CHECK(ec);  // no HTTP answer: the connection ends
  CHECK(wait_until([&] { return f.gateway().counters().tls_failed == 1; }));
  CHECK(f.gateway().counters().welcomed == 0);
}

TEST_CASE("a TLS handshake never begun is closed at the hello timeout", "[gateway][e2e][tls]") {
  const tls_certs certs;
  const temp_dir dir;
  auto tls = wss_with(certs, dir, "ca-broker");
  gateway_fixture f([&](gateway_config& c) {
    tls(c);
    c.hello_timeout = 300ms;
  });
  ws_device silent(f.port(), ws_device::raw_tag{});  // TCP only: no ClientHello
  char byte = 0;
  asio_error_code ec;
  silent.socket().read_some(asio::buffer(&byte, 1), ec);  // returns when the gateway closes it
  CHECK(ec == asio::error::eof);
  CHECK(wait_until([&] { return f.gateway().counters().tls_failed == 1; }));
  CHECK(f.gateway().counters().closes_for(edge::device_errc::hello_timeout) == 1);
}

TEST_CASE("over wss:// large messages go both ways, a backed-up socket catches up in order, and closes carry codes",
          "[gateway][e2e][tls]") {
  const tls_certs certs;
  const temp_dir dir;
  auto tls = wss_with(certs, dir, "ca-broker");
  gateway_fixture f([&](gateway_config& c) {
    tls(c);
    c.max_pending_bytes = 16 << 20;
  });
  auto d = wss_user(f.port(), certs.pem("ca"), "alice");
  d->send(R"({"t":"hb","pad":")" + std::string(12'000, 'x') + "\"}");  // above one read, below a record
  d->expect("hb");

  // 8 MB to a device that does not read meanwhile: more than the kernel's
  // socket buffers hold, so the gateway's writes wait for the socket.
  auto service = connect_to(f.broker(), "service");
  constexpr int count = 200;
  for (int i = 0; i < count; ++i) {
    const std::string payload = std::to_string(i) + ":" + std::string(40'000, static_cast<char>('a' + i % 26));
    REQUIRE(service->send("user:alice", payload));
  }
  CHECK(wait_until([&] { return f.gateway().counters().delivered == count; }));
  for (int i = 0; i < count; ++i) {
    const auto m = d->expect("msg");
    const std::string data = m["data"];
    REQUIRE(data == std::to_string(i) + ":" + std::string(40'000, static_cast<char>('a' + i % 26)));
  }
  CHECK(f.gateway().counters().dropped == 0);

  wss_device forged(f.port(), certs.pem("ca"));
  forged.hello(hs256_token("not-the-secret", R"({"sub":"alice"})"));
  CHECK(forged.wait_closed() == 4001);
  CHECK(forged.close_reason() == "unauthorized");
  d->send("not json");
  CHECK(d->wait_closed() == 4000);
  CHECK(wait_until([&] { return f.gateway().counters().sockets == 0; }));
}

TEST_CASE("a reload reads the certificate again: new sockets get the new one, open ones stay", "[gateway][e2e][tls]") {
  const tls_certs certs;
  const temp_dir dir;
  gateway_fixture f(wss_with(certs, dir, "ca-broker"));
  auto before = wss_user(f.port(), certs.pem("ca"), "alice");

  wss_with(certs, dir, "other-ca-broker");  // the renewed certificate, written over the files
  f.gateway().reload(f.config());
  // The reload runs on the gateway's loop: a heartbeat answered after it proves it ran.
  before->send(R"({"t":"hb"})");
  before->expect("hb");
  auto after = wss_user(f.port(), certs.pem("other-ca"), "bob");
  wss_device old_ca(f.port(), certs.pem("ca"), ws_device::raw_tag{});
  CHECK_FALSE(old_ca.handshake_tls());

  // A key that does not match its certificate: refused, the certificate in use stays.
  std::filesystem::copy_file(certs.key("ca-broker"), dir.path() / "gateway.key",
                             std::filesystem::copy_options::overwrite_existing);
  f.gateway().reload(f.config());
  after->send(R"({"t":"hb"})");
  after->expect("hb");
  auto third = wss_user(f.port(), certs.pem("other-ca"), "carol");

  auto service = connect_to(f.broker(), "service");
  CHECK(send_to(*service, "alice", "still here") == "gw-test");
  CHECK(before->expect("msg")["data"] == "still here");
}

TEST_CASE("a gateway whose certificate cannot be read does not start, and says which file", "[gateway][e2e][tls]") {
  CHECK_THROWS_WITH(gateway_fixture([](gateway_config& c) {
                      c.tls_cert = "/nonexistent/gateway.pem";
                      c.tls_key = "/nonexistent/gateway.key";
                    }),
                    Catch::Contains("tls-cert /nonexistent/gateway.pem cannot be used"));
  const tls_certs certs;
  CHECK_THROWS_WITH(gateway_fixture([&](gateway_config& c) {
                      c.tls_cert = certs.pem("ca-broker");
                      c.tls_key = certs.key("other-ca-broker");
                    }),
                    Catch::Contains("tls-key " + certs.key("other-ca-broker") + " cannot be used") &&
                        Catch::Contains("key values mismatch"));
}

// End to end: offers (docs/protocol.md §15) through a real broker on
// 127.0.0.1, spoken frame by frame: expiries, receipts (acked, timed out,
// after the sender reconnected), withdrawal before and after the write,
// pending offers, exposure caps, and the flag "offers" with its ramp.

#include "broker/tables/feature_flags.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace switchyard::test;
using namespace std::chrono_literals;
using protocol::wire::Message;
namespace wire = protocol::wire;

namespace {

constexpr std::string_view offers_caps[] = {"routing", "offers", "admin"};
constexpr std::string_view routing_only[] = {"routing", "admin"};
constexpr std::string_view durable_offers_caps[] = {"routing", "offers", "log", "admin"};
constexpr std::string_view durable_only_caps[] = {"routing", "log", "admin"};

// A raw connection past its welcome, with its own builder and request ids.
struct peer_conn {
  raw_connection raw;
  protocol::frame_builder b;
  std::uint64_t next_rid = 10;
  raw_frame storage;

  peer_conn(std::uint16_t port, std::span<const std::string_view> caps, std::string_view client_id = {},
            int receive_buffer = 0)
      : raw(port, receive_buffer) {
    protocol::hello_fields h;
    h.protocol_major = protocol::protocol_major;
    h.client_name = "offers-test";
    h.client_id = client_id;
    h.capabilities = caps;
    raw.send(b.hello(1, h));
    REQUIRE(raw.next_of(Message::Welcome, storage));
  }
  // Sends `frame` (built with request id `rid`) and returns the frame
  // answering it (skipping unsolicited ones), or nullptr.
  const wire::Frame* call(protocol::bytes_view frame, std::uint64_t rid) {
    raw.send(frame);
    for (int i = 0; i < 10000; ++i) {
      const auto* f = raw.next(storage);
      if (!f) return nullptr;
      if (f->request_id() == rid) return f;
    }
    return nullptr;
  }
  std::uint64_t rid() { return next_rid++; }
  // The next unsolicited frame of `type` (others skipped), or nullptr.
  const wire::Frame* next(Message type, std::chrono::milliseconds timeout = 5s) {
    return raw.next_of(type, storage, timeout);
  }
};

// A gateway: a lease, inbox `inbox` and a route for each key.
struct gateway_conn : peer_conn {
  std::uint64_t lease = 0;
  gateway_conn(std::uint16_t port, std::string_view inbox, std::vector<std::string_view> keys,
               std::span<const std::string_view> caps = offers_caps, std::string_view client_id = {},
               int receive_buffer = 0)
      : peer_conn(port, caps, client_id, receive_buffer) {
    auto r = rid();
    const auto* l = call(b.lease_grant(r, 30000), r);
    REQUIRE(l);
    REQUIRE(l->message_as_LeaseInfo());
    lease = l->message_as_LeaseInfo()->lease_id();
    r = rid();
    REQUIRE(call(b.inbox_open(r, inbox, lease), r)->message_type() == Message::Ok);
    for (const auto k : keys) {
      r = rid();
      REQUIRE(call(b.registry_put(r, k, inbox, lease, 0), r)->message_type() == Message::RegistryEntry);
    }
  }
};

// Sends an offer and returns its SendResult (REQUIREd).
struct offer_answer {
  std::vector<std::string> gateways;
  std::vector<wire::KeyOutcome> outcomes;
  std::uint32_t routed = 0, capped = 0;
};
offer_answer send_offer(peer_conn& c, std::vector<std::string_view> keys, std::string_view payload,
                        const protocol::offer_fields& o) {
  const auto r = c.rid();
  const auto* f =
      c.call(c.b.send(r, keys, {reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()}, {}, &o), r);
  REQUIRE(f);
  const auto* m = f->message_as_SendResult();
  if (!m && f->message_as_Error()) FAIL("send answered " << f->message_as_Error()->message()->str());
  REQUIRE(m);
  offer_answer a;
  if (m->gateways())
    for (const auto* g : *m->gateways()) a.gateways.push_back(g->str());
  if (m->outcomes())
    for (const auto x : *m->outcomes()) a.outcomes.push_back(x);
  a.routed = m->routed();
  a.capped = m->capped();
  return a;
}

protocol::offer_fields offer(std::uint64_t id, std::uint32_t expires_ms, std::uint32_t receipt_ms = 0) {
  protocol::offer_fields o;
  o.offer_id = id;
  o.expires_in_ms = expires_ms;
  o.receipt_timeout_ms = receipt_ms;
  return o;
}

// The next frame `c` was sent, past the server's heartbeat Pings; nullptr
// on timeout.
const wire::Frame* next_not_ping(peer_conn& c) {
  for (;;) {
    const auto* f = c.raw.next(c.storage);
    if (!f || f->message_type() != Message::Ping) return f;
  }
}

// Offer `id` (60 s expiry) with an exposure cap of `cap_max` in 60 s.
protocol::offer_fields capped_offer(std::uint64_t id, std::uint32_t cap_max) {
  auto o = offer(id, 60000);
  o.cap_max = cap_max;
  o.cap_window_ms = 60000;
  return o;
}

std::string text(const flatbuffers::Vector<std::uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}

// Fills the kernel buffers and the broker's outbound queue of the slow
// gateway (it reads nothing) with `count` sends of 64 KiB to `key`.
void back_up(peer_conn& sender, std::string_view key, int count) {
  const std::string big(64 * 1024, 'x');
  const std::string_view keys[] = {key};
  for (int i = 0; i < count; ++i)
    sender.raw.send(sender.b.send(0, keys, {reinterpret_cast<const std::uint8_t*>(big.data()), big.size()}));
  const auto r = sender.rid();
  REQUIRE(sender.call(sender.b.ping(r), r));  // every send above was handled
}

// Reads everything `gw` was sent until `done` returns true for a frame
// (REQUIREd within the bound), calling `each` on every InboxDelivery.
template <class Each>
void read_until_ping(gateway_conn& gw, Each&& each) {
  const auto r = gw.rid();
  gw.raw.send(gw.b.ping(r));
  for (int i = 0; i < 100000; ++i) {
    const auto* f = gw.raw.next(gw.storage, 20s);
    REQUIRE(f);
    if (f->message_type() == Message::Pong && f->request_id() == r) return;
    if (const auto* d = f->message_as_InboxDelivery()) each(*d);
  }
  FAIL("no pong");
}

}  // namespace

TEST_CASE("a gateway's ack sends the dispatcher an acked receipt with the user and the gateway", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  peer_conn dispatcher(server.port(), offers_caps);
  const auto a = send_offer(dispatcher, {"user:a"}, "ride 1", offer(1, 15000, 2000));
  CHECK(a.outcomes == std::vector<wire::KeyOutcome>{wire::KeyOutcome::routed});
  CHECK(a.gateways == std::vector<std::string>{"gw-1"});

  const auto* f = gw.next(Message::InboxDelivery);
  REQUIRE(f);
  const auto* d = f->message_as_InboxDelivery();
  CHECK(d->offer_id() == 1);
  CHECK(d->time_left_ms() > 0);
  CHECK(d->time_left_ms() <= 15000);
  CHECK(text(d->payload()) == "ride 1");
  const auto r = gw.rid();
  REQUIRE(gw.call(gw.b.offer_ack(r, 1, "user:a"), r)->message_type() == Message::Ok);

  const auto* rf = dispatcher.next(Message::Receipt);
  REQUIRE(rf);
  const auto* rc = rf->message_as_Receipt();
  CHECK(rc->offer_id() == 1);
  CHECK(rc->route_key()->str() == "user:a");
  CHECK(rc->inbox_id()->str() == "gw-1");
  CHECK(rc->outcome() == wire::ReceiptOutcome::acked);
  CHECK(rc->elapsed_us() > 0);
  // A second ack of the same key finds nothing to acknowledge.
  const auto r2 = gw.rid();
  const auto* again = gw.call(gw.b.offer_ack(r2, 1, "user:a"), r2);
  REQUIRE(again->message_as_Error());
  CHECK(again->message_as_Error()->code() == wire::ErrorCode::not_found);
}

TEST_CASE("no ack within the receipt timeout sends the dispatcher a timeout receipt", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  peer_conn dispatcher(server.port(), offers_caps);
  send_offer(dispatcher, {"user:a"}, "ride", offer(5, 15000, 50));
  const auto* rf = dispatcher.next(Message::Receipt);
  REQUIRE(rf);
  CHECK(rf->message_as_Receipt()->outcome() == wire::ReceiptOutcome::timeout);
  CHECK(rf->message_as_Receipt()->route_key()->str() == "user:a");
  CHECK(rf->message_as_Receipt()->elapsed_us() >= 50000);
  // Acked later all the same: the dispatcher hears that too.
  const auto r = gw.rid();
  REQUIRE(gw.call(gw.b.offer_ack(r, 5, ""), r)->message_type() == Message::Ok);
  const auto* late = dispatcher.next(Message::Receipt);
  REQUIRE(late);
  CHECK(late->message_as_Receipt()->outcome() == wire::ReceiptOutcome::acked);
  CHECK(server.live_metrics().counters.receipt_timeouts == 1);
}

TEST_CASE("a receipt reaches the receipt inbox's holder after the dispatcher reconnected", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  std::uint64_t lease = 0;
  {
    gateway_conn dispatcher(server.port(), "dispatch-1", {});
    lease = dispatcher.lease;
    auto o = offer(9, 15000, 10000);
    o.receipt_inbox = "dispatch-1";
    send_offer(dispatcher, {"user:a"}, "ride", o);
  }  // gone, its lease (and inbox binding) stays
  peer_conn again(server.port(), offers_caps);
  REQUIRE(wait_until([&] {
    const auto rr = again.rid();
    const auto* f = again.call(again.b.inbox_open(rr, "dispatch-1", lease), rr);
    return f && f->message_type() == Message::Ok;
  }));
  REQUIRE(gw.next(Message::InboxDelivery));
  const auto ra = gw.rid();
  REQUIRE(gw.call(gw.b.offer_ack(ra, 9, "user:a"), ra)->message_type() == Message::Ok);
  const auto* rf = again.next(Message::Receipt);
  REQUIRE(rf);
  CHECK(rf->message_as_Receipt()->offer_id() == 9);
  CHECK(rf->message_as_Receipt()->outcome() == wire::ReceiptOutcome::acked);
}

TEST_CASE("withdrawing an offer still queued for a gateway drops it unwritten", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"}, offers_caps, {}, 64 * 1024);
  peer_conn dispatcher(server.port(), offers_caps);
  back_up(dispatcher, "user:a", 256);  // 16 MiB behind a reader that reads nothing yet
  send_offer(dispatcher, {"user:a"}, "ride", offer(3, 60000));
  const auto r = dispatcher.rid();
  const auto* w = dispatcher.call(dispatcher.b.withdraw(r, 3), r);
  REQUIRE(w);
  REQUIRE(w->message_as_WithdrawResult());
  CHECK(w->message_as_WithdrawResult()->dropped() == 1);
  CHECK(w->message_as_WithdrawResult()->notified() == 0);
  CHECK(w->message_as_WithdrawResult()->pending() == 1);
  int offers_seen = 0, plain = 0;
  read_until_ping(gw, [&](const wire::InboxDelivery& d) { (d.offer_id() != 0 ? offers_seen : plain)++; });
  CHECK(offers_seen == 0);
  CHECK(plain == 256);
  CHECK(server.live_metrics().counters.withdrawn_queued == 1);
}

TEST_CASE("withdrawing an offer a gateway already got sends it a withdrawn notice", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a", "user:b"});
  peer_conn dispatcher(server.port(), offers_caps);
  send_offer(dispatcher, {"user:a", "user:b"}, "ride", offer(4, 60000));
  REQUIRE(gw.next(Message::InboxDelivery));
  const auto r = dispatcher.rid();
  const auto* w = dispatcher.call(dispatcher.b.withdraw(r, 4), r);
  REQUIRE(w->message_as_WithdrawResult());
  CHECK(w->message_as_WithdrawResult()->dropped() == 0);
  CHECK(w->message_as_WithdrawResult()->notified() == 1);
  CHECK(w->message_as_WithdrawResult()->pending() == 2);
  const auto* n = gw.next(Message::Withdrawn);
  REQUIRE(n);
  CHECK(n->message_as_Withdrawn()->offer_id() == 4);
  CHECK(n->message_as_Withdrawn()->inbox_id()->str() == "gw-1");
  CHECK(n->message_as_Withdrawn()->route_keys()->size() == 2);
  // It is gone: not pending, not ackable, not withdrawable twice.
  const auto rp = gw.rid();
  CHECK(gw.call(gw.b.pending_offers(rp, "user:a"), rp)->message_as_PendingOffersResult()->offers()->size() == 0);
  const auto r2 = dispatcher.rid();
  CHECK(dispatcher.call(dispatcher.b.withdraw(r2, 4), r2)->message_as_Error()->code() == wire::ErrorCode::not_found);
}

TEST_CASE("an app that reconnects pulls every unexpired unacknowledged offer", "[e2e][offers]") {
  test_server server;
  peer_conn dispatcher(server.port(), offers_caps);
  // Sent while user:a had no gateway: no route, but pending.
  const auto a = send_offer(dispatcher, {"user:a"}, "first", offer(1, 60000, 1000));
  CHECK(a.outcomes == std::vector<wire::KeyOutcome>{wire::KeyOutcome::no_route});
  send_offer(dispatcher, {"user:a"}, "second", offer(2, 60000));
  send_offer(dispatcher, {"user:a"}, "short", offer(3, 30));
  REQUIRE(wait_until([&] { return server.live_metrics().counters.offers_expired == 1; }));

  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  auto r = gw.rid();
  const auto* p = gw.call(gw.b.pending_offers(r, "user:a"), r);
  REQUIRE(p->message_as_PendingOffersResult());
  const auto* list = p->message_as_PendingOffersResult()->offers();
  REQUIRE(list->size() == 2);
  CHECK(list->Get(0)->offer_id() == 1);
  CHECK(text(list->Get(0)->payload()) == "first");
  CHECK(list->Get(0)->time_left_ms() <= 60000);
  CHECK(list->Get(1)->offer_id() == 2);
  r = gw.rid();
  REQUIRE(gw.call(gw.b.offer_ack(r, 1, "user:a"), r)->message_type() == Message::Ok);
  // The ack of a pulled offer reaches the dispatcher too.
  const auto* rf = dispatcher.next(Message::Receipt);
  REQUIRE(rf);
  CHECK(rf->message_as_Receipt()->outcome() == wire::ReceiptOutcome::acked);
  r = gw.rid();
  const auto* after = gw.call(gw.b.pending_offers(r, "user:a"), r)->message_as_PendingOffersResult()->offers();
  REQUIRE(after->size() == 1);
  CHECK(after->Get(0)->offer_id() == 2);
}

TEST_CASE("a message that expires while queued behind a slow gateway is never written", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"}, offers_caps, {}, 64 * 1024);
  peer_conn sender(server.port(), offers_caps);
  back_up(sender, "user:a", 256);
  protocol::offer_fields o;
  o.expires_in_ms = 50;  // an expiry alone: a plain send
  const std::string_view keys[] = {"user:a"};
  const std::string_view late = "late";
  auto r = sender.rid();
  const auto* a =
      sender.call(sender.b.send(r, keys, {reinterpret_cast<const std::uint8_t*>(late.data()), late.size()}, {}, &o), r);
  REQUIRE(a->message_as_SendResult());
  CHECK_FALSE(a->message_as_SendResult()->outcomes());
  std::this_thread::sleep_for(100ms);  // let it expire in the queue (the outcome, not the timing, is checked)
  int late_seen = 0, plain = 0;
  read_until_ping(gw, [&](const wire::InboxDelivery& d) { (text(d.payload()) == "late" ? late_seen : plain)++; });
  CHECK(late_seen == 0);
  CHECK(plain == 256);
  CHECK(server.live_metrics().counters.expired == 1);
}

TEST_CASE("a publish with an expiry carries the time left to receivers that declared offers", "[e2e][offers]") {
  test_server server;
  peer_conn with(server.port(), offers_caps), without(server.port(), routing_only);
  for (auto* c : {&with, &without}) {
    const auto r = c->rid();
    REQUIRE(c->call(c->b.subscribe(r, "offers.>"), r)->message_type() == Message::Ok);
  }
  peer_conn pub(server.port(), offers_caps);
  const std::string_view body = "x";
  pub.raw.send(pub.b.publish(0, "offers.eu", {reinterpret_cast<const std::uint8_t*>(body.data()), 1}, {}, 5000));
  const auto* f = with.next(Message::Deliver);
  REQUIRE(f);
  CHECK(f->message_as_Deliver()->time_left_ms() > 0);
  CHECK(f->message_as_Deliver()->time_left_ms() <= 5000);
  const auto* g = without.next(Message::Deliver);
  REQUIRE(g);
  CHECK(g->message_as_Deliver()->time_left_ms() == 0);
  // Without the capability, the publisher may not ask for an expiry.
  const auto r = without.rid();
  const auto* e = without.call(without.b.publish(r, "offers.eu", {}, {}, 5000), r);
  REQUIRE(e->message_as_Error());
  CHECK(e->message_as_Error()->code() == wire::ErrorCode::unsupported_message);
}

TEST_CASE("keys over the exposure cap are answered capped and not delivered", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a", "user:b"});
  peer_conn dispatcher(server.port(), offers_caps);
  send_offer(dispatcher, {"user:a"}, "1", capped_offer(1, 2));
  send_offer(dispatcher, {"user:a"}, "2", capped_offer(2, 2));
  const auto third = send_offer(dispatcher, {"user:a", "user:b"}, "3", capped_offer(3, 2));
  CHECK(third.outcomes == std::vector<wire::KeyOutcome>{wire::KeyOutcome::capped, wire::KeyOutcome::routed});
  CHECK(third.capped == 1);
  CHECK(third.routed == 1);
  CHECK(third.gateways == std::vector<std::string>{"", "gw-1"});
  const std::string_view keys[] = {"user:a", "user:b", "user:c"};
  const auto r = dispatcher.rid();
  const auto* e = dispatcher.call(dispatcher.b.exposure_query(r, keys, 60000), r);
  REQUIRE(e->message_as_ExposureResult());
  const auto* counts = e->message_as_ExposureResult()->counts();
  REQUIRE(counts->size() == 3);
  CHECK(counts->Get(0) == 2);
  CHECK(counts->Get(1) == 1);
  CHECK(counts->Get(2) == 0);
  // user:a got offers 1 and 2 only; 3 is not pending for it.
  int for_a = 0;
  read_until_ping(gw, [&](const wire::InboxDelivery& d) {
    for (const auto* k : *d.route_keys())
      if (k->string_view() == "user:a") ++for_a;
  });
  CHECK(for_a == 2);
  const auto rp = gw.rid();
  CHECK(gw.call(gw.b.pending_offers(rp, "user:a"), rp)->message_as_PendingOffersResult()->offers()->size() == 2);
}

TEST_CASE("a gateway that did not declare offers never gets the offer fields or notices", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"}, routing_only);
  peer_conn dispatcher(server.port(), offers_caps);
  send_offer(dispatcher, {"user:a"}, "ride", offer(1, 60000));
  const auto* f = gw.next(Message::InboxDelivery);
  REQUIRE(f);
  CHECK(f->message_as_InboxDelivery()->offer_id() == 0);
  CHECK(f->message_as_InboxDelivery()->time_left_ms() == 0);
  const auto r = dispatcher.rid();
  CHECK(dispatcher.call(dispatcher.b.withdraw(r, 1), r)->message_as_WithdrawResult()->notified() == 0);
  const auto ra = gw.rid();
  CHECK(gw.call(gw.b.offer_ack(ra, 1, "user:a"), ra)->message_as_Error()->code() ==
        wire::ErrorCode::unsupported_message);
  CHECK_FALSE(gw.next(Message::Withdrawn, 200ms));
}

TEST_CASE("the offers flag ramps by client bucket and rolls back at once", "[e2e][offers][flags]") {
  // Client ids in buckets 9 and 10 (searched; the bucket is xxh64 mod 100).
  const auto in_bucket = [](std::uint8_t b) {
    for (int i = 0; i < 100000; ++i)
      if (const auto id = "gw-client-" + std::to_string(i); broker::feature_flags::bucket_of(id) == b) return id;
    FAIL("no client id in bucket " << int(b));
    return std::string();
  };
  const auto nine = in_bucket(9), ten = in_bucket(10);
  test_server server;
  gateway_conn in(server.port(), "gw-9", {"user:9"}, offers_caps, nine);
  gateway_conn out(server.port(), "gw-10", {"user:10"}, offers_caps, ten);
  peer_conn admin(server.port(), offers_caps);
  auto r = admin.rid();
  const auto* set = admin.call(admin.b.flag_set(r, "offers", 10), r);
  REQUIRE(set->message_as_FlagInfo());
  CHECK(set->message_as_FlagInfo()->percent() == 10);
  // admin (bucket of its connection id) may be in or out: count the gateways only.
  const auto on = set->message_as_FlagInfo()->connections_on();
  const auto off = set->message_as_FlagInfo()->connections_off();
  CHECK(on + off == 3);
  CHECK(on >= 1);
  CHECK(off >= 1);

  send_offer(admin, {"user:9", "user:10"}, "ride", offer(1, 60000));
  const auto* d9 = in.next(Message::InboxDelivery);
  REQUIRE(d9);
  CHECK(d9->message_as_InboxDelivery()->offer_id() == 1);
  const auto* d10 = out.next(Message::InboxDelivery);
  REQUIRE(d10);
  CHECK(d10->message_as_InboxDelivery()->offer_id() == 0);

  // Rollback: 0 turns the fields off for everyone, without reconnecting.
  r = admin.rid();
  REQUIRE(admin.call(admin.b.flag_set(r, "offers", 0), r)->message_as_FlagInfo()->connections_on() == 0);
  send_offer(admin, {"user:9"}, "ride", offer(2, 60000));
  const auto* again = in.next(Message::InboxDelivery);
  REQUIRE(again);
  CHECK(again->message_as_InboxDelivery()->offer_id() == 0);

  r = admin.rid();
  const auto* list = admin.call(admin.b.flag_list(r), r);
  REQUIRE(list->message_as_FlagListResult());
  REQUIRE(list->message_as_FlagListResult()->flags()->size() == 1);
  CHECK(list->message_as_FlagListResult()->flags()->Get(0)->name()->str() == "offers");
  r = admin.rid();
  CHECK(admin.call(admin.b.flag_set(r, "nope", 5), r)->message_as_Error()->code() == wire::ErrorCode::not_found);
  r = admin.rid();
  CHECK(admin.call(admin.b.flag_set(r, "offers", 101), r)->message_as_Error()->code() == wire::ErrorCode::bad_request);
}

TEST_CASE("offer requests that break the rules are refused with the reason", "[e2e][offers]") {
  test_server server;
  peer_conn c(server.port(), offers_caps);
  // bad_request, and the message names the rule broken (docs/protocol.md §15.7).
  const auto refused = [&](protocol::offer_fields o, std::string_view reason) {
    const std::string_view keys[] = {"user:a"};
    const auto r = c.rid();
    const auto* f = c.call(c.b.send(r, keys, {}, {}, &o), r);
    REQUIRE(f);
    const auto* e = f->message_as_Error();
    if (!e || e->code() != wire::ErrorCode::bad_request || !e->message()) return false;
    INFO(e->message()->str());
    return e->message()->string_view().find(reason) != std::string_view::npos;
  };
  CHECK(refused(offer(1, 0), "an offer id needs an expiry"));
  CHECK(refused(offer(0, 1000, 500), "receipts need an offer id"));
  auto inbox_only = offer(0, 1000);
  inbox_only.receipt_inbox = "dispatch-1";
  CHECK(refused(inbox_only, "receipts need an offer id"));
  auto inbox_without_timeout = offer(1, 1000);
  inbox_without_timeout.receipt_inbox = "dispatch-1";
  CHECK(refused(inbox_without_timeout, "a receipt inbox needs a receipt timeout"));
  auto cap = offer(1, 1000);
  cap.cap_max = 17;
  cap.cap_window_ms = 1000;
  CHECK(refused(cap, "cap_max is at most 16"));  // above the 16 a key remembers
  cap.cap_max = 2;
  cap.cap_window_ms = 0;
  CHECK(refused(cap, "needs both cap_max and cap_window_ms"));
  cap.cap_max = 0;
  cap.cap_window_ms = 1000;
  CHECK(refused(cap, "needs both cap_max and cap_window_ms"));
  cap.cap_max = 2;
  cap.cap_window_ms = 3'600'001;  // the default exposure-window-ms is an hour
  CHECK(refused(cap, "cap_window_ms is at most exposure-window-ms"));
  CHECK(refused(offer(1, 4'000'000), "expires_in_ms is at most max-offer-expiry-ms"));
  send_offer(c, {"user:a"}, "x", offer(1, 60000));
  CHECK(refused(offer(1, 60000), "offer 1 is live"));
}

TEST_CASE("a publish with an expiry above max-offer-expiry-ms is refused and not delivered", "[e2e][offers]") {
  test_server server;
  peer_conn sub(server.port(), offers_caps), pub(server.port(), offers_caps);
  auto r = sub.rid();
  REQUIRE(sub.call(sub.b.subscribe(r, "rides.>"), r));
  r = pub.rid();
  const std::string_view payload = "x";
  const auto* f =
      pub.call(pub.b.publish(r, "rides.eu", {reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()}, {},
                             4'000'000),
               r);
  REQUIRE(f);
  REQUIRE(f->message_as_Error());
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::bad_request);
  CHECK_FALSE(f->message_as_Error()->fatal());
  r = sub.rid();
  sub.raw.send(sub.b.ping(r));
  const auto* next = next_not_ping(sub);
  REQUIRE(next);
  CHECK(next->message_type() == Message::Pong);  // no Deliver before it
}

TEST_CASE("an exposure query with a window of 0 or above exposure-window-ms is refused", "[e2e][offers]") {
  test_server server;
  peer_conn c(server.port(), offers_caps);
  const std::string_view keys[] = {"user:a"};
  for (const std::uint32_t window : {0u, 3'600'001u}) {
    INFO(window);
    const auto r = c.rid();
    const auto* f = c.call(c.b.exposure_query(r, keys, window), r);
    REQUIRE(f);
    REQUIRE(f->message_as_Error());
    CHECK(f->message_as_Error()->code() == wire::ErrorCode::bad_request);
  }
}

TEST_CASE("an offer counts toward a key's exposure only where it was routed, not where capped or unrouted",
          "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  peer_conn dispatcher(server.port(), offers_caps);
  // routed to user:a; user:b has no route.
  CHECK(send_offer(dispatcher, {"user:a", "user:b"}, "1", capped_offer(1, 1)).outcomes ==
        std::vector<wire::KeyOutcome>{wire::KeyOutcome::routed, wire::KeyOutcome::no_route});
  // user:a is now over its cap of 1; user:b, not counted, is not.
  CHECK(send_offer(dispatcher, {"user:a", "user:b"}, "2", capped_offer(2, 1)).outcomes ==
        std::vector<wire::KeyOutcome>{wire::KeyOutcome::capped, wire::KeyOutcome::no_route});
  const std::string_view keys[] = {"user:a", "user:b"};
  const auto r = dispatcher.rid();
  const auto* e = dispatcher.call(dispatcher.b.exposure_query(r, keys, 60000), r);
  REQUIRE(e);
  REQUIRE(e->message_as_ExposureResult());
  const auto* counts = e->message_as_ExposureResult()->counts();
  REQUIRE(counts->size() == 2);
  CHECK(counts->Get(0) == 1);  // offer 1 only: offer 2 was capped there
  CHECK(counts->Get(1) == 0);  // never routed
}

TEST_CASE("an offer capped for every key is not live: withdraw answers not_found and its id is free", "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  peer_conn dispatcher(server.port(), offers_caps);
  send_offer(dispatcher, {"user:a"}, "1", capped_offer(1, 1));
  CHECK(send_offer(dispatcher, {"user:a"}, "2", capped_offer(2, 1)).outcomes ==
        std::vector<wire::KeyOutcome>{wire::KeyOutcome::capped});
  const auto r = dispatcher.rid();
  const auto* w = dispatcher.call(dispatcher.b.withdraw(r, 2), r);
  REQUIRE(w);
  REQUIRE(w->message_as_Error());
  CHECK(w->message_as_Error()->code() == wire::ErrorCode::not_found);
  CHECK(send_offer(dispatcher, {"user:b"}, "2 again", offer(2, 60000)).outcomes ==
        std::vector<wire::KeyOutcome>{wire::KeyOutcome::no_route});
}

TEST_CASE("an offer sent with request id 0 is taken but not answered, and a refused one is answered with id 0",
          "[e2e][offers]") {
  test_server server;
  gateway_conn gw(server.port(), "gw-1", {"user:a"});
  peer_conn dispatcher(server.port(), offers_caps);
  const std::string_view keys[] = {"user:a"};
  const auto o = offer(1, 60000);
  dispatcher.raw.send(dispatcher.b.send(0, keys, {}, {}, &o));
  const auto bad = offer(2, 0);  // no expiry
  dispatcher.raw.send(dispatcher.b.send(0, keys, {}, {}, &bad));
  auto r = dispatcher.rid();
  dispatcher.raw.send(dispatcher.b.ping(r));
  const auto* f = next_not_ping(dispatcher);
  REQUIRE(f);
  REQUIRE(f->message_as_Error());  // no SendResult for offer 1 before it
  CHECK(f->request_id() == 0);
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::bad_request);
  f = next_not_ping(dispatcher);
  REQUIRE(f);
  CHECK(f->message_type() == Message::Pong);
  CHECK(f->request_id() == r);
  // Offer 1 was taken: delivered, and live.
  REQUIRE(gw.next(Message::InboxDelivery));
  r = dispatcher.rid();
  CHECK(dispatcher.call(dispatcher.b.withdraw(r, 1), r)->message_as_WithdrawResult());
}

namespace {

// A broker with a log whose wall clock the test moves (record timestamps
// and the reads' expiry checks), starting at `start_ms`.
struct durable_broker {
  temp_dir dir;
  std::atomic<std::uint64_t> now_ms{1'700'000'000'000};
  test_server server{[this] {
    auto c = test::with_data(dir);
    c.log_wall_clock_ms = [this] { return now_ms.load(); };
    return c;
  }()};
};

protocol::bytes_view bytes(std::string_view s) { return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}; }

// Reads `stream` from `from` and returns its Records (REQUIREd).
const wire::Records* read_records(peer_conn& c, std::string_view stream, std::uint64_t from) {
  const auto r = c.rid();
  const auto* f = c.call(c.b.read(r, stream, from, 0, 0), r);
  REQUIRE(f);
  if (const auto* e = f->message_as_Error()) FAIL("read answered " << e->message()->str());
  REQUIRE(f->message_as_Records());
  return f->message_as_Records();
}

}  // namespace

TEST_CASE("a durable send with an expiry is delivered with its position and the time left", "[e2e][offers][log]") {
  durable_broker b;
  gateway_conn gw(b.server.port(), "gw-1", {"user:a"}, durable_offers_caps);
  peer_conn sender(b.server.port(), durable_offers_caps);
  protocol::offer_fields o;
  o.expires_in_ms = 10'000;
  const std::string_view keys[] = {"user:a"};
  const auto r = sender.rid();
  const auto* a = sender.call(sender.b.send(r, keys, bytes("ride 7"), "offers:eu", &o), r);
  REQUIRE(a);
  REQUIRE(a->message_as_SendResult());
  CHECK(a->message_as_SendResult()->seq() == 1);
  const auto* f = gw.next(Message::InboxDelivery);
  REQUIRE(f);
  const auto* d = f->message_as_InboxDelivery();
  CHECK(text(d->payload()) == "ride 7");
  REQUIRE(d->stream());
  CHECK(d->stream()->str() == "offers:eu");
  CHECK(d->seq() == 1);
  CHECK(d->time_left_ms() > 0);
  CHECK(d->time_left_ms() <= 10'000);
  CHECK(d->offer_id() == 0);
}

TEST_CASE("reads leave out records whose expiry has passed and say how many", "[e2e][offers][log]") {
  durable_broker b;
  gateway_conn gw(b.server.port(), "gw-1", {"user:a"}, durable_offers_caps);
  peer_conn sender(b.server.port(), durable_offers_caps);
  const std::string_view keys[] = {"user:a"};
  protocol::offer_fields short_lived, long_lived;
  short_lived.expires_in_ms = 1'000;
  long_lived.expires_in_ms = 60'000;
  // 1: expires in 1 s; 2: no expiry; 3: a durable publish expiring in 1 s;
  // 4: expires in 60 s; 5: expires in 1 s (the tail).
  auto call = [&](protocol::bytes_view frame, std::uint64_t rid) {
    const auto* f = sender.call(frame, rid);
    REQUIRE(f);
    if (const auto* e = f->message_as_Error()) FAIL("answered " << e->message()->str());
  };
  auto r = sender.rid();
  call(sender.b.send(r, keys, bytes("one"), "s", &short_lived), r);
  r = sender.rid();
  call(sender.b.send(r, keys, bytes("two"), "s"), r);
  r = sender.rid();
  call(sender.b.publish(r, "rides.eu", bytes("three"), "s", 1'000), r);
  r = sender.rid();
  call(sender.b.send(r, keys, bytes("four"), "s", &long_lived), r);
  r = sender.rid();
  call(sender.b.send(r, keys, bytes("five"), "s", &short_lived), r);

  // Before any expiry: all five, the expiring ones with their time left.
  const auto* all = read_records(sender, "s", 1);
  REQUIRE(all->records()->size() == 5);
  CHECK(all->expired() == 0);
  CHECK(all->next_seq() == 6);
  CHECK(all->records()->Get(0)->time_left_ms() == 1'000);  // the log's clock has not moved
  CHECK(all->records()->Get(1)->time_left_ms() == 0);
  CHECK(all->records()->Get(3)->time_left_ms() == 60'000);

  b.now_ms += 1'000;  // 1, 3 and 5 expire now (timestamp + expiry reached)
  const auto* later = read_records(sender, "s", 1);
  REQUIRE(later->records()->size() == 2);
  CHECK(later->records()->Get(0)->seq() == 2);
  CHECK(later->records()->Get(1)->seq() == 4);
  CHECK(later->records()->Get(1)->time_left_ms() == 59'000);
  CHECK(later->expired() == 3);
  CHECK(later->next_seq() == 6);
  CHECK(later->last_seq() == 5);
  // From inside the expired tail: nothing but the count and where to go on.
  const auto* tail = read_records(sender, "s", 5);
  CHECK(tail->records()->size() == 0);
  CHECK(tail->expired() == 1);
  CHECK(tail->next_seq() == 6);

  // A reader without the capability gets the same records, no time left.
  peer_conn plain(b.server.port(), durable_only_caps);
  const auto* p = read_records(plain, "s", 1);
  REQUIRE(p->records()->size() == 2);
  CHECK(p->records()->Get(1)->time_left_ms() == 0);
  CHECK(p->expired() == 3);
  CHECK(b.server.live_metrics().counters.expired_read == 7);
}

TEST_CASE("a durable expiry needs the capability and goes with no other offer field", "[e2e][offers][log]") {
  durable_broker b;
  const std::string_view keys[] = {"user:a"};
  const auto refused = [&](peer_conn& c, const protocol::offer_fields& o, wire::ErrorCode code) {
    const auto r = c.rid();
    const auto* f = c.call(c.b.send(r, keys, bytes("x"), "s", &o), r);
    REQUIRE(f);
    return f->message_as_Error() && f->message_as_Error()->code() == code;
  };
  peer_conn with(b.server.port(), durable_offers_caps), without(b.server.port(), durable_only_caps);
  protocol::offer_fields expiry;
  expiry.expires_in_ms = 5'000;
  CHECK(refused(without, expiry, wire::ErrorCode::unsupported_message));
  const auto r = without.rid();
  const auto* f = without.call(without.b.publish(r, "rides.eu", bytes("x"), "s", 5'000), r);
  REQUIRE(f->message_as_Error());
  CHECK(f->message_as_Error()->code() == wire::ErrorCode::unsupported_message);
  CHECK(refused(with, offer(1, 5'000), wire::ErrorCode::bad_request));  // an offer id
  auto cap = expiry;
  cap.cap_max = 1;
  cap.cap_window_ms = 1'000;
  CHECK(refused(with, cap, wire::ErrorCode::bad_request));  // a cap
  expiry.expires_in_ms = 4'000'000;
  CHECK(refused(with, expiry, wire::ErrorCode::bad_request));  // past max-offer-expiry-ms
}

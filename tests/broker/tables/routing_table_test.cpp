// Unit tests for broker::routing_table: the routing registry and the gateway
// inboxes on top of a real lease_table. Time never passes by itself: the
// lease table's clock is a time_point the tests move by hand. Connections are
// recording targets (the table only stores and compares them).

#include "broker/tables/lease_table.hpp"
#include "broker/tables/routing_table.hpp"
#include "tests/support/recording_target.hpp"
#include "protocol/errc.hpp"
#include "tests/support/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using namespace switchyard::broker;
using switchyard::protocol::errc;
using switchyard::test::fake_clock;
using switchyard::test::fake_clock_config;
using time_point = fake_clock::time_point;

// A lease table on a hand-driven clock with a routing table on top.
// Sweep period 10 ms; the stall threshold is far away so that moving the
// clock by hand is never mistaken for a paused sweeper.
struct fixture : fake_clock {
  lease_table leases{fake_clock_config(10ms, 1h), source()};
  routing_table routing{leases};

  fixture() : fake_clock{time_point{} + 5000h + 7ms} {}

  // One sweep with the broker's callback: expired leases take their
  // entries and inboxes with them.
  std::size_t sweep() {
    return leases.sweep([this](lease_id id, lease_attachment* first) { routing.remove_lease(id, first); }).expired;
  }
  bool revoke(lease_id id) {
    return leases.revoke(id, [this](lease_id l, lease_attachment* first) { routing.remove_lease(l, first); });
  }
  lease_id grant(milliseconds ttl) { return leases.grant(ttl).id; }
};

// Three distinct delivery targets (the table only stores and compares them).
struct fake_targets {
  switchyard::test::recording_target a_, b_, c_;
  delivery_target* a() { return &a_; }
  delivery_target* b() { return &b_; }
  delivery_target* c() { return &c_; }
};

std::vector<std::string> keys_of(const std::vector<registry_view>& list) {
  std::vector<std::string> out;
  for (const auto& v : list) out.emplace_back(v.key);
  return out;
}

}  // namespace

TEST_CASE("routing put under a lease returns increasing versions", "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(1s);
  auto v1 = f.routing.put("user:alice", "gw-1", l, 0ms);
  auto v2 = f.routing.put("user:bob", "gw-1", l, 0ms);
  auto v3 = f.routing.put("user:alice", "gw-2", l, 0ms);
  REQUIRE(v1);
  REQUIRE(v2);
  REQUIRE(v3);
  CHECK(*v1 < *v2);
  CHECK(*v2 < *v3);
  CHECK(f.routing.get("user:alice")->version == *v3);
  CHECK(f.routing.get("user:bob")->version == *v2);
  CHECK(f.routing.entries() == 2);
}

TEST_CASE("routing put to an unknown, revoked or expired lease answers not_found", "[broker][routing]") {
  fixture f;
  SECTION("unknown") {
    auto r = f.routing.put("user:alice", "gw-1", 42, 0ms);
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::not_found);
  }
  SECTION("revoked") {
    const lease_id l = f.grant(1s);
    REQUIRE(f.revoke(l));
    auto r = f.routing.put("user:alice", "gw-1", l, 0ms);
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::not_found);
  }
  SECTION("expired, not yet swept") {
    const lease_id l = f.grant(100ms);
    f.advance(100ms);
    auto r = f.routing.put("user:alice", "gw-1", l, 0ms);
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::not_found);
  }
  CHECK_FALSE(f.routing.get("user:alice"));
  CHECK(f.routing.entries() == 0);
}

TEST_CASE("routing get returns the value, version, lease and remaining time of an entry", "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(1000ms);
  auto v = f.routing.put("user:alice", "gw-7", l, 0ms);
  REQUIRE(v);
  f.advance(300ms);
  auto e = f.routing.get("user:alice");
  REQUIRE(e);
  CHECK(e->key == "user:alice");
  CHECK(e->value == "gw-7");
  CHECK(e->version == *v);
  CHECK(e->lease == l);
  CHECK(e->remaining == 700ms);
  CHECK_FALSE(f.routing.get("user:bob"));
}

TEST_CASE("routing get never returns an entry whose lease deadline passed, even before a sweep", "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(200ms);
  REQUIRE(f.routing.put("user:alice", "gw-7", l, 0ms));
  f.advance(199ms);
  REQUIRE(f.routing.get("user:alice"));
  f.advance(1ms);  // exactly at the deadline: gone
  CHECK_FALSE(f.routing.get("user:alice"));
  // Not swept yet: the entry is still stored, only hidden.
  CHECK(f.routing.entries() == 1);
  CHECK(f.sweep() == 1);
  CHECK(f.routing.entries() == 0);
  CHECK_FALSE(f.routing.get("user:alice"));
}

TEST_CASE("routing put with lease 0 and a TTL creates a private lease that expires on its own", "[broker][routing]") {
  fixture f;
  const lease_id other = f.grant(10s);
  REQUIRE(f.routing.put("user:other", "gw-1", other, 0ms));
  REQUIRE(f.leases.size() == 1);

  REQUIRE(f.routing.put("session:123", "node-4", 0, 300ms));
  CHECK(f.leases.size() == 2);  // the entry's own lease
  auto e = f.routing.get("session:123");
  REQUIRE(e);
  CHECK(e->lease == 0);  // private leases are not reported
  CHECK(e->value == "node-4");
  CHECK(e->remaining == 300ms);

  f.advance(150ms);
  CHECK(f.routing.get("session:123")->remaining == 150ms);
  f.advance(150ms);
  CHECK_FALSE(f.routing.get("session:123"));
  CHECK(f.sweep() == 1);
  CHECK(f.routing.entries() == 1);
  CHECK(f.leases.size() == 1);
  CHECK(f.routing.get("user:other"));
}

TEST_CASE("routing put replacing an entry moves it to the new lease", "[broker][routing]") {
  fixture f;
  const lease_id old_lease = f.grant(10s);
  const lease_id new_lease = f.grant(10s);
  REQUIRE(f.routing.put("user:alice", "gw-1", old_lease, 0ms));
  REQUIRE(f.routing.put("user:bob", "gw-1", old_lease, 0ms));
  REQUIRE(f.routing.put("user:alice", "gw-2", new_lease, 0ms));

  REQUIRE(f.revoke(old_lease));
  auto e = f.routing.get("user:alice");
  REQUIRE(e);  // no longer bound to the revoked lease
  CHECK(e->value == "gw-2");
  CHECK(e->lease == new_lease);
  CHECK_FALSE(f.routing.get("user:bob"));
  CHECK(f.routing.entries() == 1);

  REQUIRE(f.revoke(new_lease));
  CHECK_FALSE(f.routing.get("user:alice"));
  CHECK(f.routing.entries() == 0);
}

TEST_CASE("routing put replacing a private-TTL entry drops its old private lease", "[broker][routing]") {
  fixture f;
  REQUIRE(f.routing.put("user:alice", "gw-1", 0, 500ms));
  REQUIRE(f.leases.size() == 1);

  SECTION("replaced by another private TTL") {
    REQUIRE(f.routing.put("user:alice", "gw-2", 0, 2000ms));
    CHECK(f.leases.size() == 1);
    f.advance(600ms);  // past the first TTL
    f.sweep();
    auto e = f.routing.get("user:alice");
    REQUIRE(e);
    CHECK(e->value == "gw-2");
    CHECK(e->lease == 0);
  }
  SECTION("replaced under a shared lease") {
    const lease_id l = f.grant(10s);
    REQUIRE(f.leases.size() == 2);
    REQUIRE(f.routing.put("user:alice", "gw-2", l, 0ms));
    CHECK(f.leases.size() == 1);
    CHECK(f.leases.alive(l));
    auto e = f.routing.get("user:alice");
    REQUIRE(e);
    CHECK(e->lease == l);
    // Erasing it now must leave the shared lease alone.
    CHECK(f.routing.erase("user:alice"));
    CHECK(f.leases.alive(l));
  }
  CHECK(f.routing.entries() <= 1);
}

TEST_CASE("routing put replacing a leased entry with a private TTL leaves the shared lease alive",
          "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(10s);
  REQUIRE(f.routing.put("user:alice", "gw-1", l, 0ms));
  REQUIRE(f.routing.put("user:alice", "gw-1", 0, 200ms));
  CHECK(f.leases.size() == 2);
  CHECK(f.leases.alive(l));
  REQUIRE(f.revoke(l));
  REQUIRE(f.routing.get("user:alice"));  // now on its own TTL
  f.advance(200ms);
  CHECK_FALSE(f.routing.get("user:alice"));
  f.sweep();
  CHECK(f.routing.entries() == 0);
  CHECK(f.leases.size() == 0);
}

TEST_CASE("routing erase removes an entry and its private lease", "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(10s);
  REQUIRE(f.routing.put("user:alice", "gw-1", l, 0ms));
  REQUIRE(f.routing.put("user:bob", "gw-1", 0, 10s));
  REQUIRE(f.leases.size() == 2);

  CHECK(f.routing.erase("user:alice"));
  CHECK_FALSE(f.routing.get("user:alice"));
  CHECK(f.leases.alive(l));  // a shared lease stays

  CHECK(f.routing.erase("user:bob"));
  CHECK_FALSE(f.routing.get("user:bob"));
  CHECK(f.leases.size() == 1);  // the private one went with its entry

  CHECK_FALSE(f.routing.erase("user:alice"));
  CHECK_FALSE(f.routing.erase("user:nobody"));
  CHECK(f.routing.entries() == 0);
  // Revoking the shared lease afterwards finds nothing left to remove.
  CHECK(f.revoke(l));
}

TEST_CASE("routing list returns live entries with the prefix in key order, cut by limit with more",
          "[broker][routing]") {
  fixture f;
  const lease_id l = f.grant(10s);
  const lease_id short_lease = f.grant(100ms);
  for (const char* k : {"user:dave", "user:alice", "user:carol", "room:1", "user:bob", "users"})
    REQUIRE(f.routing.put(k, "gw-1", l, 0ms));
  REQUIRE(f.routing.put("user:bea", "gw-2", short_lease, 0ms));
  REQUIRE(f.routing.put("user:cid", "gw-2", 0, 100ms));
  f.advance(100ms);  // both short ones are expired, not swept

  bool more = true;
  auto all = f.routing.list("user:", 100, more);
  CHECK_FALSE(more);
  CHECK(keys_of(all) == std::vector<std::string>{"user:alice", "user:bob", "user:carol", "user:dave"});
  for (const auto& v : all) {
    CHECK(v.value == "gw-1");
    CHECK(v.lease == l);
    CHECK(v.remaining == 9900ms);
  }

  auto cut = f.routing.list("user:", 2, more);
  CHECK(more);
  CHECK(keys_of(cut) == std::vector<std::string>{"user:alice", "user:bob"});

  auto exact = f.routing.list("user:", 4, more);
  CHECK_FALSE(more);  // the expired entries after the limit do not count
  CHECK(exact.size() == 4);

  auto everything = f.routing.list("", 100, more);
  CHECK(keys_of(everything) ==
        std::vector<std::string>{"room:1", "user:alice", "user:bob", "user:carol", "user:dave", "users"});
  CHECK(f.routing.list("nothing:", 10, more).empty());
  CHECK_FALSE(more);
}

TEST_CASE("routing revoke removes every entry and inbox attached to the lease in one step", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id gw1 = f.grant(10s);
  const lease_id gw2 = f.grant(10s);
  REQUIRE(f.routing.put("user:alice", "gw-1", gw1, 0ms));
  REQUIRE(f.routing.put("user:bob", "gw-1", gw1, 0ms));
  REQUIRE(f.routing.put("user:carol", "gw-2", gw2, 0ms));
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", gw1, s.a()));
  REQUIRE_FALSE(f.routing.open_inbox("gw-2", gw2, s.b()));

  REQUIRE(f.revoke(gw1));
  CHECK_FALSE(f.routing.get("user:alice"));
  CHECK_FALSE(f.routing.get("user:bob"));
  CHECK(f.routing.inbox_owner("gw-1") == nullptr);
  CHECK(f.routing.entries() == 1);
  CHECK(f.routing.inboxes() == 1);
  // The other gateway is untouched.
  CHECK(f.routing.get("user:carol")->value == "gw-2");
  CHECK(f.routing.inbox_owner("gw-2") == s.b());
}

TEST_CASE("routing lease expiry removes every entry and inbox attached in the same sweep", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id dying = f.grant(200ms);
  const lease_id living = f.grant(10s);
  for (int i = 0; i < 50; ++i) REQUIRE(f.routing.put("user:" + std::to_string(i), "gw-1", dying, 0ms));
  REQUIRE(f.routing.put("user:kept", "gw-2", living, 0ms));
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", dying, s.a()));
  REQUIRE_FALSE(f.routing.open_inbox("gw-2", living, s.b()));

  f.advance(100ms);
  CHECK(f.sweep() == 0);
  CHECK(f.routing.entries() == 51);
  f.advance(100ms);
  CHECK(f.sweep() == 1);
  CHECK(f.routing.entries() == 1);
  CHECK(f.routing.inboxes() == 1);
  CHECK_FALSE(f.routing.get("user:0"));
  CHECK(f.routing.get("user:kept"));
  CHECK(f.routing.inbox_owner("gw-1") == nullptr);
  CHECK(f.routing.inbox_owner("gw-2") == s.b());
  CHECK(f.leases.size() == 1);
}

TEST_CASE("routing open_inbox by a second session answers inbox_taken while the owner is live", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id la = f.grant(10s);
  const lease_id lb = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", la, s.a()));
  CHECK(f.routing.inbox_owner("gw-7") == s.a());
  CHECK(f.routing.open_inbox("gw-7", lb, s.b()) == errc::inbox_taken);
  CHECK(f.routing.open_inbox("gw-7", la, s.b()) == errc::inbox_taken);
  CHECK(f.routing.inbox_owner("gw-7") == s.a());
  // The owner may open it again (a reopen after a re-grant).
  CHECK_FALSE(f.routing.open_inbox("gw-7", lb, s.a()));
  CHECK(f.routing.inbox_owner("gw-7") == s.a());
  CHECK(f.routing.inboxes() == 1);
}

TEST_CASE("routing open_inbox under an unknown or expired lease answers not_found", "[broker][routing]") {
  fixture f;
  fake_targets s;
  CHECK(f.routing.open_inbox("gw-7", 99, s.a()) == errc::not_found);
  const lease_id l = f.grant(100ms);
  f.advance(100ms);
  CHECK(f.routing.open_inbox("gw-7", l, s.a()) == errc::not_found);
  CHECK(f.routing.inboxes() == 0);
}

TEST_CASE("routing inbox can be opened by another session after its owner disconnected", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id l = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", l, s.a()));
  REQUIRE_FALSE(f.routing.open_inbox("gw-8", l, s.a()));
  f.routing.disconnect(s.a(), {"gw-7", "gw-8"});
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);
  CHECK(f.routing.inbox_owner("gw-8") == nullptr);
  CHECK(f.routing.inboxes() == 2);  // still bound to the lease

  // A reconnecting gateway (new session) reopens under the same lease.
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", l, s.b()));
  CHECK(f.routing.inbox_owner("gw-7") == s.b());
  // The old session's disconnect arriving late changes nothing.
  f.routing.disconnect(s.a(), {"gw-7"});
  CHECK(f.routing.inbox_owner("gw-7") == s.b());
  // The lease still owns it: revoking it closes the reopened inbox.
  REQUIRE(f.revoke(l));
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);
  CHECK(f.routing.inboxes() == 0);
}

TEST_CASE("routing inbox can be opened by another session once its lease expired", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id old_lease = f.grant(200ms);
  const lease_id new_lease = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", old_lease, s.a()));
  f.advance(200ms);
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);  // expired, not swept

  SECTION("before the sweep") {
    REQUIRE_FALSE(f.routing.open_inbox("gw-7", new_lease, s.b()));
    CHECK(f.routing.inbox_owner("gw-7") == s.b());
    // Sweeping the old lease must not take the reopened inbox with it.
    CHECK(f.sweep() == 1);
    CHECK(f.routing.inbox_owner("gw-7") == s.b());
    CHECK(f.routing.inboxes() == 1);
  }
  SECTION("after the sweep") {
    CHECK(f.sweep() == 1);
    CHECK(f.routing.inboxes() == 0);
    REQUIRE_FALSE(f.routing.open_inbox("gw-7", new_lease, s.b()));
    CHECK(f.routing.inbox_owner("gw-7") == s.b());
  }
}

TEST_CASE("routing close_inbox only works for the owning session", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id l = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", l, s.a()));
  CHECK_FALSE(f.routing.close_inbox("gw-7", s.b()));
  CHECK(f.routing.inbox_owner("gw-7") == s.a());
  CHECK_FALSE(f.routing.close_inbox("gw-unknown", s.a()));
  CHECK(f.routing.close_inbox("gw-7", s.a()));
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);
  CHECK(f.routing.inboxes() == 0);
  CHECK_FALSE(f.routing.close_inbox("gw-7", s.a()));
  // The lease outlives its inbox, and can be revoked cleanly.
  CHECK(f.leases.alive(l));
  CHECK(f.revoke(l));
}

TEST_CASE("routing inbox_owner returns null once the inbox lease expired", "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id l = f.grant(300ms);
  REQUIRE_FALSE(f.routing.open_inbox("gw-7", l, s.c()));
  f.advance(299ms);
  CHECK(f.routing.inbox_owner("gw-7") == s.c());
  f.advance(1ms);
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);
  f.sweep();
  CHECK(f.routing.inbox_owner("gw-7") == nullptr);
  CHECK(f.routing.inboxes() == 0);
  CHECK(f.routing.inbox_owner("never-opened") == nullptr);
}

// Regression: revoking a replaced or erased entry's private TTL lease once
// left whatever else was attached to that lease stored forever.
TEST_CASE("routing erasing a private-TTL entry also removes what others attached to its lease", "[broker][routing]") {
  fixture f;
  fake_targets s;
  REQUIRE(f.routing.put("user:alice", "gw-1", 0, 10s));
  const auto live = f.leases.list(10);
  REQUIRE(live.size() == 1);
  const lease_id private_lease = live.front().id;
  REQUIRE(f.routing.put("user:bob", "gw-1", private_lease, 0ms));
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", private_lease, s.a()));

  SECTION("erase") { REQUIRE(f.routing.erase("user:alice")); }
  SECTION("replace") { REQUIRE(f.routing.put("user:alice", "gw-2", 0, 10s)); }

  CHECK_FALSE(f.leases.alive(private_lease));
  CHECK_FALSE(f.routing.get("user:bob"));
  CHECK(f.routing.inbox_owner("gw-1") == nullptr);
  // Expected: gone from the tables like after any revoke. Actual: both
  // linger (entries() counts user:bob, inboxes() counts gw-1) until the key
  // or inbox id is reused.
  f.advance(20s);
  f.sweep();
  CHECK(f.routing.entries() == (f.routing.get("user:alice") ? 1u : 0u));
  CHECK(f.routing.inboxes() == 0);
}

TEST_CASE("routing route resolves a key to its inbox and owner, and to nothing once either side is gone",
          "[broker][routing]") {
  fixture f;
  fake_targets s;
  const lease_id gw = f.grant(10s);
  const lease_id user = f.grant(2s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", gw, s.a()));
  REQUIRE(f.routing.put("user:alice", "gw-1", user, 0ms));
  REQUIRE(f.routing.put("user:bob", "gw-2", gw, 0ms));  // an inbox nobody opened
  auto to = f.routing.route("user:alice");
  CHECK(to.inbox == "gw-1");
  CHECK(to.owner == s.a());
  CHECK(f.routing.route("user:bob").owner == nullptr);
  CHECK(f.routing.route("user:carol").owner == nullptr);
  // The entry's lease expires: gone at once, before any sweep.
  f.advance(2s);
  CHECK(f.routing.route("user:alice").owner == nullptr);
  // A live entry whose inbox lost its connection routes nowhere either.
  REQUIRE(f.routing.put("user:alice", "gw-1", gw, 0ms));
  CHECK(f.routing.route("user:alice").owner == s.a());
  f.routing.disconnect(s.a(), {"gw-1"});
  CHECK(f.routing.route("user:alice").owner == nullptr);
}

TEST_CASE("routing route follows an inbox closed, reopened by another owner, or renamed in the entry",
          "[broker][routing]") {
  // route() remembers the inbox an entry last resolved to: each change here
  // must void that memory. After each erase another inbox is opened at
  // once, so that it likely takes the erased inbox's memory: a stale memory
  // would then route to it.
  fixture f;
  fake_targets s;
  const lease_id gw = f.grant(10s);
  const lease_id other = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", gw, s.a()));
  REQUIRE_FALSE(f.routing.open_inbox("gw-2", gw, s.b()));
  REQUIRE(f.routing.put("user:alice", "gw-1", gw, 0ms));
  CHECK(f.routing.route("user:alice").owner == s.a());
  CHECK(f.routing.route("user:alice").owner == s.a());  // from memory
  // Closed, and another inbox opened: no route.
  REQUIRE(f.routing.close_inbox("gw-1", s.a()));
  REQUIRE_FALSE(f.routing.open_inbox("gw-9", other, s.c()));
  CHECK(f.routing.route("user:alice").owner == nullptr);
  // Reopened by another session: routes there.
  REQUIRE_FALSE(f.routing.open_inbox("gw-1", gw, s.c()));
  CHECK(f.routing.route("user:alice").owner == s.c());
  // The entry now names gw-2.
  REQUIRE(f.routing.put("user:alice", "gw-2", gw, 0ms));
  auto to = f.routing.route("user:alice");
  CHECK(to.inbox == "gw-2");
  CHECK(to.owner == s.b());
  // An inbox erased by a revoke while the entry stays (on another lease),
  // and another inbox opened at once: no route.
  REQUIRE(f.routing.put("user:alice", "gw-3", other, 0ms));
  const lease_id doomed = f.grant(10s);
  REQUIRE_FALSE(f.routing.open_inbox("gw-3", doomed, s.b()));
  CHECK(f.routing.route("user:alice").owner == s.b());
  REQUIRE(f.revoke(doomed));
  REQUIRE_FALSE(f.routing.open_inbox("gw-8", other, s.a()));
  CHECK(f.routing.route("user:alice").owner == nullptr);
  REQUIRE_FALSE(f.routing.open_inbox("gw-3", other, s.c()));
  CHECK(f.routing.route("user:alice").owner == s.c());
  // A revoke of the entry's own lease takes entry and inboxes: no route.
  REQUIRE(f.revoke(other));
  CHECK(f.routing.route("user:alice").owner == nullptr);
}

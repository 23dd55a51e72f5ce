// Unit tests for broker::lease_table: TTL clamping and ids, expiry bounds on a
// hand-driven clock, keepalive, revoke, attachments, rate-limited sweeps and
// stall absorption. Time never passes by itself here: the clock is a
// time_point the tests move by hand.

#include "broker/tables/lease_table.hpp"
#include "tests/support/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using switchyard::broker::lease_attachment;
using switchyard::broker::lease_config;
using switchyard::broker::lease_id;
using switchyard::broker::lease_info;
using switchyard::broker::lease_table;
using switchyard::test::fake_clock;
using switchyard::test::fake_clock_config;
using time_point = fake_clock::time_point;

// An arbitrary start for the fake clock, not a round number.
const time_point kStart = time_point{} + 1000h + 123ms;

// The stall threshold is 2 s throughout this file.
lease_config make_config(milliseconds period, milliseconds min_ttl = 1ms, milliseconds max_ttl = 60s) {
  return fake_clock_config(period, 2s, min_ttl, max_ttl);
}

// The attachments of a list, from its first element (capped, so that a
// corrupted, cyclic list ends the walk).
std::vector<lease_attachment*> chain(lease_attachment* first) {
  std::vector<lease_attachment*> out;
  for (lease_attachment* a = first; a && out.size() <= 1000; a = a->next) out.push_back(a);
  return out;
}

std::set<lease_attachment*> chain_set(lease_attachment* first) {
  const auto v = chain(first);
  return {v.begin(), v.end()};
}

// A list starting at `first` is a proper doubly linked list of attachments
// of lease `id`.
bool well_linked(const lease_attachment* first, lease_id id) {
  if (first && first->prev) return false;
  std::size_t n = 0;
  for (const lease_attachment* a = first; a; a = a->next) {
    if (++n > 1000 || a->lease != id) return false;
    if (a->next && a->next->prev != a) return false;
  }
  return true;
}

bool unlinked(const lease_attachment& a) { return a.lease == 0 && a.prev == nullptr && a.next == nullptr; }

// A lease table on a fake clock: `now` (from fake_clock) is read by the
// table's clock source and moved by hand. run_until() moves the clock
// forward, sweeping on a regular schedule (origin + k * period) on the way;
// every sweep records which lease it expired, when, and with what attached.
struct harness : fake_clock {
  lease_table table;
  time_point origin;      // the sweep schedule: origin + k * period
  time_point next_sweep;  // next scheduled sweep
  std::map<lease_id, time_point> expired_at;
  std::map<lease_id, int> expire_calls;
  std::map<lease_id, std::set<lease_attachment*>> expired_with;
  std::map<lease_id, bool> linked_ok;
  milliseconds absorbed{0};

  explicit harness(lease_config cfg, nanoseconds phase = 0ns)
      : fake_clock{kStart}, table(cfg, source()), origin(kStart + phase), next_sweep(origin) {}

  milliseconds period() const { return table.config().sweep_period; }

  lease_table::sweep_result sweep() {
    const auto r = table.sweep([this](lease_id id, lease_attachment* first) {
      expired_at[id] = now;
      ++expire_calls[id];
      expired_with[id] = chain_set(first);
      linked_ok[id] = well_linked(first, id);
    });
    absorbed += r.stall_absorbed;
    return r;
  }

  // Moves the clock to `t`, sweeping at every scheduled time up to and
  // including `t`. Returns how many leases those sweeps expired.
  std::size_t run_until(time_point t) {
    std::size_t n = 0;
    for (; next_sweep <= t; next_sweep += period()) {
      if (next_sweep < now) continue;  // the clock was moved past it by hand
      now = next_sweep;
      n += sweep().expired;
    }
    now = t;
    return n;
  }

  // A sweep at `t` after the sweeper did not run for a while; the schedule
  // resumes from there.
  lease_table::sweep_result late_sweep_at(time_point t) {
    now = t;
    const auto r = sweep();
    origin = t;
    next_sweep = t + period();
    return r;
  }

  // The first scheduled sweep at or after `t` (t after the origin).
  time_point first_sweep_at_or_after(time_point t) const {
    if (t <= origin) return origin;
    const auto k = (t - origin + period() - 1ns) / period();
    return origin + k * period();
  }

  bool expired(lease_id id) const { return expired_at.count(id) != 0; }
};

// Drives the schedule past lease `id`'s deadline (a time on the fake clock)
// and checks the expiry bounds: it survives every scheduled sweep before the
// deadline and extra sweeps at deadline - 1ms and deadline - 1ns, reads as
// gone from the deadline on even with no sweep there, and is expired, once,
// by the first scheduled sweep at or after deadline + period.
void check_expiry_window(harness& h, lease_id id, time_point deadline) {
  if (deadline - 1ms > h.now) {
    h.run_until(deadline - 1ms);
    h.sweep();
    CHECK_FALSE(h.expired(id));
    const auto left = h.table.time_to_live(id);
    REQUIRE(left);
    CHECK(left->remaining == 1ms);
  }
  if (deadline - 1ns > h.now) {
    h.run_until(deadline - 1ns);
    h.sweep();
    CHECK_FALSE(h.expired(id));
    CHECK(h.table.alive(id));
  }
  h.run_until(deadline);
  CHECK_FALSE(h.table.alive(id));
  CHECK_FALSE(h.table.time_to_live(id));
  const time_point bound = h.first_sweep_at_or_after(deadline + h.period());
  h.run_until(bound);
  REQUIRE(h.expired(id));
  CHECK(h.expired_at[id] >= deadline);
  CHECK(h.expire_calls[id] == 1);
}

}  // namespace

TEST_CASE("grant clamps the TTL to the configured minimum and maximum", "[broker]") {
  harness h(make_config(100ms, 1s, 10s));
  const std::array<std::pair<milliseconds, milliseconds>, 10> cases{{
      {-5s, 1s},
      {0ms, 1s},
      {1ms, 1s},
      {999ms, 1s},
      {1s, 1s},
      {1001ms, 1001ms},
      {5s, 5s},
      {10s, 10s},
      {10001ms, 10s},
      {24h, 10s},
  }};
  for (const auto& [asked, expected] : cases) {
    INFO("asked " << asked.count() << " ms");
    const lease_info granted = h.table.grant(asked);
    CHECK(granted.ttl == expected);
    CHECK(granted.remaining == expected);
    const auto ttl = h.table.time_to_live(granted.id);
    REQUIRE(ttl);
    CHECK(ttl->id == granted.id);
    CHECK(ttl->ttl == expected);
    CHECK(ttl->remaining == expected);
  }
  // The clamped TTL is the one that runs.
  const lease_id raised = h.table.grant(200ms).id;
  const lease_id lowered = h.table.grant(1h).id;
  check_expiry_window(h, raised, kStart + 1s);
  check_expiry_window(h, lowered, kStart + 10s);
}

TEST_CASE("lease ids start at 1, are never 0 and are never reused", "[broker]") {
  harness h(make_config(100ms));
  std::set<lease_id> issued;
  // Ids are slab slots plus a generation: a freed slot comes back under a
  // new id, so ids are unique but need not increase.
  auto grant = [&](milliseconds ttl) {
    const lease_id id = h.table.grant(ttl).id;
    CHECK(id != 0);
    CHECK(issued.insert(id).second);
    return id;
  };
  CHECK(grant(1s) == 1);
  grant(1s);
  const lease_id newest = grant(5s);
  // Revoking the newest lease does not hand its id out again.
  REQUIRE(h.table.revoke(newest, nullptr));
  const lease_id after_revoke = grant(1s);
  CHECK(after_revoke != newest);
  // Nor does expiry, even once the table is empty.
  h.run_until(kStart + 3s);
  REQUIRE(h.table.size() == 0);
  for (int i = 0; i < 5; ++i) grant(1s);
  CHECK(issued.size() == 9);
  // Another table counts from 1 on its own.
  fake_clock other_clock{kStart};
  lease_table other(make_config(100ms), other_clock.source());
  CHECK(other.grant(1s).id == 1);
  CHECK(other.grant(1s).id > 1);
}

TEST_CASE("a lease outlives every sweep before its TTL and is expired within one sweep period after it", "[broker]") {
  struct combo {
    milliseconds ttl;
    milliseconds period;
  };
  const combo combos[] = {
      {1000ms, 100ms}, {1050ms, 100ms}, {999ms, 100ms}, {1000ms, 1000ms}, {1500ms, 1000ms},
      {10ms, 3ms},     {1ms, 1ms},      {250ms, 7ms},   {100ms, 250ms},
  };
  for (const combo& c : combos) {
    const nanoseconds period = c.period;
    const nanoseconds grant_offsets[] = {0ns, 1ms, 37ms + 123456ns, period - 1ns, 5 * period + period / 2};
    const nanoseconds phases[] = {0ns, period / 3, period - 1ns};
    // A roomy maximum, and the TTL itself as the maximum (the smallest wheel).
    for (const milliseconds max_ttl : {milliseconds(60s), c.ttl}) {
      for (const nanoseconds offset : grant_offsets) {
        for (const nanoseconds phase : phases) {
          INFO("ttl " << c.ttl.count() << " ms, period " << c.period.count() << " ms, max_ttl " << max_ttl.count()
                      << " ms, grant at +" << offset.count() << " ns, sweeps at +" << phase.count() << " ns");
          harness h(make_config(c.period, 1ms, max_ttl), phase);
          h.run_until(kStart + offset);
          const lease_info granted = h.table.grant(c.ttl);
          REQUIRE(granted.ttl == c.ttl);
          check_expiry_window(h, granted.id, kStart + offset + c.ttl);
          CHECK(h.table.size() == 0);
        }
      }
    }
  }
}

TEST_CASE("leases granted and kept alive over many wheel rounds all expire within their bounds", "[broker]") {
  // max_ttl / period = 10: the wheel has only a dozen buckets, so this runs
  // through it many times.
  harness h(make_config(100ms, 1ms, 1000ms), 33ms);
  const milliseconds ttls[] = {1ms, 99ms, 100ms, 101ms, 550ms, 999ms, 1000ms, 5000ms};
  std::map<lease_id, time_point> deadline;
  std::map<lease_id, milliseconds> ttl_of;
  std::vector<lease_id> kept;  // kept alive every 3 steps until step 150
  for (int step = 0; step < 200; ++step) {
    h.run_until(kStart + step * 37ms);
    const lease_info l = h.table.grant(ttls[step % 8]);
    deadline[l.id] = h.now + l.ttl;
    ttl_of[l.id] = l.ttl;
    if (l.ttl >= 550ms && kept.size() < 5) kept.push_back(l.id);
    if (step % 3 == 0 && step <= 150) {
      for (const lease_id id : kept) {
        const bool live = deadline[id] > h.now;
        const auto k = h.table.keepalive(id);
        CHECK(k.has_value() == live);
        if (k) deadline[id] = h.now + ttl_of[id];
      }
    }
  }
  h.run_until(kStart + 200 * 37ms + 3s);
  CHECK(h.table.size() == 0);
  CHECK(h.expired_at.size() == deadline.size());
  for (const auto& [id, d] : deadline) {
    INFO("lease " << id << " ttl " << ttl_of[id].count() << " ms");
    REQUIRE(h.expired(id));
    CHECK(h.expired_at[id] >= d);
    CHECK(h.expired_at[id] <= h.first_sweep_at_or_after(d + h.period()));
    CHECK(h.expire_calls[id] == 1);
  }
  // The kept leases outlived their first TTL by far.
  for (const lease_id id : kept) CHECK(h.expired_at[id] > kStart + 150 * 37ms);
}

TEST_CASE("an expired lease reads as gone before any sweep has removed it", "[broker]") {
  SECTION("no sweep has ever run") {
    harness h(make_config(100ms));
    const lease_id id = h.table.grant(500ms).id;
    h.now = kStart + 499ms;
    REQUIRE(h.table.alive(id));
    CHECK(h.table.time_to_live(id)->remaining == 1ms);
    h.now = kStart + 500ms;
    lease_attachment a;
    CHECK_FALSE(h.table.time_to_live(id));
    CHECK_FALSE(h.table.alive(id));
    CHECK_FALSE(h.table.keepalive(id));
    CHECK_FALSE(h.table.attach(id, a));
    CHECK(unlinked(a));
    CHECK(h.table.list(10).empty());
    CHECK(h.table.size() == 1);  // not swept yet
    // The failed keepalive did not revive it: the first sweep expires it.
    CHECK(h.sweep().expired == 1);
    CHECK(h.expired(id));
  }
  SECTION("sweeps run, but none since the deadline") {
    harness h(make_config(1000ms));
    const lease_id id = h.table.grant(2500ms).id;
    h.run_until(kStart + 2999ms);  // last sweep at +2 s
    CHECK_FALSE(h.expired(id));
    CHECK_FALSE(h.table.time_to_live(id));
    CHECK_FALSE(h.table.alive(id));
    CHECK_FALSE(h.table.keepalive(id));
    CHECK(h.table.size() == 1);
    h.run_until(kStart + 3s);
    CHECK(h.expired(id));
  }
}

TEST_CASE("the remaining time of a lease decreases with the clock", "[broker]") {
  harness h(make_config(100ms));
  const lease_id id = h.table.grant(10s).id;
  for (int i = 1; i < 40; ++i) {
    h.run_until(kStart + i * 250ms);
    const auto ttl = h.table.time_to_live(id);
    REQUIRE(ttl);
    CHECK(ttl->id == id);
    CHECK(ttl->ttl == 10s);
    CHECK(ttl->remaining == 10s - i * 250ms);
  }
}

TEST_CASE("keepalive restarts the TTL from the time of the keepalive", "[broker]") {
  harness h(make_config(100ms));
  const lease_id id = h.table.grant(1000ms).id;
  SECTION("once") {
    h.run_until(kStart + 700ms + 250us);  // between ticks
    const auto k = h.table.keepalive(id);
    REQUIRE(k);
    CHECK(k->id == id);
    CHECK(k->ttl == 1000ms);
    CHECK(k->remaining == 1000ms);
    CHECK(h.table.time_to_live(id)->remaining == 1000ms);
    // Past the original deadline plus a period, up to the new one.
    check_expiry_window(h, id, kStart + 1700ms + 250us);
  }
  SECTION("repeatedly, for much longer than the TTL") {
    time_point last = kStart;
    for (int i = 1; i <= 20; ++i) {
      h.run_until(kStart + i * 333ms);
      REQUIRE(h.table.keepalive(id));
      last = h.now;
    }
    CHECK_FALSE(h.expired(id));
    check_expiry_window(h, id, last + 1000ms);
  }
}

TEST_CASE("keepalive of an unknown, revoked or expired lease returns nothing", "[broker]") {
  harness h(make_config(100ms));
  CHECK_FALSE(h.table.keepalive(0));
  CHECK_FALSE(h.table.keepalive(42));
  const lease_id revoked = h.table.grant(5s).id;
  const lease_id expiring = h.table.grant(1s).id;
  REQUIRE(h.table.revoke(revoked, nullptr));
  CHECK_FALSE(h.table.keepalive(revoked));
  h.run_until(kStart + 1100ms);
  REQUIRE(h.expired(expiring));
  CHECK_FALSE(h.table.keepalive(expiring));
  CHECK(h.table.size() == 0);
  // A failed keepalive creates nothing.
  CHECK_FALSE(h.table.alive(42));
  CHECK_FALSE(h.table.alive(revoked));
}

TEST_CASE("revoke removes a lease once and reports an unknown lease", "[broker]") {
  harness h(make_config(100ms));
  const lease_id a = h.table.grant(10s).id;
  const lease_id b = h.table.grant(10s).id;
  int calls = 0;
  lease_id seen = 0;
  bool nothing_attached = false;
  auto on_remove = [&](lease_id id, lease_attachment* first) {
    ++calls;
    seen = id;
    nothing_attached = first == nullptr;
  };
  CHECK(h.table.revoke(a, on_remove));
  CHECK(calls == 1);
  CHECK(seen == a);
  CHECK(nothing_attached);
  CHECK_FALSE(h.table.alive(a));
  CHECK(h.table.alive(b));
  CHECK(h.table.size() == 1);
  CHECK_FALSE(h.table.revoke(a, on_remove));
  CHECK_FALSE(h.table.revoke(0, on_remove));
  CHECK_FALSE(h.table.revoke(999, on_remove));
  CHECK(calls == 1);
  // A revoked lease is never expired later; the other one is.
  h.run_until(kStart + 10100ms);
  CHECK_FALSE(h.expired(a));
  CHECK(h.expired(b));
}

TEST_CASE("revoke hands the attachments to the callback and unlinks them all afterwards", "[broker]") {
  harness h(make_config(100ms));
  const lease_id id = h.table.grant(10s).id;
  const lease_id other = h.table.grant(10s).id;
  lease_attachment a, b, c, d;
  REQUIRE(h.table.attach(id, a));
  REQUIRE(h.table.attach(id, b));
  REQUIRE(h.table.attach(id, c));
  REQUIRE(h.table.attach(other, d));
  a.kind = 7;  // the owner's field: the table leaves it alone
  CHECK(a.lease == id);
  CHECK(d.lease == other);
  const std::set<lease_attachment*> all{&a, &b, &c};

  int calls = 0;
  lease_id seen = 0;
  std::set<lease_attachment*> seen_attached;
  bool linked = false;
  auto record = [&](lease_id i, lease_attachment* first) {
    ++calls;
    seen = i;
    seen_attached = chain_set(first);
    linked = well_linked(first, i);
  };
  SECTION("a callback that leaves them attached") {
    REQUIRE(h.table.revoke(id, record));
    CHECK(calls == 1);
    CHECK(seen == id);
    CHECK(seen_attached == all);
    CHECK(linked);
  }
  SECTION("no callback at all") { REQUIRE(h.table.revoke(id, nullptr)); }
  SECTION("a callback that detaches each attachment itself") {
    bool each_unlinked = true;
    const bool revoked = h.table.revoke(id, [&](lease_id i, lease_attachment* first) {
      record(i, first);
      for (lease_attachment* x = first; x;) {
        lease_attachment* next = x->next;
        h.table.detach(*x);
        each_unlinked = each_unlinked && unlinked(*x);
        x = next;
      }
    });
    REQUIRE(revoked);
    CHECK(each_unlinked);
    CHECK(calls == 1);
    CHECK(seen_attached == all);
  }
  CHECK(unlinked(a));
  CHECK(unlinked(b));
  CHECK(unlinked(c));
  CHECK(a.kind == 7);
  CHECK(d.lease == other);
  // The unlinked attachments are usable again; the other lease's list is intact.
  REQUIRE(h.table.attach(other, a));
  h.table.detach(b);  // not attached: no-op
  CHECK(unlinked(b));
  calls = 0;
  REQUIRE(h.table.revoke(other, record));
  CHECK(calls == 1);
  CHECK(seen_attached == std::set<lease_attachment*>{&a, &d});
  CHECK(linked);
  CHECK(unlinked(a));
  CHECK(unlinked(d));
}

TEST_CASE("attach fails for an unknown, revoked or expired lease", "[broker]") {
  harness h(make_config(100ms));
  lease_attachment a;
  CHECK_FALSE(h.table.attach(0, a));
  CHECK_FALSE(h.table.attach(7, a));
  CHECK(unlinked(a));
  const lease_id revoked = h.table.grant(5s).id;
  REQUIRE(h.table.revoke(revoked, nullptr));
  CHECK_FALSE(h.table.attach(revoked, a));
  CHECK(unlinked(a));
  const lease_id expired = h.table.grant(1s).id;
  h.now = kStart + 1s;  // past the deadline, not swept
  CHECK_FALSE(h.table.attach(expired, a));
  CHECK(unlinked(a));
  h.sweep();
  REQUIRE(h.expired(expired));
  CHECK(h.expired_with[expired].empty());
  CHECK_FALSE(h.table.attach(expired, a));
  CHECK(unlinked(a));
}

TEST_CASE("detaching the head, middle or tail of an attachment list keeps the others linked", "[broker]") {
  for (int pos = 0; pos < 4; ++pos) {
    DYNAMIC_SECTION((pos < 3 ? "detaching position " : "detaching all, position ") << pos % 3) {
      harness h(make_config(100ms));
      const lease_id id = h.table.grant(1s).id;
      lease_attachment x, y, z;
      REQUIRE(h.table.attach(id, x));
      REQUIRE(h.table.attach(id, y));
      REQUIRE(h.table.attach(id, z));
      // Find the list order from the links: the head has no prev.
      lease_attachment* head = nullptr;
      for (lease_attachment* a : {&x, &y, &z}) {
        if (!a->prev) {
          CHECK(head == nullptr);
          head = a;
        }
      }
      REQUIRE(head);
      const auto order = chain(head);
      REQUIRE(order.size() == 3);
      CHECK(well_linked(head, id));
      std::set<lease_attachment*> expected{&x, &y, &z};
      if (pos < 3) {
        h.table.detach(*order[pos]);
        CHECK(unlinked(*order[pos]));
        expected.erase(order[pos]);
      } else {
        for (lease_attachment* a : order) h.table.detach(*a);
        expected.clear();
      }
      h.run_until(kStart + 1100ms);
      REQUIRE(h.expired(id));
      CHECK(h.expired_with[id] == expected);
      CHECK(h.linked_ok[id]);
      CHECK(unlinked(x));
      CHECK(unlinked(y));
      CHECK(unlinked(z));
    }
  }
}

TEST_CASE("attaching an attachment to another lease moves it there", "[broker]") {
  harness h(make_config(100ms));
  const lease_id first = h.table.grant(1s).id;
  const lease_id second = h.table.grant(2s).id;
  lease_attachment a, b;
  REQUIRE(h.table.attach(first, a));
  REQUIRE(h.table.attach(first, b));
  REQUIRE(h.table.attach(second, a));
  CHECK(a.lease == second);
  CHECK(b.lease == first);
  // Attaching again to the same lease does not duplicate it.
  REQUIRE(h.table.attach(second, a));
  CHECK(a.lease == second);
  h.run_until(kStart + 1100ms);
  REQUIRE(h.expired(first));
  CHECK(h.expired_with[first] == std::set<lease_attachment*>{&b});
  CHECK(h.linked_ok[first]);
  CHECK(unlinked(b));
  CHECK(a.lease == second);
  h.run_until(kStart + 2100ms);
  REQUIRE(h.expired(second));
  CHECK(h.expired_with[second] == std::set<lease_attachment*>{&a});
  CHECK(h.linked_ok[second]);
  CHECK(unlinked(a));
}

TEST_CASE("a sweep reports each expired lease exactly once with its attachments", "[broker]") {
  harness h(make_config(100ms));
  const milliseconds ttls[] = {300ms, 300ms, 450ms, 800ms, 800ms, 1200ms};
  std::vector<lease_attachment> attachments(15);  // lease i gets i of them
  std::map<lease_id, std::set<lease_attachment*>> expected;
  std::map<lease_id, time_point> deadline;
  std::size_t next = 0;
  for (int i = 0; i < 6; ++i) {
    const lease_info l = h.table.grant(ttls[i]);
    deadline[l.id] = kStart + l.ttl;
    expected[l.id];
    for (int k = 0; k < i; ++k) {
      REQUIRE(h.table.attach(l.id, attachments[next]));
      expected[l.id].insert(&attachments[next++]);
    }
  }
  CHECK(h.run_until(kStart + 2s) == 6);
  CHECK(h.table.size() == 0);
  CHECK(h.expire_calls.size() == 6);
  for (const auto& [id, set] : expected) {
    INFO("lease " << id);
    CHECK(h.expire_calls[id] == 1);
    CHECK(h.expired_with[id] == set);
    CHECK(h.linked_ok[id]);
    CHECK(h.expired_at[id] >= deadline[id]);
    CHECK(h.expired_at[id] <= deadline[id] + h.period());
  }
  for (const lease_attachment& a : attachments) CHECK(unlinked(a));
  // Later sweeps report nothing more.
  CHECK(h.run_until(kStart + 3s) == 0);
  CHECK(h.expire_calls.size() == 6);
}

TEST_CASE("a mass expiry is spread over sweeps of at most max_expiries_per_sweep", "[broker]") {
  lease_config cfg = make_config(100ms);
  cfg.max_expiries_per_sweep = 100;
  harness h(cfg);
  std::vector<lease_id> due;
  for (int i = 0; i < 1000; ++i) due.push_back(h.table.grant(1s).id);  // all in the tick at +1 s
  h.run_until(kStart + 500ms);
  std::vector<lease_id> later;
  for (int i = 0; i < 50; ++i) later.push_back(h.table.grant(5s).id);  // due at +5.5 s
  CHECK(h.run_until(kStart + 999ms) == 0);

  std::vector<lease_table::sweep_result> results;
  std::size_t alive_after_first = 1000;
  SECTION("sweeps on schedule") {
    for (int i = 0; i < 10; ++i) {
      h.run_until(kStart + 1s + i * 100ms - 1ns);
      h.now = kStart + 1s + i * 100ms;
      h.next_sweep = h.now + 100ms;
      results.push_back(h.sweep());
      if (i == 0)
        alive_after_first = std::count_if(due.begin(), due.end(), [&](lease_id id) { return h.table.alive(id); });
    }
  }
  SECTION("sweeps back to back at the same instant") {
    h.run_until(kStart + 1s - 1ns);
    h.now = kStart + 1s;
    for (int i = 0; i < 10; ++i) {
      results.push_back(h.sweep());
      if (i == 0)
        alive_after_first = std::count_if(due.begin(), due.end(), [&](lease_id id) { return h.table.alive(id); });
    }
    h.next_sweep = h.now + 100ms;
  }
  REQUIRE(results.size() == 10);
  std::size_t total = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("sweep " << i);
    CHECK(results[i].expired == 100);
    CHECK(results[i].more_due == (i < 9));
    total += results[i].expired;
  }
  CHECK(total == 1000);
  // Deferred leases are past their deadline: they read as gone meanwhile.
  CHECK(alive_after_first == 0);
  CHECK(h.expire_calls.size() == 1000);
  CHECK(std::all_of(due.begin(), due.end(), [&](lease_id id) { return h.expire_calls[id] == 1; }));
  CHECK(std::none_of(later.begin(), later.end(), [&](lease_id id) { return h.expired(id); }));
  CHECK(h.table.size() == 50);
  for (const lease_id id : later) {
    const auto ttl = h.table.time_to_live(id);
    REQUIRE(ttl);
    CHECK(ttl->remaining == kStart + 5500ms - h.now);
  }
  const auto after = h.sweep();
  CHECK(after.expired == 0);
  CHECK_FALSE(after.more_due);
  // The leases not yet due expire later, normally.
  CHECK(h.run_until(kStart + 5600ms) == 50);
  CHECK(h.table.size() == 0);
}

TEST_CASE("leases granted and kept alive during a rate-limited backlog expire no earlier than their deadline",
          "[broker]") {
  // One expiry per sweep and a wheel of 12 buckets: the backlog holds the
  // sweep at one tick for seconds while new deadlines land in the same
  // buckets a round later.
  lease_config cfg = make_config(100ms, 1ms, 1000ms);
  cfg.max_expiries_per_sweep = 1;
  harness h(cfg);
  std::map<lease_id, time_point> deadline;
  std::vector<lease_id> backlog;
  for (int i = 0; i < 30; ++i) {
    backlog.push_back(h.table.grant(1s).id);
    deadline[backlog.back()] = kStart + 1s;
  }
  const lease_id kept = h.table.grant(1s).id;
  time_point kept_until = kStart + 1s;
  const milliseconds ttls[] = {1000ms, 950ms, 500ms};
  std::size_t most_per_step = 0;
  std::size_t backlog_alive_at_2s = 0;
  for (int i = 1; i <= 100; ++i) {  // steps of 50 ms: at most one sweep each
    most_per_step = std::max(most_per_step, h.run_until(kStart + i * 50ms));
    if (i % 6 == 0 && i <= 80) {  // keepalive every 300 ms until +4 s
      CHECK(h.table.keepalive(kept));
      kept_until = h.now + 1s;
    }
    if (i >= 23 && i <= 40) {  // +1.15 s .. +2 s, while the backlog drains
      const lease_info l = h.table.grant(ttls[i % 3]);
      deadline[l.id] = h.now + l.ttl;
    }
    if (i == 40) {
      backlog_alive_at_2s =
          std::count_if(backlog.begin(), backlog.end(), [&](lease_id id) { return h.table.alive(id); });
    }
  }
  h.run_until(kStart + 10s);
  CHECK(most_per_step == 1);
  CHECK(backlog_alive_at_2s == 0);
  CHECK(h.table.size() == 0);
  for (const auto& [id, d] : deadline) {
    INFO("lease " << id);
    REQUIRE(h.expired(id));
    CHECK(h.expired_at[id] >= d);
    CHECK(h.expire_calls[id] == 1);
  }
  REQUIRE(h.expired(kept));
  CHECK(h.expired_at[kept] >= kept_until);
}

TEST_CASE("a paused process does not expire its leases: each gets its full TTL from the end of the stall", "[broker]") {
  harness h(make_config(100ms));  // stall threshold 2 s
  const milliseconds P = h.period();
  h.run_until(kStart + 4750ms);
  const lease_id a = h.table.grant(10s).id;  // left alone
  const lease_id b = h.table.grant(10s).id;  // kept alive after the stall
  const lease_id c = h.table.grant(10s).id;  // kept alive once, right after the jump
  h.run_until(kStart + 5s);
  CHECK(h.absorbed == 0ms);

  // The process is paused for 60 s: the clock jumps, no sweep ran.
  h.now += 60s;
  // Before the sweeper runs, the leases read as alive with their full TTL
  // ahead: the stall is not absorbed yet, but it will end at this lease time.
  for (const lease_id id : {a, b, c}) {
    const auto ttl = h.table.time_to_live(id);
    REQUIRE(ttl);
    CHECK(ttl->remaining == 10s);
    CHECK(h.table.alive(id));
  }
  const auto kept = h.table.keepalive(c);
  REQUIRE(kept);
  CHECK(kept->remaining == 10s);

  const auto r = h.late_sweep_at(h.now);
  CHECK(r.stall_absorbed > 0ms);
  CHECK(r.stall_absorbed <= 60s);
  CHECK(r.expired == 0);
  CHECK(h.table.size() == 3);
  const auto ta = h.table.time_to_live(a);
  REQUIRE(ta);
  CHECK(ta->remaining == 10s);
  const auto tc = h.table.time_to_live(c);
  REQUIRE(tc);
  CHECK(tc->remaining == 10s);
  const time_point a_deadline = h.now + ta->remaining;
  const time_point c_deadline = h.now + tc->remaining;

  // Afterwards the sweeper runs on schedule: b is kept alive every 3 s,
  // a and c expire a full TTL after the stall.
  const time_point resumed = h.now;
  for (int i = 1; i <= 7; ++i) {
    h.run_until(resumed + i * 3s);
    CHECK(h.table.keepalive(b));
  }
  CHECK(h.absorbed == r.stall_absorbed);  // no further stall
  for (const auto& [id, deadline] : {std::pair{a, a_deadline}, std::pair{c, c_deadline}}) {
    INFO("lease " << id);
    REQUIRE(h.expired(id));
    CHECK(h.expired_at[id] >= deadline);
    CHECK(h.expired_at[id] <= h.first_sweep_at_or_after(deadline + P));
  }
  CHECK_FALSE(h.expired(b));
  CHECK(h.table.alive(b));
  check_expiry_window(h, b, h.now + 10s);
  // A lease granted after the stall runs its TTL on the clock.
  const lease_id d = h.table.grant(1500ms).id;
  check_expiry_window(h, d, h.now + 1500ms);
}

TEST_CASE("leases kept alive every TTL/3 all survive a 10 s stall, with TTLs of 1 s and 3 s", "[broker]") {
  for (const milliseconds ttl : {1000ms, 3000ms}) {
    DYNAMIC_SECTION("TTL " << ttl.count() << " ms") {
      harness h(make_config(100ms, 1000ms));  // stall threshold 2 s
      // 1,000 leases, keepalives spread evenly over each TTL/3 period.
      constexpr int n = 1000;
      std::vector<lease_id> ids;
      std::vector<time_point> next_keepalive;
      const auto every = ttl / 3;
      for (int i = 0; i < n; ++i) {
        ids.push_back(h.table.grant(ttl).id);
        next_keepalive.push_back(kStart + every * i / n);
      }
      // Runs the clock forward in 10 ms steps, sending every keepalive that
      // is due; counts the ones refused.
      int refused = 0;
      const auto drive = [&](time_point until) {
        for (time_point t = h.now; t <= until; t += 10ms) {
          h.run_until(t);
          for (int i = 0; i < n; ++i)
            while (next_keepalive[i] <= h.now) {
              if (!h.table.keepalive(ids[i])) ++refused;
              next_keepalive[i] += every;
            }
        }
      };
      drive(kStart + 5s);
      REQUIRE(refused == 0);
      REQUIRE(h.table.size() == n);
      // SIGSTOP for 10 s: no sweep, no keepalive. Every keepalive due during
      // the stall arrives right after it, before or after the next sweep.
      h.now += 10s;
      for (int i = 0; i < n; ++i)
        if (next_keepalive[i] < h.now) next_keepalive[i] = h.now + (i % 2 ? 0ms : 50ms);
      h.next_sweep = h.now + 20ms;  // the sweep timer fires between the two halves
      h.origin = h.next_sweep;
      drive(h.now + 5s);
      CHECK(refused == 0);
      CHECK(h.expired_at.empty());
      CHECK(h.table.size() == n);
    }
  }
}

TEST_CASE("after a stall a lease that is not kept alive expires one TTL after the stall's end", "[broker]") {
  harness h(make_config(100ms));  // stall threshold 2 s
  const lease_id l = h.table.grant(1000ms).id;
  h.run_until(kStart + 900ms);  // 100 ms left
  h.now += 5s;
  const time_point stall_end = h.now;
  const auto r = h.late_sweep_at(stall_end);
  REQUIRE(r.stall_absorbed > 0ms);
  CHECK(r.expired == 0);
  // Lease time runs on the clock from here: the deadline is one TTL ahead.
  check_expiry_window(h, l, stall_end + 1000ms);
}

TEST_CASE("a sweeper delay below the stall threshold is not absorbed and leases expire on time", "[broker]") {
  for (const milliseconds gap : {500ms, 1500ms, 2099ms}) {  // time since the last sweep
    DYNAMIC_SECTION("sweeper " << gap.count() << " ms after the previous sweep") {
      harness h(make_config(100ms));  // stall threshold 2 s
      const lease_id due = h.table.grant(1200ms).id;
      const lease_id other = h.table.grant(10s).id;
      h.run_until(kStart + 1s);
      const time_point t = h.now + gap;
      h.now = t;
      CHECK_FALSE(h.table.alive(due));
      CHECK(h.table.time_to_live(other)->remaining == kStart + 10s - t);
      const auto r = h.late_sweep_at(t);
      CHECK(r.stall_absorbed == 0ms);
      CHECK(r.expired == 1);
      CHECK(h.expired(due));
      CHECK(h.table.time_to_live(other)->remaining == kStart + 10s - t);
      check_expiry_window(h, other, kStart + 10s);
    }
  }
}

TEST_CASE("a delay just over the stall threshold holds lease time back and gives every lease its TTL again",
          "[broker]") {
  harness h(make_config(100ms));  // stall threshold 2 s
  const lease_id due = h.table.grant(1200ms).id;
  const lease_id other = h.table.grant(10s).id;
  h.run_until(kStart + 1s);
  const time_point t = h.now + 2600ms;
  const auto r = h.late_sweep_at(t);
  CHECK(r.stall_absorbed > 0ms);
  CHECK(r.stall_absorbed <= 2600ms);
  const time_point lease_now = t - r.stall_absorbed;
  // `due` was past its own deadline in lease time, and `other` had 6.9 s
  // left: both get their full TTL from the end of the stall.
  REQUIRE(kStart + 1200ms <= lease_now);
  CHECK(r.expired == 0);
  CHECK_FALSE(h.expired(due));
  const auto left = h.table.time_to_live(due);
  REQUIRE(left);
  CHECK(left->remaining == 1200ms);
  const auto ttl = h.table.time_to_live(other);
  REQUIRE(ttl);
  CHECK(kStart + 10s - lease_now < 10s);
  CHECK(ttl->remaining == 10s);
  check_expiry_window(h, due, t + 1200ms);
  check_expiry_window(h, other, t + ttl->remaining);
}

TEST_CASE("list returns at most limit live leases and never an expired one", "[broker]") {
  harness h(make_config(100ms));
  std::set<lease_id> live, dead;
  for (int i = 0; i < 10; ++i) {
    if (i % 5 == 1 || i % 5 == 3)
      dead.insert(h.table.grant(500ms).id);
    else
      live.insert(h.table.grant(10s).id);
  }
  REQUIRE(dead.size() == 4);
  h.run_until(kStart + 450ms);
  CHECK(h.table.list(100).size() == 10);
  h.now = kStart + 550ms;  // past the short deadlines; no sweep since +400 ms
  REQUIRE(h.table.size() == 10);
  for (const std::size_t limit : {std::size_t{100}, std::size_t{6}, std::size_t{3}, std::size_t{1}, std::size_t{0}}) {
    INFO("limit " << limit);
    const auto listed = h.table.list(limit);
    CHECK(listed.size() == std::min<std::size_t>(limit, 6));
    std::set<lease_id> ids;
    for (const lease_info& l : listed) {
      CHECK(live.count(l.id) == 1);
      CHECK(ids.insert(l.id).second);
      CHECK(l.ttl == 10s);
      CHECK(l.remaining == 10s - 550ms);
    }
  }
  h.sweep();
  CHECK(h.table.size() == 6);
  CHECK(h.table.list(100).size() == 6);
}

TEST_CASE("list pages after a cursor list every lease that lives throughout exactly once", "[broker]") {
  for (const std::uint64_t key : {std::uint64_t{0}, std::uint64_t{0x9E3779B97F4A7C15}}) {
    INFO("id key " << key);
    auto cfg = make_config(100ms);
    cfg.id_key = key;
    harness h(cfg);
    std::vector<lease_id> ids;
    for (int i = 0; i < 10; ++i) ids.push_back(h.table.grant(10s).id);
    // Between pages: a lease of the first page and one of a later page
    // are revoked, and new leases take their slots and more.
    std::set<lease_id> seen;
    std::vector<std::size_t> pages;
    lease_id after = 0;
    for (int page = 0; page < 20; ++page) {
      lease_id next = 0;
      const auto listed = h.table.list(3, after, &next);
      pages.push_back(listed.size());
      for (const auto& l : listed) CHECK(seen.insert(l.id).second);
      if (page == 0) {
        REQUIRE(h.table.revoke(listed.front().id, {}));
        REQUIRE(h.table.revoke(ids[7], {}));
        for (int i = 0; i < 3; ++i) h.table.grant(10s);
      }
      if (next == 0) break;
      CHECK(next == listed.back().id);
      after = next;
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (i != 7) CHECK(seen.count(ids[i]) == 1);
    CHECK(pages.front() == 3);
    // The page after the last lease is empty, and so is one after an id
    // no lease of this table ever had.
    lease_id next = 1;
    CHECK(h.table
              .list(3,
                    *std::max_element(seen.begin(), seen.end(),
                                      [&](lease_id a, lease_id b) {
                                        return (a ^ key) % (std::uint64_t{1} << 32) <
                                               (b ^ key) % (std::uint64_t{1} << 32);
                                      }),
                    &next)
              .empty());
    CHECK(next == 0);
    CHECK(h.table.list(3, key ^ (std::uint64_t{5} << 32), &next).empty());
  }
}

TEST_CASE("a full page gives no cursor when no live lease follows it", "[broker]") {
  harness h(make_config(100ms));
  for (int i = 0; i < 3; ++i) h.table.grant(10s);
  h.table.grant(500ms);  // the last slot: expired below, not swept
  h.now = kStart + 600ms;
  lease_id next = 1;
  CHECK(h.table.list(3, 0, &next).size() == 3);
  CHECK(next == 0);
  CHECK(h.table.list(2, 0, &next).size() == 2);
  CHECK(next != 0);
}

TEST_CASE("a config with zero, negative or inverted values is sanitized by the constructor", "[broker]") {
  lease_config cfg;
  SECTION("zeros") {
    cfg.min_ttl = 0ms;
    cfg.max_ttl = 0ms;
    cfg.sweep_period = 0ms;
    cfg.max_expiries_per_sweep = 0;
  }
  SECTION("negative durations") {
    cfg.min_ttl = -5ms;
    cfg.max_ttl = -10ms;
    cfg.sweep_period = -1ms;
    cfg.max_expiries_per_sweep = 0;
  }
  cfg.stall_threshold = 2s;
  harness h(cfg);
  const lease_config& c = h.table.config();
  CHECK(c.sweep_period >= 1ms);
  CHECK(c.min_ttl >= 1ms);
  CHECK(c.max_ttl >= c.min_ttl);
  CHECK(c.max_expiries_per_sweep >= 1);
  CHECK(c.max_expiries_per_sweep == 1);

  // The sanitized table works: TTLs are clamped into the range, and one
  // lease expires per sweep.
  const lease_info l = h.table.grant(0ms);
  CHECK(l.ttl >= c.min_ttl);
  CHECK(l.ttl <= c.max_ttl);
  h.table.grant(0ms);
  h.table.grant(0ms);
  h.now += c.max_ttl;
  const auto first = h.sweep();
  CHECK(first.expired == 1);
  CHECK(first.more_due);
  h.sweep();
  const auto last = h.sweep();
  CHECK(last.expired == 1);
  CHECK_FALSE(last.more_due);
  CHECK(h.table.size() == 0);
  h.next_sweep = h.now;
  const lease_info m = h.table.grant(1ms);
  check_expiry_window(h, m.id, h.now + m.ttl);
}

TEST_CASE("a max_ttl below min_ttl is raised to min_ttl", "[broker]") {
  harness h(make_config(100ms, 5s, 1s));
  CHECK(h.table.config().min_ttl == 5s);
  CHECK(h.table.config().max_ttl >= 5s);
  CHECK(h.table.grant(1s).ttl == 5s);
  CHECK(h.table.grant(1h).ttl == h.table.config().max_ttl);
}

TEST_CASE("a million leases expire in waves by TTL and leave the table empty", "[broker][slow]") {
  constexpr std::size_t total = 1'000'000;
  constexpr std::size_t waves = 10;
  constexpr std::size_t per_wave = total / waves;
  lease_config cfg = make_config(100ms, 1ms, 10s);
  cfg.max_expiries_per_sweep = total;
  fake_clock clock{kStart};
  lease_table table(cfg, clock.source());
  const milliseconds P = cfg.sweep_period;
  auto wave_of = [](lease_id id) { return static_cast<std::size_t>((id - 1) % waves); };
  auto ttl_of_wave = [](std::size_t w) { return milliseconds(1000 * (w + 1)); };  // 1 s .. 10 s

  clock.now = kStart + 30ms + 500us;  // off the tick grid
  const time_point granted_at = clock.now;
  std::size_t unexpected_id = 0;
  for (std::size_t i = 0; i < total; ++i) {
    const lease_info l = table.grant(ttl_of_wave(i % waves));
    if (l.id != i + 1) ++unexpected_id;
  }
  REQUIRE(unexpected_id == 0);
  REQUIRE(table.size() == total);

  std::array<std::size_t, waves> expired{};
  std::size_t early = 0, late = 0, with_attachments = 0, swept_total = 0;
  time_point previous_sweep = kStart;
  auto on_expire = [&](lease_id id, lease_attachment* first) {
    const std::size_t w = wave_of(id);
    ++expired[w];
    const time_point deadline = granted_at + ttl_of_wave(w);
    if (clock.now < deadline) ++early;
    if (previous_sweep >= deadline + P) ++late;  // the previous sweep should have taken it
    if (first) ++with_attachments;
  };
  std::size_t next_wave = 0;
  for (time_point s = kStart + P; s <= granted_at + ttl_of_wave(waves - 1) + 2 * P; s += P) {
    clock.now = s;
    const auto r = table.sweep(on_expire);
    previous_sweep = s;
    swept_total += r.expired;
    CHECK_FALSE(r.more_due);
    // Every wave whose bound has passed is complete; the next is untouched
    // until its deadline.
    while (next_wave < waves && s >= granted_at + ttl_of_wave(next_wave) + P) {
      INFO("wave " << next_wave);
      CHECK(expired[next_wave] == per_wave);
      CHECK(table.size() == total - (next_wave + 1) * per_wave);
      ++next_wave;
    }
    if (next_wave < waves && s < granted_at + ttl_of_wave(next_wave)) CHECK(expired[next_wave] == 0);
  }
  CHECK(next_wave == waves);
  CHECK(early == 0);
  CHECK(late == 0);
  CHECK(with_attachments == 0);
  CHECK(swept_total == total);
  CHECK(table.size() == 0);
}

TEST_CASE("without an id key, the lease granted after lease 1 expired reuses its slot with the next generation",
          "[broker]") {
  harness h(make_config(100ms));
  const lease_id first = h.table.grant(10s).id;
  CHECK(first == 1);
  h.run_until(kStart + 10s + 200ms);
  REQUIRE(h.expired(first));
  CHECK(h.table.grant(10s).id == (lease_id{1} << 32 | 1));
}

TEST_CASE("a stall does not revive leases the rate limit left due at the sweep before it", "[broker]") {
  lease_config cfg = make_config(100ms);
  cfg.max_expiries_per_sweep = 1;
  harness h(cfg);
  std::vector<lease_id> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(h.table.grant(500ms).id);
  const lease_id kept = h.table.grant(10s).id;
  h.run_until(kStart + 500ms);  // the sweep at +500 ms expires one of the three
  std::size_t gone = 0;
  for (const lease_id id : ids) gone += h.expired(id) ? 1 : 0;
  REQUIRE(gone == 1);
  h.now += 5s;  // then a stall
  const auto r = h.late_sweep_at(h.now);
  REQUIRE(r.stall_absorbed > 0ms);
  // The two left due before the stall stay expired (one goes per sweep);
  // the live one gets its full TTL.
  for (const lease_id id : ids) {
    CHECK_FALSE(h.table.alive(id));
    CHECK_FALSE(h.table.keepalive(id));
  }
  h.sweep();
  gone = 0;
  for (const lease_id id : ids) gone += h.expired(id) ? 1 : 0;
  CHECK(gone == 3);
  const auto left = h.table.time_to_live(kept);
  REQUIRE(left);
  CHECK(left->remaining == 10s);
}

TEST_CASE("sweeps that run late by less than the threshold never count as stalls, so leases keep expiring",
          "[broker]") {
  harness h(make_config(100ms));  // stall threshold 2 s
  const lease_id l = h.table.grant(1s).id;
  // Every sweep runs 150 ms late (a busy loop), well under the threshold.
  for (int i = 0; i < 20 && !h.expired(l); ++i) {
    h.now += 250ms;
    CHECK(h.sweep().stall_absorbed == 0ms);
  }
  CHECK(h.expired(l));
}

// Two server processes: the second table's key is independent of the first.
constexpr std::uint64_t kKeyA = 0x9e37'79b9'7f4a'7c15;
constexpr std::uint64_t kKeyB = 0xd1b5'4a32'd192'ed03;

TEST_CASE("a table with another id key knows none of the ids the first one handed out", "[broker]") {
  lease_config a_cfg = make_config(100ms);
  a_cfg.id_key = kKeyA;
  lease_config b_cfg = make_config(100ms);
  b_cfg.id_key = kKeyB;
  harness a(a_cfg);
  harness b(b_cfg);
  std::set<lease_id> from_a;
  for (int i = 0; i < 1000; ++i) from_a.insert(a.table.grant(10s).id);
  // Slots reused in the first table: new generations.
  for (int i = 0; i < 10; ++i) {
    const lease_id id = *from_a.begin();
    from_a.erase(from_a.begin());
    REQUIRE(a.table.revoke(id, nullptr));
    from_a.insert(a.table.grant(10s).id);
  }
  std::set<lease_id> from_b;
  for (int i = 0; i < 1000; ++i) from_b.insert(b.table.grant(10s).id);
  REQUIRE(from_a.size() == 1000);
  REQUIRE(from_b.size() == 1000);
  for (const lease_id id : from_a) {
    CHECK_FALSE(from_b.contains(id));
    CHECK_FALSE(b.table.alive(id));
    CHECK_FALSE(b.table.keepalive(id));
    CHECK_FALSE(b.table.time_to_live(id));
  }
  CHECK(b.table.size() == 1000);
}

TEST_CASE("a lease id is never 0, even when the id key equals a slab id", "[broker]") {
  lease_config cfg = make_config(100ms);
  cfg.id_key = 1;  // the first slab id: the first lease would get id 0
  harness h(cfg);
  const lease_id first = h.table.grant(10s).id;
  CHECK(first != 0);
  CHECK(h.table.keepalive(first));
  CHECK_FALSE(h.table.keepalive(0));
  CHECK_FALSE(h.table.alive(0));
  const lease_id second = h.table.grant(10s).id;
  CHECK(second != 0);
  CHECK(second != first);
  CHECK(h.table.revoke(first, nullptr));
  CHECK_FALSE(h.table.alive(first));
  CHECK(h.table.alive(second));
}

TEST_CASE("keyed lease ids work for keepalive, attachments, revoke and expiry", "[broker]") {
  lease_config cfg = make_config(100ms);
  cfg.id_key = kKeyA;
  harness h(cfg);
  const lease_id kept = h.table.grant(1s).id;
  const lease_id lost = h.table.grant(1s).id;
  const lease_id revoked = h.table.grant(1s).id;
  lease_attachment on_kept, on_lost;
  REQUIRE(h.table.attach(kept, on_kept));
  REQUIRE(h.table.attach(lost, on_lost));
  CHECK(on_lost.lease == lost);
  CHECK(h.table.revoke(revoked, nullptr));
  h.run_until(kStart + 600ms);
  REQUIRE(h.table.keepalive(kept));
  h.run_until(kStart + 1200ms);
  CHECK(h.expired(lost));
  CHECK(h.expired_with[lost] == std::set<lease_attachment*>{&on_lost});
  CHECK(unlinked(on_lost));
  CHECK_FALSE(h.expired(kept));
  CHECK(h.table.alive(kept));
  CHECK(on_kept.lease == kept);
  const auto listed = h.table.list(10);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].id == kept);
  h.table.detach(on_kept);
  CHECK(unlinked(on_kept));
}

// Unit tests for broker::offer_table on a hand-moved clock: receipts due,
// expiry, pending lists and their bounds, acks, withdrawal, eviction.

#include "broker/tables/offer_table.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace {

using switchyard::broker::offer_table;
using namespace std::chrono_literals;
using clock_type = offer_table::clock;

const clock_type::time_point t0 = clock_type::time_point{} + 1000s;

offer_table::offer make(std::uint64_t id, std::vector<std::string> keys, clock_type::time_point sent,
                        std::chrono::milliseconds expires_in, std::chrono::milliseconds receipt_timeout = 0ms,
                        std::string payload = "offer") {
  offer_table::offer o;
  o.id = id;
  o.sender = 7;
  o.sent = sent;
  o.expires = sent + expires_in;
  if (receipt_timeout.count() > 0) o.receipt_due = sent + receipt_timeout;
  for (const auto& c : payload) o.payload.push_back(static_cast<std::byte>(c));
  for (auto& k : keys) {
    offer_table::key_state s;
    s.key = k;
    s.inbox = "gw-1";
    o.keys.push_back(std::move(s));
  }
  return o;
}

std::vector<std::uint64_t> ids(const std::vector<const offer_table::offer*>& list) {
  std::vector<std::uint64_t> out;
  for (const auto* o : list) out.push_back(o->id);
  return out;
}

const auto no_key = [](offer_table::offer&, offer_table::key_state&) {};
const auto no_offer = [](offer_table::offer&) {};

}  // namespace

TEST_CASE("an offer is pending for each of its keys until it expires", "[broker][offers]") {
  offer_table t({});
  t.add(make(1, {"user:a", "user:b"}, t0, 15s));
  CHECK(ids(t.pending("user:a", t0, 0)) == std::vector<std::uint64_t>{1});
  CHECK(ids(t.pending("user:b", t0 + 14s, 0)) == std::vector<std::uint64_t>{1});
  CHECK(t.pending("user:a", t0 + 15s, 0).empty());  // expired, not swept yet: not listed
  std::vector<std::uint64_t> expired;
  t.sweep(t0 + 15s, no_key, [&](offer_table::offer& o) { expired.push_back(o.id); });
  CHECK(expired == std::vector<std::uint64_t>{1});
  CHECK(t.size() == 0);
  CHECK(t.pending_entries() == 0);
  CHECK(t.bytes() == 0);
}

TEST_CASE("a receipt timeout fires once per unacknowledged key at its deadline", "[broker][offers]") {
  offer_table t({});
  t.add(make(1, {"user:a", "user:b"}, t0, 15s, 2s));
  REQUIRE(t.next_deadline() == t0 + 2s);
  std::size_t acked = t.ack(1, "user:a", {}, no_key);
  CHECK(acked == 1);
  std::vector<std::string> timed_out;
  const auto on_timeout = [&](offer_table::offer&, offer_table::key_state& k) { timed_out.push_back(k.key); };
  t.sweep(t0 + 1999ms, on_timeout, no_offer);
  CHECK(timed_out.empty());
  t.sweep(t0 + 2s, on_timeout, no_offer);
  CHECK(timed_out == std::vector<std::string>{"user:b"});
  t.sweep(t0 + 3s, on_timeout, no_offer);
  CHECK(timed_out.size() == 1);
  CHECK(t.next_deadline() == t0 + 15s);
  // Still pending for the key not acked; no longer for the acked one.
  CHECK(ids(t.pending("user:b", t0 + 3s, 0)) == std::vector<std::uint64_t>{1});
  CHECK(t.pending("user:a", t0 + 3s, 0).empty());
}

TEST_CASE("an ack without a key acknowledges the keys delivered into the given inboxes", "[broker][offers]") {
  offer_table t({});
  auto o = make(1, {"user:a", "user:b", "user:c"}, t0, 15s);
  o.keys[2].inbox = "gw-2";
  t.add(std::move(o));
  const std::vector<std::string> mine{"gw-1"};
  std::vector<std::string> keys;
  CHECK(t.ack(1, "", mine, [&](offer_table::offer&, offer_table::key_state& k) { keys.push_back(k.key); }) == 2);
  CHECK(keys == std::vector<std::string>{"user:a", "user:b"});
  CHECK(t.ack(1, "", mine, no_key) == 0);  // nothing left there
  CHECK(t.ack(1, "user:c", {}, no_key) == 1);
  CHECK(t.ack(2, "user:a", {}, no_key) == 0);  // unknown offer
}

TEST_CASE("pending lists are oldest first and a full one pushes its oldest out", "[broker][offers]") {
  offer_table::limits l;
  l.max_pending_per_key = 2;
  offer_table t(l);
  t.add(make(1, {"user:a"}, t0, 60s));
  t.add(make(2, {"user:a"}, t0 + 1s, 60s));
  t.add(make(3, {"user:a", "user:b"}, t0 + 2s, 60s));
  CHECK(ids(t.pending("user:a", t0 + 3s, 0)) == std::vector<std::uint64_t>{2, 3});
  CHECK(ids(t.pending("user:a", t0 + 3s, 1)) == std::vector<std::uint64_t>{2});
  CHECK(t.pending_pushed_out() == 1);
  CHECK(t.size() == 3);  // offer 1 stays live (acks, withdrawal)
  CHECK(t.pending_entries() == 3);
}

TEST_CASE("removing an offer takes it off every pending list", "[broker][offers]") {
  offer_table t({});
  t.add(make(1, {"user:a", "user:b"}, t0, 60s));
  t.add(make(2, {"user:a"}, t0, 60s));
  const auto removed = t.remove(1);
  REQUIRE(removed);
  CHECK(removed->keys.size() == 2);
  CHECK(ids(t.pending("user:a", t0, 0)) == std::vector<std::uint64_t>{2});
  CHECK(t.pending("user:b", t0, 0).empty());
  CHECK_FALSE(t.remove(1));
  // Its stale deadlines do nothing when they come.
  std::size_t expired = 0;
  t.sweep(t0 + 61s, no_key, [&](offer_table::offer&) { ++expired; });
  CHECK(expired == 1);
}

TEST_CASE("past max offers or max bytes the oldest offers are forgotten, never the new one", "[broker][offers]") {
  offer_table::limits l;
  l.max_offers = 2;
  offer_table t(l);
  t.add(make(1, {"user:a"}, t0, 60s));
  t.add(make(2, {"user:a"}, t0, 60s));
  t.add(make(3, {"user:a"}, t0, 60s));
  CHECK_FALSE(t.contains(1));
  CHECK(t.contains(2));
  CHECK(t.contains(3));
  CHECK(t.evicted() == 1);

  offer_table::limits b;
  const auto one = make(9, {"user:a"}, t0, 60s, 0ms, std::string(1000, 'x')).bytes();
  // Two such offers and user:a's pending list of two.
  b.max_bytes = one * 2 + offer_table::pending_list_overhead + 6 + 2 * offer_table::pending_entry_bytes;
  offer_table small(b);
  small.add(make(1, {"user:a"}, t0, 60s, 0ms, std::string(1000, 'x')));
  small.add(make(2, {"user:a"}, t0, 60s, 0ms, std::string(1000, 'x')));
  CHECK(small.size() == 2);
  small.add(make(3, {"user:a"}, t0, 60s, 0ms, std::string(1000, 'x')));
  CHECK(small.size() == 2);
  CHECK_FALSE(small.contains(1));
  CHECK(small.bytes() <= b.max_bytes);
  // One offer larger than the bound alone stays (the send was taken).
  small.add(make(4, {"user:a"}, t0, 60s, 0ms, std::string(5000, 'x')));
  CHECK(small.contains(4));
  CHECK(small.size() == 1);
}

TEST_CASE("an offer's memory is its payload, keys and a fixed cost", "[broker][offers]") {
  const auto o = make(1, {"user:a"}, t0, 60s, 0ms, std::string(100, 'x'));
  CHECK(o.bytes() == offer_table::offer_overhead + 100 + offer_table::key_overhead + 6 + 4);
}

TEST_CASE("the pending lists of an offer's keys count towards the table's bytes and go with them", "[broker][offers]") {
  offer_table t({});
  const auto one = make(1, {"user:a", "user:bb"}, t0, 60s).bytes();
  const auto two = make(2, {"user:a"}, t0, 60s).bytes();
  t.add(make(1, {"user:a", "user:bb"}, t0, 60s));
  const std::size_t lists = 2 * offer_table::pending_list_overhead + 6 + 7;
  CHECK(t.bytes() == one + lists + 2 * offer_table::pending_entry_bytes);
  t.add(make(2, {"user:a"}, t0, 60s));  // user:a's list gets a second id
  CHECK(t.bytes() == one + two + lists + 3 * offer_table::pending_entry_bytes);
  REQUIRE(t.remove(1));  // user:bb's list goes with it
  CHECK(t.bytes() == two + offer_table::pending_list_overhead + 6 + offer_table::pending_entry_bytes);
  REQUIRE(t.remove(2));
  CHECK(t.bytes() == 0);
}

// chaos::check against histories with one planted violation each (and one
// with none), and the history's JSON lines read back.

#include "chaos/checker.hpp"
#include "chaos/history.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

using switchyard::chaos::check;
using switchyard::chaos::event;
using switchyard::chaos::event_type;

namespace {

event append(const std::string& payload, std::uint64_t seq, std::uint64_t epoch = 7,
             const std::string& outcome = "ok") {
  event e;
  e.type = event_type::append;
  e.proc = "appender-0";
  e.stream = "s";
  e.payload = payload;
  e.outcome = outcome;
  e.seq = outcome == "ok" ? seq : 0;
  e.epoch = outcome == "ok" ? epoch : 0;
  return e;
}

event read(std::vector<std::pair<std::uint64_t, std::string>> records, std::uint64_t epoch = 7) {
  event e;
  e.type = event_type::read;
  e.stream = "s";
  e.outcome = "ok";
  e.epoch = epoch;
  e.records = std::move(records);
  return e;
}

event route(const std::string& user, const std::string& gateway) {
  event e;
  e.type = event_type::route;
  e.user = user;
  e.gateway = gateway;
  return e;
}

event send(const std::string& id, const std::string& user, std::int64_t t_us, const std::string& gateway = "") {
  event e;
  e.type = event_type::send;
  e.t_us = t_us;
  e.payload = id;
  e.user = user;
  e.outcome = gateway.empty() ? "no_route" : "ok";
  e.gateway = gateway;
  return e;
}

event deliver(const std::string& id, const std::string& user, const std::string& gateway, std::int64_t t_us) {
  event e;
  e.type = event_type::deliver;
  e.t_us = t_us;
  e.payload = id;
  e.user = user;
  e.gateway = gateway;
  return e;
}

event probe(const std::string& user, const std::string& gateway, const std::string& id) {
  event e = send(id, user, 0, gateway);
  e.type = event_type::probe;
  return e;
}

event channel_event(event_type type, const std::string& proc, const std::string& channel, const std::string& id = "") {
  event e;
  e.type = type;
  e.proc = proc;
  e.channel = channel;
  e.payload = id;
  return e;
}

// A run that kept every promise: two appends read back, a send delivered,
// both users probed, a publish received, each node's probe publish received.
std::vector<event> clean_history() {
  return {route("u1", "gw-1"),
          route("u2", "gw-2"),
          append("a-1", 1),
          append("a-2", 2),
          append("a-3", 0, 0, "outcome_unknown"),
          send("s-1", "u1", 100, "gw-1"),
          deliver("s-1", "u1", "gw-1", 150),
          read({{1, "a-1"}, {2, "a-2"}, {3, "a-3"}}),
          probe("u1", "gw-1", "p-1"),
          deliver("p-1", "u1", "gw-1", 200),
          probe("u2", "gw-2", "p-2"),
          deliver("p-2", "u2", "gw-2", 210),
          channel_event(event_type::subscribe, "sub-0", "n.*"),
          channel_event(event_type::publish, "pub-0", "n.x", "b-1"),
          channel_event(event_type::receive, "sub-0", "n.x", "b-1"),
          channel_event(event_type::publish, "prober-a", "n.probe", "q-a-0"),
          channel_event(event_type::publish, "prober-b", "n.probe", "q-b-0"),
          channel_event(event_type::receive, "sub-0", "n.probe", "q-a-0"),
          channel_event(event_type::receive, "sub-0", "n.probe", "q-b-0")};
}

bool reports(const switchyard::chaos::check_report& r, const std::string& property) {
  return std::any_of(r.violations.begin(), r.violations.end(), [&](const auto& v) { return v.property == property; });
}

}  // namespace

TEST_CASE("a history that kept every promise has no violation") {
  const auto r = check(clean_history());
  CHECK(r.ok());
  CHECK(r.deliveries == 3);
  CHECK(r.appends == 3);
  CHECK(r.appends_acked == 2);
  CHECK(r.appends_unknown == 1);
  CHECK(r.records_read == 3);
  CHECK(r.users_routable == 2);
  CHECK(r.publishes == 3);
  CHECK(r.receipts == 3);
  CHECK(r.subscribers == 1);
}

TEST_CASE("an acknowledged append missing from its stream's final read is reported") {
  auto h = clean_history();
  h.push_back(append("a-4", 4));
  const auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "acked-append-present");
  CHECK(r.violations[0].detail.find("a-4") != std::string::npos);
}

TEST_CASE("an acknowledged append whose stream is at another epoch now is reported as lost") {
  auto h = clean_history();
  h.push_back(read({{1, "a-1"}}, 8));  // the last read counts
  const auto r = check(h);
  CHECK(reports(r, "acked-append-present"));
}

TEST_CASE("a stream with acknowledged appends that was never read, or whose read failed, is reported") {
  auto h = clean_history();
  std::erase_if(h, [](const event& e) { return e.type == event_type::read; });
  CHECK(reports(check(h), "acked-append-present"));
  auto failed = read({});
  failed.outcome = "unavailable";
  h.push_back(failed);
  CHECK(reports(check(h), "acked-append-present"));
}

TEST_CASE("a read whose sequences skip or repeat is reported") {
  auto h = clean_history();
  h.push_back(read({{1, "a-1"}, {2, "a-2"}, {4, "a-3"}}));
  CHECK(reports(check(h), "sequence-gap-free"));
  h.push_back(read({{1, "a-1"}, {2, "a-2"}, {2, "a-3"}}));
  CHECK(reports(check(h), "sequence-gap-free"));
}

TEST_CASE("two payloads at one slot, one payload at two slots, and a payload nothing appended are reported") {
  auto two_at_one = clean_history();
  two_at_one.push_back(read({{1, "a-1"}, {2, "a-3"}, {3, "a-2"}}));
  CHECK(reports(check(two_at_one), "one-payload-per-slot"));

  auto one_at_two = clean_history();
  one_at_two.push_back(read({{1, "a-1"}, {2, "a-2"}, {3, "a-2"}}));
  CHECK(reports(check(one_at_two), "one-payload-per-slot"));

  auto invented = clean_history();
  invented.push_back(read({{1, "a-1"}, {2, "a-2"}, {3, "zz"}}));
  CHECK(reports(check(invented), "one-payload-per-slot"));
}

TEST_CASE("a message delivered twice is reported") {
  auto h = clean_history();
  h.push_back(deliver("s-1", "u1", "gw-1", 160));
  const auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "delivered-at-most-once");
}

TEST_CASE("a delivery for another user, at a gateway that never held the user, or of nothing sent is reported") {
  auto other_user = clean_history();
  other_user.push_back(send("s-2", "u1", 200));
  other_user.push_back(deliver("s-2", "u2", "gw-2", 250));
  CHECK(reports(check(other_user), "delivered-to-addressee"));

  auto other_gateway = clean_history();
  other_gateway.push_back(send("s-2", "u1", 200));
  other_gateway.push_back(deliver("s-2", "u1", "gw-2", 250));
  CHECK(reports(check(other_gateway), "delivered-to-addressee"));

  auto unsent = clean_history();
  unsent.push_back(deliver("s-9", "u1", "gw-1", 250));
  CHECK(reports(check(unsent), "delivered-to-addressee"));
}

TEST_CASE(
    "a send made after an abandoned gateway's lease lapsed and delivered there is reported, one made before is not") {
  auto h = clean_history();
  event abandon;
  abandon.type = event_type::abandon;
  abandon.t_us = 1'000'000;
  abandon.gateway = "gw-2";
  abandon.ttl_ms = 2000;
  abandon.sweep_ms = 100;
  h.push_back(abandon);
  // Lapsed by 1 s + 2 s + 0.1 s + 1 s slack = 4.1 s.
  h.push_back(send("s-early", "u2", 4'000'000));
  h.push_back(deliver("s-early", "u2", "gw-2", 4'100'000));
  CHECK(check(h).ok());
  h.push_back(send("s-late", "u2", 4'200'000));
  h.push_back(deliver("s-late", "u2", "gw-2", 4'300'000));
  const auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "no-delivery-after-expiry");
  CHECK(r.violations[0].detail.find("s-late") != std::string::npos);
}

TEST_CASE("a live user no probe reached is reported, and an abandoned gateway's users are not asked for") {
  auto h = clean_history();
  std::erase_if(h, [](const event& e) { return e.payload == "p-2"; });  // u2's probe and its delivery
  auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "routable-after-faults");
  CHECK(r.violations[0].detail.find("u2") != std::string::npos);

  event abandon;
  abandon.type = event_type::abandon;
  abandon.gateway = "gw-2";
  h.push_back(abandon);
  r = check(h);
  CHECK(r.ok());
  CHECK(r.users_probed == 1);
}

TEST_CASE("a probe answered by another gateway does not count as reaching the user") {
  auto h = clean_history();
  std::erase_if(h, [](const event& e) { return e.payload == "p-2"; });  // u2's probe and its delivery
  h.push_back(probe("u2", "gw-1", "p-3"));
  CHECK(reports(check(h), "routable-after-faults"));
}

TEST_CASE("a history written as JSON lines reads back the same, and a malformed line is named") {
  switchyard::test::temp_dir dir("switchyard-chaos-history");
  const auto file = dir.path() / "history.jsonl";
  {
    switchyard::chaos::history_recorder recorder(file);
    for (auto e : clean_history()) recorder.record(std::move(e));
  }
  const auto back = switchyard::chaos::read_history(file);
  REQUIRE(back.has_value());
  REQUIRE(back->size() == clean_history().size());
  CHECK(check(*back).ok());
  const auto& r = back->at(7);  // the read
  CHECK(r.type == event_type::read);
  CHECK(r.records == std::vector<std::pair<std::uint64_t, std::string>>{{1, "a-1"}, {2, "a-2"}, {3, "a-3"}});

  std::ofstream(file, std::ios::app) << "{\"type\":\"nonsense\"}\n";
  const auto bad = switchyard::chaos::read_history(file);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find(":20: unknown type") != std::string::npos);
}

TEST_CASE("a publish one subscriber received twice is reported") {
  auto h = clean_history();
  h.push_back(channel_event(event_type::receive, "sub-0", "n.x", "b-1"));
  const auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "delivered-at-most-once");
}

TEST_CASE("a message received on a channel it was not published on, or never published, is reported") {
  auto other_channel = clean_history();
  other_channel.push_back(channel_event(event_type::receive, "sub-1", "n.y", "b-1"));
  CHECK(reports(check(other_channel), "delivered-to-addressee"));

  auto invented = clean_history();
  invented.push_back(channel_event(event_type::receive, "sub-0", "n.x", "b-9"));
  CHECK(reports(check(invented), "delivered-to-addressee"));
}

TEST_CASE("a subscriber that received no probe from some node after the faults is reported") {
  auto h = clean_history();
  std::erase_if(h, [](const event& e) { return e.type == event_type::receive && e.payload == "q-b-0"; });
  auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "subscribed-after-faults");
  CHECK(r.violations[0].detail.find("prober-b") != std::string::npos);

  std::erase_if(h, [](const event& e) { return e.proc.starts_with("prober-") || e.payload.starts_with("q-"); });
  CHECK(reports(check(h), "subscribed-after-faults"));
}

TEST_CASE("a payload whose append was refused but is in the log is reported, one with an unknown outcome is not") {
  auto h = clean_history();
  h.push_back(append("a-4", 0, 0, "unavailable"));
  h.push_back(read({{1, "a-1"}, {2, "a-2"}, {3, "a-3"}, {4, "a-4"}}));
  const auto r = check(h);
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].property == "refused-append-absent");
  CHECK(r.violations[0].detail.find("unavailable") != std::string::npos);
}

TEST_CASE("a probe the node routed to the right gateway but that never arrived does not count as reaching the user") {
  auto h = clean_history();
  std::erase_if(h, [](const event& e) { return e.payload == "p-2"; });  // u2's probe and its delivery
  h.push_back(probe("u2", "gw-2", "p-3"));                              // routed, not delivered
  CHECK(reports(check(h), "routable-after-faults"));
  h.push_back(deliver("p-3", "u2", "gw-2", 500));
  CHECK(check(h).ok());
}

TEST_CASE("a failed read of a stream no append was acknowledged to is not a violation") {
  auto h = clean_history();
  auto absent = read({});
  absent.stream = "empty";
  absent.outcome = "not_found";
  h.push_back(absent);
  CHECK(check(h).ok());
}

namespace {

event offer_event(event_type type, const std::string& id, const std::string& user, const std::string& gateway,
                  const std::string& outcome = "") {
  event e;
  e.type = type;
  e.proc = type == event_type::offer_ack ? gateway : "offerer-0";
  e.payload = id;
  e.user = user;
  e.gateway = gateway;
  e.outcome = outcome;
  return e;
}

// The clean history with an offer to u1 delivered at gw-1, acked there,
// and its acked receipt; and one to u2, never acked, timed out.
std::vector<event> offers_history() {
  auto h = clean_history();
  auto o1 = send("o0-0", "u1", 300, "gw-1");
  o1.proc = "offerer-0";
  auto o2 = send("o0-1", "u2", 310, "gw-2");
  o2.proc = "offerer-0";
  h.push_back(o1);
  h.push_back(deliver("o0-0", "u1", "gw-1", 320));
  h.push_back(offer_event(event_type::offer_ack, "o0-0", "u1", "gw-1"));
  h.push_back(offer_event(event_type::offer_receipt, "o0-0", "u1", "gw-1", "acked"));
  h.push_back(o2);
  h.push_back(deliver("o0-1", "u2", "gw-2", 330));
  h.push_back(offer_event(event_type::offer_receipt, "o0-1", "u2", "gw-2", "timeout"));
  return h;
}

}  // namespace

TEST_CASE("offers acked by their gateway with one receipt per key have no violation") {
  const auto r = check(offers_history());
  CHECK(r.ok());
  CHECK(r.offers == 2);
  CHECK(r.offer_acks == 1);
  CHECK(r.offer_receipts == 2);
}

TEST_CASE("a second receipt of one outcome for an offer's key, or a timeout after its acked one, is reported") {
  auto twice = offers_history();
  twice.push_back(offer_event(event_type::offer_receipt, "o0-1", "u2", "gw-2", "timeout"));
  CHECK(reports(check(twice), "receipt-once"));
  auto timeout_after_ack = offers_history();
  timeout_after_ack.push_back(offer_event(event_type::offer_receipt, "o0-0", "u1", "gw-1", "timeout"));
  CHECK(reports(check(timeout_after_ack), "receipt-once"));
}

TEST_CASE("an ack that comes after its key's timeout receipt gives an acked one too, which is no violation") {
  auto h = offers_history();
  h.push_back(offer_event(event_type::offer_ack, "o0-1", "u2", "gw-2"));
  h.push_back(offer_event(event_type::offer_receipt, "o0-1", "u2", "gw-2", "acked"));
  CHECK(check(h).ok());
}

TEST_CASE("an acked receipt for a key no gateway acked, or naming another gateway, is reported") {
  auto unacked = offers_history();
  std::erase_if(unacked, [](const event& e) { return e.type == event_type::offer_ack; });
  CHECK(reports(check(unacked), "acked-receipt-was-acked"));
  auto elsewhere = offers_history();
  for (auto& e : elsewhere)
    if (e.type == event_type::offer_receipt && e.outcome == "acked") e.gateway = "gw-2";
  CHECK(reports(check(elsewhere), "acked-receipt-was-acked"));
}

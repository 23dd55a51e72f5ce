// channel_interest: which patterns the other nodes are told of, and when a
// Subscribe waiting for their acks is answered.

#include "broker/cluster/channel_interest.hpp"

#include <catch2/catch.hpp>

using switchyard::broker::channel_interest;
using clock_type = channel_interest::clock;

namespace {
const std::vector<std::string> two_peers{"b", "c"};
const clock_type::time_point t0{std::chrono::seconds(100)};
const auto later = t0 + std::chrono::seconds(1);

// The delta taken with `ticket`, as (added, removed).
std::pair<std::vector<std::string>, std::vector<std::string>> delta(channel_interest& i, std::uint64_t ticket) {
  std::vector<std::string> add, remove;
  i.take_delta(ticket, add, remove);
  std::sort(add.begin(), add.end());
  std::sort(remove.begin(), remove.end());
  return {add, remove};
}
}  // namespace

TEST_CASE("a pattern's first local subscriber is announced and its last one withdrawn", "[cluster]") {
  channel_interest i;
  CHECK(i.add_local("orders.*", two_peers, later));
  CHECK_FALSE(i.add_local("orders.*", two_peers, later));  // a second connection
  CHECK(delta(i, 1).first == std::vector<std::string>{"orders.*"});
  std::vector<channel_interest::waiter> done;
  CHECK_FALSE(i.remove_local("orders.*", done));
  CHECK(delta(i, 2).second.empty());
  CHECK(i.remove_local("orders.*", done));
  CHECK(delta(i, 3).second == std::vector<std::string>{"orders.*"});
  CHECK(i.size() == 0);
}

TEST_CASE("a pattern withdrawn and back within one turn is not announced again", "[cluster]") {
  channel_interest i;
  i.add_local("a", two_peers, later);
  delta(i, 1);
  std::vector<channel_interest::waiter> done;
  i.remove_local("a", done);
  i.add_local("a", two_peers, later);
  const auto [add, remove] = delta(i, 2);
  CHECK(add.empty());
  CHECK(remove.empty());
}

TEST_CASE("a Subscribe is answered once every peer acked the announcement of its pattern", "[cluster]") {
  channel_interest i;
  i.add_local("a", two_peers, later);
  REQUIRE(i.wait("a", {{}, 7}));
  delta(i, 5);
  std::vector<channel_interest::waiter> done;
  i.acked("b", 5, false, done);
  CHECK(done.empty());
  i.acked("c", 4, false, done);  // an older ticket
  CHECK(done.empty());
  i.acked("c", 5, false, done);
  REQUIRE(done.size() == 1);
  CHECK(done[0].request_id == 7);
  CHECK_FALSE(i.wait("a", {{}, 8}));  // confirmed: answer at once
}

TEST_CASE("an ack of an announcement not yet sent confirms nothing", "[cluster]") {
  channel_interest i;
  i.add_local("a", {"b"}, later);
  REQUIRE(i.wait("a", {{}, 1}));
  std::vector<channel_interest::waiter> done;
  i.acked("b", 9, true, done);  // a sync sent before the delta went out
  CHECK(done.empty());
  delta(i, 10);
  i.acked("b", 10, false, done);
  CHECK(done.size() == 1);
}

TEST_CASE("an InterestSync's ack confirms every announcement sent before it", "[cluster]") {
  channel_interest i;
  i.add_local("a", {"b"}, later);
  i.wait("a", {{}, 1});
  delta(i, 3);
  i.add_local("x", {"b"}, later);
  i.wait("x", {{}, 2});
  delta(i, 4);
  std::vector<channel_interest::waiter> done;
  i.acked("b", 3, true, done);  // a sync with ticket 3: covers "a", not "x"
  REQUIRE(done.size() == 1);
  CHECK(done[0].request_id == 1);
  i.acked("b", 6, true, done);
  CHECK(done.size() == 2);
  CHECK(i.unconfirmed() == 0);
}

TEST_CASE("a peer that leaves holds no Subscribe back", "[cluster]") {
  channel_interest i;
  i.add_local("a", two_peers, later);
  i.wait("a", {{}, 1});
  delta(i, 1);
  std::vector<channel_interest::waiter> done;
  i.acked("b", 1, false, done);
  i.node_gone("c", done);
  CHECK(done.size() == 1);
}

TEST_CASE("an announcement past its deadline answers its waiters and names the silent peers", "[cluster]") {
  channel_interest i;
  i.add_local("a", two_peers, later);
  i.wait("a", {{}, 1});
  delta(i, 1);
  std::vector<channel_interest::waiter> done;
  i.acked("b", 1, false, done);
  REQUIRE(i.next_deadline() == later);
  std::vector<std::string> silent;
  i.expire(later - std::chrono::milliseconds(1), done, silent);
  CHECK(done.empty());
  i.expire(later, done, silent);
  CHECK(done.size() == 1);
  CHECK(silent == std::vector<std::string>{"c"});
  CHECK_FALSE(i.next_deadline());
}

TEST_CASE("without peers a Subscribe is answered at once", "[cluster]") {
  channel_interest i;
  i.add_local("a", {}, later);
  CHECK_FALSE(i.wait("a", {{}, 1}));
  CHECK(delta(i, 1).first == std::vector<std::string>{"a"});
}

TEST_CASE("a pattern gone before its announcement went out releases its waiters and is never announced", "[cluster]") {
  channel_interest i;
  i.add_local("a", two_peers, later);
  REQUIRE(i.wait("a", {{}, 5}));
  std::vector<channel_interest::waiter> done;
  CHECK(i.remove_local("a", done));
  REQUIRE(done.size() == 1);
  CHECK(done[0].request_id == 5);
  CHECK(i.unconfirmed() == 0);
  const auto [add, remove] = delta(i, 1);
  CHECK(add.empty());
  CHECK(remove.empty());
}

TEST_CASE("a node that joins while an announcement waits is waited for too", "[cluster]") {
  channel_interest i;
  i.add_local("a", {"b"}, later);
  i.wait("a", {{}, 1});
  delta(i, 1);
  i.node_added("c");
  std::vector<channel_interest::waiter> done;
  i.acked("b", 1, false, done);
  CHECK(done.empty());
  i.acked("c", 2, true, done);  // its first sync, sent after the announcement
  CHECK(done.size() == 1);
}

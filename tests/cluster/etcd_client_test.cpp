// cluster::etcd_client against real etcd processes (tests/support/etcd_process.hpp).

#include "cluster/etcd_client.hpp"
#include "cluster/errc.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using switchyard::cluster::errc;
using switchyard::cluster::etcd_client;
using switchyard::cluster::event_type;
using switchyard::cluster::watch_event;
using switchyard::test::etcd_cluster;

namespace {

constexpr auto call_timeout = 2s;

// A TCP listener that never accepts: connections complete in the kernel's
// backlog and nothing ever answers (an etcd that hangs).
struct silent_endpoint {
  switchyard::asio::io_context io;
  switchyard::asio::ip::tcp::acceptor acceptor{
      io, switchyard::asio::ip::tcp::endpoint(switchyard::asio::ip::make_address("127.0.0.1"), 0)};
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()); }
};

// An HTTP endpoint that answers every request with a 200 header of a
// chunked body and then nothing, keeping the connection open (etcd's gateway
// seen from a restarting member: a watch stream that is never created).
struct header_only_endpoint {
  switchyard::asio::io_context io;
  switchyard::asio::ip::tcp::acceptor acceptor{
      io, switchyard::asio::ip::tcp::endpoint(switchyard::asio::ip::make_address("127.0.0.1"), 0)};
  std::vector<std::unique_ptr<switchyard::asio::ip::tcp::socket>> held;
  std::array<char, 4096> scratch{};
  std::thread thread;
  header_only_endpoint() {
    accept();
    thread = std::thread([this] { io.run(); });
  }
  ~header_only_endpoint() {
    io.stop();
    thread.join();
  }
  void accept() {
    acceptor.async_accept([this](switchyard::asio_error_code ec, switchyard::asio::ip::tcp::socket s) {
      if (ec) return;
      auto& socket = *held.emplace_back(std::make_unique<switchyard::asio::ip::tcp::socket>(std::move(s)));
      socket.async_read_some(switchyard::asio::buffer(scratch), [&socket](switchyard::asio_error_code ec, std::size_t) {
        if (ec) return;
        static const std::string header =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        switchyard::asio_error_code ignored;
        switchyard::asio::write(socket, switchyard::asio::buffer(header), ignored);
      });
      accept();
    });
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()); }
};

std::string dead_endpoint() { return "127.0.0.1:" + std::to_string(switchyard::test::free_port()); }

struct seen_event {
  event_type type;
  std::string key;
  std::string value;
  std::int64_t mod_revision;
  bool operator==(const seen_event&) const = default;
};

}  // namespace

TEST_CASE("a put value is read back with its revisions, and a deleted key is gone") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto first = client.put("k", "v1");
  REQUIRE(first.has_value());
  const auto second = client.put("k", "v2");
  REQUIRE(second.has_value());
  CHECK(*second == *first + 1);
  const auto got = client.get("k");
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->key == "k");
  CHECK((*got)->value == "v2");
  CHECK((*got)->create_revision == *first);
  CHECK((*got)->mod_revision == *second);
  CHECK((*got)->version == 2);
  CHECK((*got)->lease == 0);
  CHECK(client.delete_key("k") == 1);
  CHECK(client.delete_key("k") == 0);
  const auto gone = client.get("k");
  REQUIRE(gone.has_value());
  CHECK_FALSE(gone->has_value());
}

TEST_CASE("keys and values are bytes, NUL and 0xff included") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const std::string key("a\0\xff", 3);
  const std::string value("\0\x01\xfe\xff\n\"", 6);
  REQUIRE(client.put(key, value).has_value());
  const auto got = client.get(key);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->key == key);
  CHECK((*got)->value == value);
  REQUIRE(client.put("empty", "").has_value());
  CHECK(client.get("empty")->value().value.empty());
}

TEST_CASE("an empty key is refused without asking etcd") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  CHECK(client.put("", "v").error() == errc::invalid_argument);
  CHECK(client.get("").error() == errc::invalid_argument);
  CHECK(client.delete_prefix("").error() == errc::invalid_argument);
}

TEST_CASE("range_prefix returns the keys under the prefix in order, with the revision read at") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  REQUIRE(client.put("p/b", "2").has_value());
  REQUIRE(client.put("p/a", "1").has_value());
  REQUIRE(client.put("p0", "outside").has_value());
  REQUIRE(client.put("o", "outside").has_value());
  const auto last = client.put("q", "outside");
  REQUIRE(last.has_value());
  const auto r = client.range_prefix("p/");
  REQUIRE(r.has_value());
  REQUIRE(r->kvs.size() == 2);
  CHECK(r->kvs[0].key == "p/a");
  CHECK(r->kvs[0].value == "1");
  CHECK(r->kvs[1].key == "p/b");
  CHECK(r->revision == *last);
  const auto all = client.range_prefix("");
  REQUIRE(all.has_value());
  CHECK(all->kvs.size() == 5);
  const auto none = client.range_prefix("zzz");
  REQUIRE(none.has_value());
  CHECK(none->kvs.empty());
}

TEST_CASE("delete_prefix deletes the keys under the prefix only") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  for (const char* key : {"d/1", "d/2", "d/3", "d0", "e"}) REQUIRE(client.put(key, "x").has_value());
  CHECK(client.delete_prefix("d/") == 3);
  const auto left = client.range_prefix("");
  REQUIRE(left.has_value());
  REQUIRE(left->kvs.size() == 2);
  CHECK(left->kvs[0].key == "d0");
  CHECK(left->kvs[1].key == "e");
}

TEST_CASE("a key put with a lease disappears when the lease expires") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto lease = client.grant_lease(1s);
  REQUIRE(lease.has_value());
  CHECK(*lease != 0);
  REQUIRE(client.put("owned", "me", *lease).has_value());
  const auto got = client.get("owned");
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->lease == *lease);
  // etcd checks for expired leases every 500 ms: gone within about 1.5 s.
  CHECK(switchyard::test::wait_until(
      [&] {
        const auto g = client.get("owned");
        return g.has_value() && !g->has_value();
      },
      5s));
  CHECK(client.keep_alive(*lease).error() == errc::lease_not_found);
}

TEST_CASE("keep_alive renews a lease, which then outlives its first TTL") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto lease = client.grant_lease(2s);
  REQUIRE(lease.has_value());
  REQUIRE(client.put("kept", "1", *lease).has_value());
  // 3 s in all: longer than the TTL; renewed every 500 ms.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(500ms);
    const auto ttl = client.keep_alive(*lease);
    REQUIRE(ttl.has_value());
    CHECK(*ttl == 2);
  }
  CHECK(client.get("kept")->has_value());
}

TEST_CASE("keep_alive of a revoked lease reports lease_not_found, and revoking deletes its keys") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto lease = client.grant_lease(30s);
  REQUIRE(lease.has_value());
  REQUIRE(client.put("a", "1", *lease).has_value());
  REQUIRE(client.put("b", "2", *lease).has_value());
  REQUIRE(client.revoke_lease(*lease).has_value());
  CHECK(client.keep_alive(*lease).error() == errc::lease_not_found);
  CHECK(client.revoke_lease(*lease).error() == errc::lease_not_found);
  CHECK(client.range_prefix("")->kvs.empty());
}

TEST_CASE("a put with a lease that does not exist reports lease_not_found") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  CHECK(client.put("k", "v", 12345).error() == errc::lease_not_found);
  CHECK(client.keep_alive(12345).error() == errc::lease_not_found);
}

TEST_CASE("create_if_absent succeeds once and then reports the holder") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto lease = client.grant_lease(30s);
  REQUIRE(lease.has_value());
  const auto first = client.create_if_absent("owner/p1", "node-a", *lease);
  REQUIRE(first.has_value());
  CHECK(first->succeeded);
  CHECK_FALSE(first->current.has_value());
  const auto second = client.create_if_absent("owner/p1", "node-b");
  REQUIRE(second.has_value());
  CHECK_FALSE(second->succeeded);
  REQUIRE(second->current.has_value());
  CHECK(second->current->value == "node-a");
  CHECK(second->current->lease == *lease);
  CHECK(second->current->mod_revision == first->revision);
  CHECK(client.get("owner/p1")->value().value == "node-a");
  // Once the holder's lease is gone, the key is free again.
  REQUIRE(client.revoke_lease(*lease).has_value());
  const auto third = client.create_if_absent("owner/p1", "node-b");
  REQUIRE(third.has_value());
  CHECK(third->succeeded);
}

TEST_CASE("put_if_mod_revision refuses a stale revision") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto created = client.create_if_absent("fence", "epoch-1");
  REQUIRE(created.has_value());
  REQUIRE(created->succeeded);
  // The holder writes with the revision of its last write.
  const auto next = client.put_if_mod_revision("fence", "epoch-2", 0, created->revision);
  REQUIRE(next.has_value());
  CHECK(next->succeeded);
  CHECK(next->revision > created->revision);
  // A writer still holding the first revision is fenced off.
  const auto stale = client.put_if_mod_revision("fence", "stale", 0, created->revision);
  REQUIRE(stale.has_value());
  CHECK_FALSE(stale->succeeded);
  REQUIRE(stale->current.has_value());
  CHECK(stale->current->value == "epoch-2");
  CHECK(stale->current->mod_revision == next->revision);
  CHECK(client.get("fence")->value().value == "epoch-2");
  // An absent key has no revision to match.
  const auto absent = client.put_if_mod_revision("nothing", "x", 0, created->revision);
  REQUIRE(absent.has_value());
  CHECK_FALSE(absent->succeeded);
  CHECK_FALSE(absent->current.has_value());
}

TEST_CASE("a transaction runs the branch its compares choose and returns that branch's ranges") {
  using switchyard::cluster::txn_compare;
  using switchyard::cluster::txn_op;
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  REQUIRE(client.put("t/a", "1").has_value());
  REQUIRE(client.put("t/b", "2").has_value());
  const std::vector<txn_compare> holds = {txn_compare::value_is("t/a", "1"),
                                          {"t/b", txn_compare::target::version, txn_compare::op::equal, 1, {}}};
  const std::vector<txn_op> success = {txn_op::remove("t/a"), txn_op::put("t/c", "3"), txn_op::range_prefix("t/")};
  const std::vector<txn_op> failure = {txn_op::range("t/a")};
  const auto ran = client.txn(holds, success, failure);
  REQUIRE(ran.has_value());
  CHECK(ran->succeeded);
  REQUIRE(ran->ranges.size() == 1);
  REQUIRE(ran->ranges[0].size() == 2);
  CHECK(ran->ranges[0][0].key == "t/b");
  CHECK(ran->ranges[0][1].key == "t/c");

  const std::vector<txn_compare> fails = {{"t/b", txn_compare::target::version, txn_compare::op::greater, 5, {}}};
  const std::vector<txn_op> failure2 = {txn_op::range("t/b"), txn_op::remove_prefix("t/"), txn_op::range("t/c")};
  const auto other = client.txn(fails, success, failure2);
  REQUIRE(other.has_value());
  CHECK_FALSE(other->succeeded);
  REQUIRE(other->ranges.size() == 2);
  REQUIRE(other->ranges[0].size() == 1);
  CHECK(other->ranges[0][0].value == "2");
  CHECK(other->ranges[1].empty());  // deleted by the op before it
  CHECK(client.range_prefix("t/")->kvs.empty());
}

TEST_CASE("a watch sees puts and deletes after its start revision and stops on stop()") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto before = client.put("w/old", "before");
  REQUIRE(before.has_value());
  const auto put_a = client.put("w/a", "1");
  const auto del_old = client.delete_key("w/old");
  REQUIRE(client.put("x/outside", "no").has_value());
  REQUIRE(put_a.has_value());
  REQUIRE(del_old == 1);

  std::vector<seen_event> seen;
  std::atomic<std::size_t> seen_count{0};
  std::int64_t last_revision = 0;
  // Another client, on another thread, writes while the watch waits, then
  // stops the watching client once the watch saw everything.
  std::thread writer([&] {
    etcd_client other(etcd.endpoints(), call_timeout);
    const bool history = switchyard::test::wait_until([&] { return seen_count.load() >= 2; }, 5s);
    if (history) {
      (void)other.put("w/b", "2");
      switchyard::test::wait_until([&] { return seen_count.load() >= 3; }, 5s);
    }
    client.stop();
  });
  const auto r = client.watch_prefix("w/", *before + 1, [&](std::span<const watch_event> events, std::int64_t rev) {
    for (const auto& e : events) seen.push_back({e.type, e.kv.key, e.kv.value, e.kv.mod_revision});
    last_revision = rev;
    seen_count = seen.size();
    return true;
  });
  writer.join();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::closed);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == seen_event{event_type::put, "w/a", "1", *put_a});
  CHECK(seen[1].type == event_type::remove);
  CHECK(seen[1].key == "w/old");
  CHECK(seen[1].mod_revision == *put_a + 1);
  CHECK(seen[2].type == event_type::put);
  CHECK(seen[2].key == "w/b");
  CHECK(seen[2].value == "2");
  CHECK(last_revision == seen[2].mod_revision);
  // Stopped for good.
  CHECK(client.get("w/a").error() == errc::closed);
}

TEST_CASE("a watch ended by its callback resumes from the last revision + 1 without missing or repeating") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  for (int i = 0; i < 4; ++i) REQUIRE(client.put("r/" + std::to_string(i), "v").has_value());
  std::vector<std::string> keys;
  std::int64_t resume = 0;
  const auto first = client.watch_prefix("r/", 1, [&](std::span<const watch_event> events, std::int64_t rev) {
    for (const auto& e : events) keys.push_back(e.kv.key);
    resume = rev + 1;
    return false;  // after the first batch
  });
  REQUIRE(first.has_value());
  REQUIRE_FALSE(keys.empty());
  REQUIRE(keys.size() < 4 + 1);
  // The client is still usable, and the watch resumes where it ended.
  REQUIRE(client.put("r/4", "v").has_value());
  const auto second = client.watch_prefix("r/", resume, [&](std::span<const watch_event> events, std::int64_t) {
    for (const auto& e : events) keys.push_back(e.kv.key);
    return keys.size() < 5;
  });
  REQUIRE(second.has_value());
  CHECK(keys == std::vector<std::string>{"r/0", "r/1", "r/2", "r/3", "r/4"});
}

TEST_CASE("a watch from a compacted revision reports compacted") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  for (int i = 0; i < 5; ++i) REQUIRE(client.put("c/k", std::to_string(i)).has_value());
  const auto last = client.put("c/k", "last");
  REQUIRE(last.has_value());
  const auto compacted = switchyard::test::etcd_post(etcd.client_port(0), "/v3/kv/compaction",
                                                     "{\"revision\":\"" + std::to_string(*last - 1) + "\"}");
  REQUIRE(compacted.status == 200);
  bool called = false;
  const auto r = client.watch_prefix("c/", 2, [&](std::span<const watch_event>, std::int64_t) {
    called = true;
    return true;
  });
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::compacted);
  CHECK(client.last_compact_revision() == *last - 1);
  CHECK_FALSE(called);
  // A read at a compacted revision is no different (the recovery: read the
  // keys now and watch from their revision + 1).
  const auto now = client.range_prefix("c/");
  REQUIRE(now.has_value());
  const auto resumed = client.watch_prefix("c/", now->revision + 1,
                                           [&](std::span<const watch_event>, std::int64_t) {
                                             called = true;
                                             return false;
                                           },
                                           {.tick = 100ms});
  CHECK(resumed.has_value());
}

TEST_CASE("a watch tick calls back periodically and the callback can keep a lease alive") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto lease = client.grant_lease(1s);
  REQUIRE(lease.has_value());
  REQUIRE(client.put("t/mine", "x", *lease).has_value());
  int ticks = 0;
  bool renewed = true;
  // 2.5 s of ticks: the lease (TTL 1 s) lives on because the tick renews it.
  const auto r = client.watch_prefix("nothing/", 0,
                                     [&](std::span<const watch_event> events, std::int64_t) {
                                       if (!events.empty()) return false;
                                       ++ticks;
                                       renewed = renewed && client.keep_alive(*lease).has_value();
                                       return ticks < 10;
                                     },
                                     {.tick = 250ms});
  REQUIRE(r.has_value());
  CHECK(ticks == 10);
  CHECK(renewed);
  CHECK(client.get("t/mine")->has_value());
}

TEST_CASE("a watch whose etcd dies reports unreachable") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  int batches = 0;
  const auto r = client.watch_prefix("k", 0,
                                     [&](std::span<const watch_event>, std::int64_t) {
                                       if (++batches == 1) etcd.kill(0);  // on the first tick
                                       return batches < 50;               // bounded: 50 ticks of 100 ms
                                     },
                                     {.tick = 100ms});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::unreachable);
  CHECK(batches < 50);
}

TEST_CASE(
    "a watch answered with a header but never created gives up within the call timeout and the next watch goes to the "
    "next endpoint") {
  etcd_cluster etcd;
  header_only_endpoint silent;
  etcd_client client({silent.endpoint(), etcd.endpoint(0)}, call_timeout);
  // Bounded without the fix too: a watch waiting for good is stopped after 20 s.
  std::atomic<bool> done{false};
  std::thread guard([&] {
    switchyard::test::wait_until([&] { return done.load(); }, 20s);
    client.stop();
  });
  const auto start = std::chrono::steady_clock::now();
  const auto first = client.watch_prefix("k", 0, [&](std::span<const watch_event>, std::int64_t) { return false; });
  const auto waited = std::chrono::steady_clock::now() - start;
  // The second watch is created at the real member and sees a put.
  std::atomic<bool> saw_put{false};
  std::thread writer([&] {
    etcd_client other({etcd.endpoint(0)}, call_timeout);
    for (int i = 0; i < 50 && !saw_put && !done.load(); ++i) {  // bounded
      (void)other.put("k1", "v");
      std::this_thread::sleep_for(100ms);
    }
  });
  const auto second = client.watch_prefix("k", 0, [&](std::span<const watch_event> events, std::int64_t) {
    if (!events.empty()) saw_put = true;
    return !saw_put.load();
  });
  done = true;
  writer.join();
  guard.join();
  REQUIRE_FALSE(first.has_value());
  CHECK(first.error() == errc::timeout);
  CHECK(waited < call_timeout + 1s);
  CHECK(second.has_value());
  CHECK(saw_put.load());
}

TEST_CASE("a call to a dead endpoint moves on to the next") {
  etcd_cluster etcd;
  const auto dead = dead_endpoint();
  etcd_client client({dead, "http://" + etcd.endpoint(0)}, call_timeout);
  CHECK(client.current_endpoint() == dead);
  const auto r = client.put("k", "v");
  REQUIRE(r.has_value());
  CHECK(client.current_endpoint() == "http://" + etcd.endpoint(0));
  CHECK(client.get("k")->value().value == "v");
}

TEST_CASE("a call after its endpoint restarted reconnects the kept-alive connection to it") {
  etcd_cluster etcd;
  etcd_client client({etcd.endpoint(0)}, call_timeout);  // one endpoint: no other to move on to
  REQUIRE(client.put("k", "1").has_value());
  etcd.restart(0);  // the kept-alive connection now leads nowhere
  const auto r = client.put("k", "2");
  REQUIRE(r.has_value());
  CHECK(client.get("k")->value().value == "2");
}

TEST_CASE("a call to no reachable endpoint fails with unreachable within its timeout") {
  etcd_client client({dead_endpoint(), dead_endpoint(), dead_endpoint()}, 1s);
  const auto start = std::chrono::steady_clock::now();
  const auto r = client.put("k", "v");
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::unreachable);
  CHECK(took < 1500ms);
  CHECK(client.watch_prefix("k", 0, [](auto, auto) { return true; }).error() == errc::unreachable);
}

TEST_CASE("a call to an endpoint that never answers fails with timeout within its timeout") {
  silent_endpoint silent;
  etcd_client client({silent.endpoint()}, 500ms);
  const auto start = std::chrono::steady_clock::now();
  const auto r = client.get("k");
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::timeout);
  CHECK(took >= 450ms);
  CHECK(took < 1000ms);
}

TEST_CASE("an endpoint that never answers leaves the next one its share of the timeout") {
  etcd_cluster etcd;
  silent_endpoint silent;
  etcd_client client({silent.endpoint(), etcd.endpoint(0)}, call_timeout);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(client.put("k", "v").has_value());
  CHECK(std::chrono::steady_clock::now() - start < call_timeout);
  CHECK(client.current_endpoint() == etcd.endpoint(0));
}

TEST_CASE("status reports the member, its leader, term, size and version") {
  etcd_cluster etcd;
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto rev = client.put("k", "v");
  REQUIRE(rev.has_value());
  const auto s = client.status();
  REQUIRE(s.has_value());
  CHECK(s->endpoint == etcd.endpoint(0));
  CHECK(s->member_id != 0);
  CHECK(s->is_leader());  // a single member leads itself
  CHECK(s->raft_term >= 1);
  CHECK(s->db_size > 0);
  CHECK(s->revision == *rev);
  CHECK(s->version.starts_with("3.4"));
}

TEST_CASE("cluster_health shows which endpoints are up") {
  etcd_cluster etcd;
  const auto dead = dead_endpoint();
  etcd_client client({dead, etcd.endpoint(0)}, call_timeout);
  const auto health = client.cluster_health(500ms);
  REQUIRE(health.size() == 2);
  CHECK(health[0].endpoint == dead);
  REQUIRE_FALSE(health[0].status.has_value());
  CHECK(health[0].status.error() == errc::unreachable);
  CHECK(health[1].endpoint == etcd.endpoint(0));
  REQUIRE(health[1].status.has_value());
  CHECK(health[1].status->is_leader());
  CHECK(client.current_endpoint() == dead);  // health does not move the client
}

TEST_CASE("with a member of three killed, calls go on through the others") {
  etcd_cluster etcd(3);
  // The client's first endpoint: a follower, so killing it needs no election.
  etcd_client probe(etcd.endpoints(), call_timeout);
  const auto health = probe.cluster_health(1s);
  REQUIRE(health.size() == 3);
  int follower = -1;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(health[i].status.has_value());
    CHECK(health[i].status->leader != 0);
    if (!health[i].status->is_leader()) follower = i;
  }
  REQUIRE(follower >= 0);
  std::vector<std::string> endpoints = {etcd.endpoint(follower)};
  for (int i = 0; i < 3; ++i) {
    if (i != follower) endpoints.push_back(etcd.endpoint(i));
  }
  etcd_client client(endpoints, call_timeout);
  REQUIRE(client.put("k", "1").has_value());  // the kept-alive connection goes to the follower
  CHECK(client.current_endpoint() == etcd.endpoint(follower));
  etcd.kill(follower);
  const auto r = client.put("k", "2");
  REQUIRE(r.has_value());
  CHECK(client.current_endpoint() != etcd.endpoint(follower));
  CHECK(client.get("k")->value().value == "2");
  const auto after = client.cluster_health(500ms);
  int up = 0;
  for (const auto& m : after) up += m.status.has_value() ? 1 : 0;
  CHECK(up == 2);
  CHECK_FALSE(after[0].status.has_value());
}

TEST_CASE("with the leader of three killed, calls succeed again once the others elected a new one") {
  etcd_cluster etcd(3);
  etcd_client client(etcd.endpoints(), call_timeout);
  const auto health = client.cluster_health(1s);
  int leader = -1;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(health[i].status.has_value());
    if (health[i].status->is_leader()) leader = i;
  }
  REQUIRE(leader >= 0);
  REQUIRE(client.put("k", "1").has_value());
  etcd.kill(leader);
  // During the election (about 0.5 s here) a call may fail; it must not
  // fail with anything but unreachable or timeout, and must succeed soon.
  std::vector<std::error_code> errors;
  bool done = false;
  for (int i = 0; i < 10 && !done; ++i) {
    const auto r = client.put("k", "2");
    done = r.has_value();
    if (!r) errors.push_back(r.error());
  }
  CHECK(done);
  for (const auto& e : errors) CHECK((e == errc::unreachable || e == errc::timeout));
  CHECK(client.get("k")->value().value == "2");
  const auto s = client.status();
  REQUIRE(s.has_value());
  CHECK(s->leader != 0);
  CHECK(s->leader != health[leader].status->member_id);
}

TEST_CASE("a malformed endpoint list is refused at construction") {
  CHECK_THROWS_AS(etcd_client({}, 1s), std::system_error);
  CHECK_THROWS_AS(etcd_client({"127.0.0.1"}, 1s), std::system_error);
  CHECK_THROWS_AS(etcd_client({"https://127.0.0.1:2379"}, 1s), std::system_error);
  CHECK_THROWS_AS(etcd_client({"127.0.0.1:99999"}, 1s), std::system_error);
  CHECK_NOTHROW(etcd_client({"http://127.0.0.1:2379", "[::1]:2379", "localhost:2379/"}, 1s));
}

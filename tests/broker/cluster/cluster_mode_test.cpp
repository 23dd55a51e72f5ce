// Cluster mode end to end (docs/cluster.md): real etcd and nats-server
// processes, three switchyard servers on loopback (port 0), real clients.

#include "broker/cluster/node_link_generated.h"
#include "broker/cluster/partition_map.hpp"
#include "cluster/etcd_client.hpp"
#include "cluster/nats_link.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/nats_process.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <mutex>
#include <random>
#include <thread>

using namespace switchyard;
using namespace std::chrono_literals;
using test::cluster_fixture;
using test::wait_until;

namespace {

std::string text(const message& m) { return {reinterpret_cast<const char*>(m.payload.data()), m.payload.size()}; }

// A client whose deliveries land in `got`.
std::unique_ptr<client> subscriber(test::test_server& s, std::string_view pattern, test::collector<std::string>& got) {
  auto c = test::connect_to(s, "subscriber");
  REQUIRE(c->subscribe(pattern, [&got](const message& m) { got.add(text(m)); }));
  return c;
}

// The etcd lease (incarnation) node `id` joined with.
// A node started on a thread of its own (its start blocks while it waits
// for etcd): wait() joins it and REQUIREs that it started.
class background_start {
 public:
  explicit background_start(broker::server_config config)
      : thread_([this, c = std::move(config)] {
          try {
            node_ = std::make_unique<test::test_server>(c);
          } catch (const std::exception& e) {
            failed_ = e.what();
          }
        }) {}
  ~background_start() {
    if (thread_.joinable()) thread_.join();
  }
  test::test_server& wait() {
    thread_.join();
    INFO(failed_);
    REQUIRE(failed_.empty());
    REQUIRE(node_);
    return *node_;
  }

 private:
  std::unique_ptr<test::test_server> node_;
  std::string failed_;
  std::thread thread_;  // last: started once the others exist
};

}  // namespace

TEST_CASE("a publish on one node reaches the subscribers of every node once each", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.start("c");
  f.converge(3);
  std::map<std::string, test::collector<std::string>> got;
  std::vector<std::unique_ptr<client>> subs;
  for (const auto* id : {"a", "b", "c"}) subs.push_back(subscriber(f.node(id), "news.*", got[id]));
  // Two subscribers on one node: the node still gets each message once.
  subs.push_back(subscriber(f.node("c"), "news.>", got["c2"]));
  auto pub = test::connect_to(f.node("b"), "publisher");
  constexpr int n = 200;
  for (int i = 0; i < n; ++i) REQUIRE_FALSE(pub->publish("news.x", std::to_string(i)));
  for (auto& [id, g] : got) REQUIRE(wait_until([&] { return g.count == n; }));
  // A last message behind the others: nothing more came before it.
  REQUIRE_FALSE(pub->publish("news.end", "end"));
  for (auto& [id, g] : got) {
    REQUIRE(wait_until([&] { return g.count == n + 1; }));
    const auto all = g.snapshot();
    for (int i = 0; i < n; ++i) CHECK(all[i] == std::to_string(i));
  }
  // One delivery shipped per node with interest, however many subscribers.
  const auto b = f.node("b").live_metrics();
  CHECK(b.cluster_records_out == 2 * (n + 1));
  CHECK(f.node("c").live_metrics().cluster_records_in == n + 1);
}

TEST_CASE("a publish on another node right after a Subscribe's Ok reaches the new subscriber", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  test::collector<std::string> got;
  auto sub = test::connect_to(f.node("a"), "subscriber");
  auto pub = test::connect_to(f.node("b"), "publisher");
  constexpr int rounds = 30;
  for (int i = 0; i < rounds; ++i) {
    const auto channel = "fresh." + std::to_string(i);
    REQUIRE(sub->subscribe(channel, [&got](const message& m) { got.add(text(m)); }));
    REQUIRE_FALSE(pub->publish(channel, channel));
  }
  REQUIRE(wait_until([&] { return got.count == rounds; }));
  CHECK(f.node("a").live_metrics().cluster_interest_timeouts == 0);
}

TEST_CASE("a node that joins later receives the interest of the nodes before it", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  test::collector<std::string> got;
  auto sub = subscriber(f.node("a"), "late.*", got);
  f.start("b");
  f.converge(2);
  // b is ready once it holds a's interest.
  REQUIRE(wait_until([&] { return f.node("b").live_metrics().cluster_remote_patterns == 1; }));
  auto pub = test::connect_to(f.node("b"), "publisher");
  REQUIRE_FALSE(pub->publish("late.x", "hello"));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  CHECK(got.snapshot() == std::vector<std::string>{"hello"});
}

TEST_CASE("an unsubscribe withdraws the interest from the other nodes", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  test::collector<std::string> got;
  auto sub = test::connect_to(f.node("a"), "subscriber");
  auto id = sub->subscribe("gone.*", [&got](const message& m) { got.add(text(m)); });
  REQUIRE(id);
  CHECK(f.node("b").live_metrics().cluster_remote_patterns == 1);
  REQUIRE_FALSE(sub->unsubscribe(*id));
  REQUIRE(wait_until([&] { return f.node("b").live_metrics().cluster_remote_patterns == 0; }));
  auto pub = test::connect_to(f.node("b"), "publisher");
  REQUIRE_FALSE(pub->publish("gone.x", "x"));
  REQUIRE_FALSE(pub->flush());
  CHECK(f.node("b").live_metrics().cluster_records_out == 0);
  // The subscriptions gauge counts connections only, not the peers' interest.
  CHECK(f.node("b").live_metrics().subscriptions == 0);
}

TEST_CASE("a node that stops leaves the others' view and their channel table", "[cluster][e2e]") {
  cluster_fixture f;
  // A TTL far longer than the wait below: only the revoke can explain it.
  for (const auto* id : {"a", "b"}) {
    auto c = f.config(id);
    c.cluster_lease_ttl_s = 20;
    f.start(c);
  }
  f.converge(2);
  test::collector<std::string> got;
  auto sub = subscriber(f.node("b"), "left.*", got);
  REQUIRE(f.node("a").live_metrics().cluster_remote_patterns == 1);
  sub.reset();
  f.node("b").stop();
  // Its lease revoked at stop: gone at once, not after the TTL.
  REQUIRE(wait_until([&] { return f.node("a").live_metrics().cluster_members == 1; }, 5s));
  CHECK(f.node("a").live_metrics().cluster_remote_patterns == 0);
}

TEST_CASE("a second node with the id of a live node is refused at start, naming the id", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  try {
    test::test_server twin(f.config("a"));
    FAIL("a second node 'a' started");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("node id 'a' is held by a live member"));
  }
  CHECK(f.node("a").live_metrics().cluster_members == 1);
}

TEST_CASE("a node started before etcd answers waits for it and joins", "[cluster][e2e]") {
  cluster_fixture f;
  f.etcd.kill(0);
  auto config = f.config("a");
  background_start start(config);
  std::this_thread::sleep_for(1500ms);  // the node is waiting meanwhile (without the wait it fails at once)
  f.etcd.restart(0);
  auto& node = start.wait();
  CHECK(node.live_metrics().cluster_members == 1);
}

TEST_CASE("a node whose previous run still holds its id waits for that lease after waiting for etcd",
          "[cluster][e2e]") {
  cluster_fixture f;
  // The previous run of node a, killed without revoking its lease.
  {
    cluster::etcd_client etcd(f.etcd.endpoints(), 2s);
    auto lease = etcd.grant_lease(2s);
    REQUIRE(lease);
    REQUIRE(etcd.put("/switchyard/" + f.name + "/members/a", R"({"address":"127.0.0.1:1"})", *lease));
  }
  f.etcd.kill(0);
  auto config = f.config("a");  // lease TTL 2 s: the holder is waited for TTL + 2 s
  background_start start(config);
  // Longer than TTL + 2 s: counted from the start, that wait would be over
  // before etcd answered, and the node would refuse as if its id were taken.
  std::this_thread::sleep_for(5s);
  f.etcd.restart(0);  // the restarted leader gives the old lease a full TTL again
  auto& node = start.wait();
  CHECK(node.live_metrics().cluster_members == 1);
}

TEST_CASE("a node refuses to start when NATS's max_payload cannot carry --max-frame", "[cluster][e2e]") {
  cluster_fixture f;
  f.nats = std::make_unique<test::nats_process>("max_payload: 65536");
  auto c = f.config("a");
  c.max_frame = 1u << 20;
  try {
    test::test_server node(c);
    FAIL("the node started");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("max_payload (65536 bytes)") && Catch::Contains("--max-frame (1048576"));
  }
  c.max_frame = 32u << 10;  // fits
  test::test_server node(c);
  CHECK(node.live_metrics().cluster_members == 1);
}

TEST_CASE("a gap in a link's numbering reaches the node's subscribers as a Dropped notice", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  std::atomic<std::uint64_t> dropped{0};
  client_options o;
  o.port = f.node("a").port();
  o.on_dropped = [&dropped](std::uint64_t n) { dropped += n; };
  auto sub = client::connect(o);
  REQUIRE(sub);
  REQUIRE((*sub)->subscribe("g.*", [](const message&) {}));
  // b's link to a, as NATS would carry it, with 500 messages missing.
  flatbuffers::FlatBufferBuilder b;
  const auto body = broker::link::CreateInterestAck(b, 0, false);
  b.Finish(broker::link::CreateLinkMessage(b, b.CreateString("b"), f.incarnation_of("b"), 1000,
                                           broker::link::Body::InterestAck, body.Union(), f.incarnation_of("a")),
           broker::link::LinkMessageIdentifier());
  f.nats_publish("a", std::as_bytes(std::span(b.GetBufferPointer(), b.GetSize())));
  REQUIRE(wait_until([&] { return dropped.load() > 0; }));
  const auto m = f.node("a").live_metrics();
  CHECK(m.cluster_lost == dropped.load());
  CHECK(m.cluster_lost > 900);
}

TEST_CASE("a malformed message from NATS is dropped and counted, and the node serves on", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  const auto a_incarnation = f.incarnation_of("a");
  const auto b_incarnation = f.incarnation_of("b");
  const auto link_message = [&](std::string_view from, std::int64_t incarnation, std::uint64_t seq, bool with_body) {
    auto b = std::make_shared<flatbuffers::FlatBufferBuilder>();
    const auto body = broker::link::CreateInterestAck(*b, 0, false);
    b->Finish(
        broker::link::CreateLinkMessage(*b, b->CreateString(from), incarnation, seq, broker::link::Body::InterestAck,
                                        with_body ? body.Union() : 0, a_incarnation),
        broker::link::LinkMessageIdentifier());
    return b;
  };
  const auto publish = [&](std::span<const std::uint8_t> bytes) { f.nats_publish("a", std::as_bytes(bytes)); };
  // Messages a sent before it knew b may have been dropped already: count from here.
  const auto before = f.node("a").live_metrics().cluster_dropped;
  const std::string junk = "this is no LinkMessage at all";
  publish({reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size()});
  publish({});                                                       // empty
  publish({reinterpret_cast<const std::uint8_t*>(junk.data()), 3});  // shorter than any FlatBuffer
  const auto stranger = link_message("stranger", 1, 1, true);        // a node id no member has
  publish({stranger->GetBufferPointer(), stranger->GetSize()});
  const auto bodiless = link_message("b", b_incarnation, 500, false);  // a body type without its body
  publish({bodiless->GetBufferPointer(), bodiless->GetSize()});
  const auto forged = link_message("b", b_incarnation, 1ull << 40, true);  // a jump no loss explains
  publish({forged->GetBufferPointer(), forged->GetSize()});
  REQUIRE(wait_until([&] { return f.node("a").live_metrics().cluster_dropped == before + 6; }));
  test::collector<std::string> got;
  auto sub = subscriber(f.node("a"), "still.*", got);
  auto pub = test::connect_to(f.node("b"), "publisher");
  REQUIRE_FALSE(pub->publish("still.x", "ok"));
  REQUIRE(wait_until([&] { return got.count == 1; }));
}

TEST_CASE("three nodes share the partitions, and the survivors take a stopped node's", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.start("c");
  f.converge(3);
  client_options o;
  o.port = f.node("a").port();
  o.admin = true;
  auto admin = client::connect(o);
  REQUIRE(admin);
  const auto owned = [&](std::map<std::string, std::uint32_t>& by_node) {
    by_node.clear();
    auto s = (*admin)->cluster_status();
    if (!s) return std::uint32_t{0};
    std::uint32_t total = 0;
    for (const auto& m : s->members) total += by_node[m.node_id] = m.partitions;
    return total;
  };
  std::map<std::string, std::uint32_t> by_node;
  REQUIRE(wait_until([&] { return owned(by_node) == broker::partition_map::partition_count && by_node.size() == 3; }));
  for (const auto& [id, n] : by_node) {
    INFO(id);
    CHECK(n > 250);  // about a third each
  }
  f.node("c").stop();
  REQUIRE(wait_until([&] { return owned(by_node) == broker::partition_map::partition_count && by_node.size() == 2; }));
  CHECK(by_node["a"] + by_node["b"] == broker::partition_map::partition_count);
}

TEST_CASE("a joining node gets its share from the nodes before it, and a drain gives a node's back", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  client_options o;
  o.port = f.node("a").port();
  o.admin = true;
  auto admin = client::connect(o);
  REQUIRE(admin);
  const auto partitions_of = [&](const std::string& id) {
    auto s = (*admin)->cluster_status();
    if (!s) return std::uint32_t{0};
    for (const auto& m : s->members)
      if (m.node_id == id) return m.partitions;
    return std::uint32_t{0};
  };
  REQUIRE(wait_until([&] { return partitions_of("a") == broker::partition_map::partition_count; }));
  f.start("b");
  REQUIRE(wait_until([&] {
    const auto b = partitions_of("b");
    return b > 400 && partitions_of("a") + b == broker::partition_map::partition_count;
  }));
  // A drain of b: a takes them all back.
  client_options bo;
  bo.port = f.node("b").port();
  bo.admin = true;
  auto b_admin = client::connect(bo);
  REQUIRE(b_admin);
  REQUIRE_FALSE((*b_admin)->drain(std::chrono::milliseconds(5000)));
  REQUIRE(wait_until([&] { return partitions_of("a") == broker::partition_map::partition_count; }));
}

TEST_CASE("a whole interest too large for one NATS message reaches a joining node in parts", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  auto sub = test::connect_to(f.node("a"), "subscriber");
  constexpr int patterns = 3000;  // about 150 KiB of patterns: several parts
  std::atomic<int> answered{0};
  for (int i = 0; i < patterns; ++i)
    sub->async_subscribe(
        "many.a.rather.long.pattern.name.number." + std::to_string(i) + ".*", [](const message&) {},
        [&answered](std::expected<subscription_id, std::error_code> r) {
          if (r) ++answered;
        });
  REQUIRE(wait_until([&] { return answered.load() == patterns; }));
  f.start("b");
  f.converge(2);
  REQUIRE(wait_until([&] { return f.node("b").live_metrics().cluster_remote_patterns == patterns; }));
  // And a change as large, in one loop turn or a few, the other way.
  auto sub_b = test::connect_to(f.node("b"), "subscriber-b");
  answered = 0;
  for (int i = 0; i < patterns; ++i)
    sub_b->async_subscribe(
        "other.rather.long.pattern.name.number." + std::to_string(i) + ".*", [](const message&) {},
        [&answered](std::expected<subscription_id, std::error_code> r) {
          if (r) ++answered;
        });
  REQUIRE(wait_until([&] { return answered.load() == patterns; }));
  CHECK(f.node("a").live_metrics().cluster_remote_patterns == patterns);
  CHECK(f.node("a").live_metrics().cluster_interest_timeouts == 0);
}

TEST_CASE("a node whose loop was stuck past its lease registers again as a new incarnation and serves on",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto& a = f.start("a");
  f.start("b");
  f.converge(2);
  const auto before = f.incarnation_of("a");
  {
    auto hold = a.hold_loop();  // no beat: no renewal
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  }
  // The lease lapsed at etcd; the keeper registers again.
  REQUIRE(wait_until([&] {
    cluster::etcd_client etcd(f.etcd.endpoints(), 2s);
    auto kv = etcd.get("/switchyard/" + f.name + "/members/a");
    return kv && *kv && (**kv).lease != before;
  }));
  REQUIRE(wait_until([&] { return a.live_metrics().cluster_in_standing; }));
  // Channels cross again both ways.
  test::collector<std::string> got;
  auto sub = subscriber(a, "again.*", got);
  auto pub = test::connect_to(f.node("b"), "publisher");
  REQUIRE_FALSE(pub->publish("again.x", "x"));
  REQUIRE(wait_until([&] { return got.count == 1; }));
}

TEST_CASE("a node cut off from etcd leaves standing before its lease can lapse, and /readyz says so",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto c = f.config("a");
  c.http_host = "127.0.0.1";
  c.http_port = 0;
  auto& a = f.start(c);
  REQUIRE(wait_until([&] { return test::http_get(a.http_port(), "/readyz").status == 200; }));
  f.etcd.kill(0);
  // TTL 2 s: out of standing once less than a fifth of it is left.
  REQUIRE(wait_until([&] { return !a.live_metrics().cluster_in_standing; }, 5s));
  const auto reply = test::http_get(a.http_port(), "/readyz");
  CHECK(reply.status == 503);
  CHECK_THAT(reply.body, Catch::Contains("out of standing"));
  f.etcd.restart(0);
  // etcd extends leases when a leader starts: the same lease is renewed.
  REQUIRE(wait_until([&] { return a.live_metrics().cluster_in_standing; }, 10s));
  REQUIRE(wait_until([&] { return test::http_get(a.http_port(), "/readyz").status == 200; }));
}

TEST_CASE("a node cut off from etcd past cluster-drain-after-s drains its clients to the other nodes and exits",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto c = f.config("a");
  c.cluster_drain_after = 1s;
  c.drain_window = 300ms;
  auto& a = f.start(c);
  std::mutex mu;
  std::vector<std::error_code> losses;
  client_options o;
  o.port = a.port();
  o.client_name = "gateway";
  o.on_disconnect = [&](std::error_code ec) {
    std::lock_guard lock(mu);
    losses.push_back(ec);
  };
  auto gateway = client::connect(o);  // after what its callback uses: destroyed first
  REQUIRE(gateway);
  f.etcd.kill(0);
  // TTL 2 s: out of standing within about 1.6 s, then 1 s more.
  REQUIRE(wait_until([&] { return !a.live_metrics().cluster_in_standing; }, 5s));
  CHECK_FALSE(a.live_metrics().draining);  // not at once
  REQUIRE(wait_until(
      [&] {
        std::lock_guard lock(mu);
        return !losses.empty();
      },
      10s));
  {
    std::lock_guard lock(mu);
    CHECK(losses.front() == errc::draining);
  }
  REQUIRE(a.wait_finished(10s));
  CHECK(a.drained_for_lost_standing());  // the process exits 75 then
}

TEST_CASE("a node out of standing shorter than cluster-drain-after-s, or with it 0, keeps its clients",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto c = f.config("a");
  c.cluster_drain_after = 0s;  // the default: never
  auto& a = f.start(c);
  auto d = f.config("d");
  d.cluster_drain_after = 30s;
  auto& b = f.start(d);
  f.converge(2);
  f.etcd.kill(0);
  REQUIRE(wait_until([&] { return !a.live_metrics().cluster_in_standing && !b.live_metrics().cluster_in_standing; }));
  std::this_thread::sleep_for(1500ms);  // out of standing a while: neither drains
  CHECK_FALSE(a.live_metrics().draining);
  CHECK_FALSE(b.live_metrics().draining);
  f.etcd.restart(0);
  REQUIRE(
      wait_until([&] { return a.live_metrics().cluster_in_standing && b.live_metrics().cluster_in_standing; }, 10s));
  CHECK(a.running());
  CHECK(b.running());
}

TEST_CASE("cluster status shows the members, the links, etcd and NATS as a node sees them", "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  test::collector<std::string> got;
  auto sub = subscriber(f.node("b"), "status.*", got);
  auto pub = test::connect_to(f.node("a"), "publisher");
  REQUIRE_FALSE(pub->publish("status.x", "x"));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  client_options o;
  o.port = f.node("a").port();
  o.admin = true;
  auto admin = client::connect(o);
  REQUIRE(admin);
  // The etcd probe runs every 2 s: wait for its first finding.
  std::expected<cluster_status_info, std::error_code> s;
  REQUIRE(wait_until([&] {
    s = (*admin)->cluster_status();
    return s && !s->etcd.empty();
  }));
  CHECK(s->cluster_name == f.name);
  CHECK(s->node_id == "a");
  CHECK(s->incarnation == f.incarnation_of("a"));
  CHECK(s->in_standing);
  CHECK(s->synced);
  REQUIRE(s->members.size() == 2);
  const auto& self = s->members[0];
  const auto& b = s->members[1];
  CHECK((self.node_id == "a" && self.self && self.address == "127.0.0.1:" + std::to_string(f.node("a").port())));
  CHECK((b.node_id == "b" && !b.self && b.synced_in && b.patterns == 1));
  CHECK(b.incarnation == f.incarnation_of("b"));
  CHECK(b.records_out == 1);
  CHECK(b.lost_in == 0);
  REQUIRE(s->etcd.size() == 1);
  CHECK((s->etcd[0].reachable && s->etcd[0].leader && s->etcd[0].version == "3.4.23"));
  CHECK(s->nats.state == "connected");
  CHECK(s->nats.server_url == f.nats->url());
  CHECK(s->nats.max_payload == 2 << 20);
  // A single node has no cluster to show.
  test::test_server single;
  client_options so;
  so.port = single.port();
  so.admin = true;
  auto alone = client::connect(so);
  REQUIRE(alone);
  const auto none = (*alone)->cluster_status();
  REQUIRE_FALSE(none);
  CHECK(none.error() == errc::not_found);
}

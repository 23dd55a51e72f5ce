// Routes and send-to-user across nodes (docs/cluster.md, "Routes and
// send-to-user"): real etcd and nats-server processes, switchyard nodes on
// loopback, real gateway and service clients.

#include "auth/credentials.hpp"
#include "broker/cluster/partition_map.hpp"
#include "chaos/tcp_proxy.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/temp_dir.hpp"

#include <switchyard/log.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

using namespace switchyard;
using namespace std::chrono_literals;
using test::cluster_fixture;
using test::wait_until;

namespace {

std::string text(const inbox_message& m) { return {reinterpret_cast<const char*>(m.payload.data()), m.payload.size()}; }

// A gateway on `node`: a lease, inbox `inbox`, and `users` route keys
// user:<first>..user:<first + users - 1> put on it.
struct gateway {
  std::unique_ptr<client> c;
  lease_id lease = 0;
  std::string inbox;
  test::collector<std::string> got;

  gateway(test::test_server& node, std::string inbox_id, int first, int users, std::chrono::milliseconds ttl = 30s)
      : inbox(std::move(inbox_id)) {
    c = test::connect_to(node, "gateway");
    auto l = c->lease_grant(ttl);
    REQUIRE(l);
    lease = l->id;
    REQUIRE_FALSE(c->open_inbox(inbox, lease, [this](const inbox_message& m) { got.add(text(m)); }));
    for (int i = first; i < first + users; ++i) {
      auto put = c->registry_put("user:" + std::to_string(i), inbox, lease);
      REQUIRE(put);
    }
  }
};

// The number of distinct partition owners the keys user:<0..n-1> have:
// the test covers keys owned by every node, not only by the home.
std::size_t owners_of_users(int n, const std::vector<std::string>& ids) {
  broker::cluster_view v;
  for (const auto& id : ids) {
    broker::cluster_member m;
    m.node_id = id;
    v.members.push_back(m);
  }
  std::set<std::string> owners;
  for (int i = 0; i < n; ++i)
    owners.insert(
        broker::partition_map::preferred_owner(v, broker::partition_map::partition_of("user:" + std::to_string(i)))
            ->node_id);
  return owners.size();
}

// The first user:<i> owned by `before` among nodes {a, b} and by `after`
// once c joins.
std::string user_moving(const std::string& before, const std::string& after) {
  const auto view_of = [](std::initializer_list<const char*> ids) {
    broker::cluster_view v;
    for (const auto* id : ids) {
      broker::cluster_member m;
      m.node_id = id;
      v.members.push_back(m);
    }
    return v;
  };
  const auto two = view_of({"a", "b"}), three = view_of({"a", "b", "c"});
  for (int i = 0; i < 100000; ++i) {
    const auto key = "user:" + std::to_string(i);
    const auto p = broker::partition_map::partition_of(key);
    if (broker::partition_map::preferred_owner(two, p)->node_id == before &&
        broker::partition_map::preferred_owner(three, p)->node_id == after)
      return key;
  }
  FAIL("no user moves from " << before << " to " << after);
  return {};
}

// A chaos::tcp_proxy to 127.0.0.1:`target` with a thread of its own.
class proxy_thread {
 public:
  explicit proxy_thread(std::uint16_t target) : proxy_(io_, target), thread_([this] { io_.run(); }) {}
  ~proxy_thread() {
    io_.stop();
    thread_.join();
  }
  std::uint16_t port() const noexcept { return proxy_.port(); }
  // Runs fn(proxy) on the proxy's thread; returns once it ran.
  void run(const std::function<void(chaos::tcp_proxy&)>& fn) {
    std::promise<void> done;
    asio::post(io_, [&] {
      fn(proxy_);
      done.set_value();
    });
    done.get_future().wait();
  }

 private:
  asio::io_context io_;
  chaos::tcp_proxy proxy_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io_);
  std::thread thread_;
};

}  // namespace

TEST_CASE("a service on one node sends to users whose gateway is on another node, and the gateway receives it",
          "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  constexpr int users = 60;
  REQUIRE(owners_of_users(users, {"a", "b", "c"}) == 3);
  gateway gw(f.node("a"), "gw-a", 0, users);
  auto svc = test::connect_to(f.node("b"), "service");
  for (int i = 0; i < users; ++i) {
    auto sent = svc->send("user:" + std::to_string(i), "m" + std::to_string(i));
    REQUIRE(sent);
    CHECK(*sent == "gw-a");
  }
  REQUIRE(wait_until([&] { return gw.got.count == users; }));
  const auto all = gw.got.snapshot();
  for (int i = 0; i < users; ++i) CHECK(std::count(all.begin(), all.end(), "m" + std::to_string(i)) == 1);
  // Routed across nodes: b forwarded, and a confirmed its puts with the owners.
  CHECK(f.node("b").live_metrics().cluster_sends_forwarded > 0);
  CHECK(f.node("a").live_metrics().cluster_puts_confirmed > 0);
  // A user nobody put: no_route, as on one node.
  auto none = svc->send("user:nobody", "x");
  REQUIRE_FALSE(none);
  CHECK(none.error() == errc::no_route);
}

TEST_CASE("a send to users on several nodes at once reaches each gateway and answers per key, in order",
          "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  gateway ga(f.node("a"), "gw-a", 0, 20);
  gateway gc(f.node("c"), "gw-c", 20, 20);
  auto svc = test::connect_to(f.node("b"), "service");
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back("user:" + std::to_string(i));
  keys.push_back("user:nobody");
  std::vector<std::string_view> views(keys.begin(), keys.end());
  const std::string payload = "room";
  auto r = svc->send_many(views, std::as_bytes(std::span(payload.data(), payload.size())));
  REQUIRE(r);
  CHECK(r->routed == 40);
  // Per key, in the Send's order, wherever each was routed.
  REQUIRE(r->gateways.size() == keys.size());
  for (int i = 0; i < 40; ++i) CHECK(r->gateways[static_cast<std::size_t>(i)] == (i < 20 ? "gw-a" : "gw-c"));
  CHECK(r->gateways.back().empty());
  // One delivery per gateway (an inbox delivery names its users).
  REQUIRE(wait_until([&] { return ga.got.count >= 1 && gc.got.count >= 1; }));
  REQUIRE_FALSE(svc->flush());
  CHECK(ga.got.count <= 3);  // at most once per owner node the keys passed through
  CHECK(gc.got.count <= 3);
}

TEST_CASE("many sends to another node's users travel many to a NATS message, each delivered once", "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  constexpr int users = 200, sends = 2000;
  gateway gw(f.node("a"), "gw-a", 0, users);
  auto svc = test::connect_to(f.node("b"), "service");
  const auto before = f.node("b").live_metrics().cluster_messages_out;
  for (int i = 0; i < sends; ++i) {
    const auto m = std::to_string(i);
    REQUIRE_FALSE(svc->send_nowait("user:" + std::to_string(i % users), std::as_bytes(std::span(m.data(), m.size()))));
  }
  REQUIRE_FALSE(svc->flush());  // answered once every forwarded send was
  REQUIRE(wait_until([&] { return gw.got.count >= sends; }));
  const auto all = gw.got.snapshot();
  CHECK(all.size() == sends);
  CHECK(std::set<std::string>(all.begin(), all.end()).size() == sends);
  // One message per send would be at least 2,000 (every send leaves b at
  // least once); batched per loop turn, a few per message at the very least.
  const auto messages = f.node("b").live_metrics().cluster_messages_out - before;
  CHECK(messages <= sends / 4);
  CHECK(f.node("b").live_metrics().cluster_sends_forwarded >= static_cast<std::uint64_t>(sends) * 2 / 3);
}

TEST_CASE("a user whose gateway moved to another node is reached there, never at the old gateway", "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  gateway old_gw(f.node("a"), "gw-a", 0, 10);
  gateway new_gw(f.node("c"), "gw-c", 0, 10);  // the same users, put later
  auto svc = test::connect_to(f.node("b"), "service");
  for (int i = 0; i < 10; ++i) {
    auto sent = svc->send("user:" + std::to_string(i), "moved");
    REQUIRE(sent);
    CHECK(*sent == "gw-c");
  }
  REQUIRE(wait_until([&] { return new_gw.got.count == 10; }));
  // The old gateway's lease goes: its removals must not touch the new routes.
  REQUIRE_FALSE(old_gw.c->lease_revoke(old_gw.lease));
  REQUIRE_FALSE(svc->flush());
  for (int i = 0; i < 10; ++i) CHECK(svc->send("user:" + std::to_string(i), "still"));
  REQUIRE(wait_until([&] { return new_gw.got.count == 20; }));
  CHECK(old_gw.got.count == 0);
}

TEST_CASE("routes whose lease ended leave their owners' directories, and sends to them find no route",
          "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b"});
  const auto entries = [&] {
    return f.node("a").live_metrics().cluster_directory_entries + f.node("b").live_metrics().cluster_directory_entries;
  };
  gateway gw(f.node("a"), "gw-a", 0, 50);
  REQUIRE(entries() == 50);  // each put answered only once its owner had it
  REQUIRE_FALSE(gw.c->lease_revoke(gw.lease));
  REQUIRE(wait_until([&] { return entries() == 0; }));
  auto svc = test::connect_to(f.node("b"), "service");
  for (int i = 0; i < 50; ++i) {
    auto sent = svc->send("user:" + std::to_string(i), "x");
    REQUIRE_FALSE(sent);
    CHECK(sent.error() == errc::no_route);
  }
}

TEST_CASE("a route removed while its home's view still names the partition's previous owner leaves the new owner",
          "[cluster][e2e]") {
  cluster_fixture f;
  // a reaches etcd through a proxy: cut, a's view stays as it was while
  // NATS still carries the other nodes' messages to it.
  proxy_thread etcd_proxy(f.etcd.client_port(0));
  for (const auto* id : {"a", "b"}) {
    auto c = f.config(id);
    c.cluster_lease_ttl_s = 20;  // a is cut from etcd and b's loop held below: both keep their membership
    if (c.cluster_node_id == "a") c.cluster_etcd = {"127.0.0.1:" + std::to_string(etcd_proxy.port())};
    f.start(c);
  }
  f.converge(2);
  f.settle();
  // A user of a's gateway, owned by b among {a, b} and by c once c joins.
  const auto user = user_moving("b", "c");
  gateway gw(f.node("a"), "gw-a", std::stoi(user.substr(5)), 1);
  REQUIRE(f.node("b").live_metrics().cluster_directory_entries == 1);
  auto cc = f.config("c");
  cc.cluster_lease_ttl_s = 20;
  {
    // b gives the partition up only once its loop has stopped serving it:
    // not before a has seen c join and been cut from etcd.
    auto hold = f.node("b").hold_loop();
    f.start(cc);
    REQUIRE(wait_until([&] { return f.node("a").live_metrics().cluster_members == 3; }));
    etcd_proxy.run([](chaos::tcp_proxy& p) { p.cut(); });
  }
  // c takes the partition and, in a's answer to its rebuild, a's route.
  REQUIRE(wait_until(
      [&] {
        const auto m = f.node("c").live_metrics();
        return m.cluster_directory_entries == 1 && m.cluster_partitions_rebuilding == 0;
      },
      8s));
  // a's view still names b, which no longer holds the partition. Checked
  // before a is healed: a lease of a's that lapsed meanwhile (a new
  // incarnation) would have its entries dropped everywhere anyway.
  const auto incarnation = f.incarnation_of("a");
  REQUIRE_FALSE(gw.c->lease_revoke(gw.lease));
  CHECK(wait_until([&] { return f.node("c").live_metrics().cluster_directory_entries == 0; }));
  etcd_proxy.run([](chaos::tcp_proxy& p) { p.heal(); });
  CHECK(f.incarnation_of("a") == incarnation);
  f.converge(3);
  f.settle();
  for (const auto* id : {"a", "b", "c"}) CHECK(f.node(id).live_metrics().cluster_directory_entries == 0);
  auto svc = test::connect_to(f.node("c"), "service");
  const auto sent = svc->send(user, "after");
  REQUIRE_FALSE(sent);
  CHECK(sent.error() == errc::no_route);
}

TEST_CASE("a node that joins rebuilds the directory of the partitions it takes from the home nodes", "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b"});
  constexpr int users = 60;
  gateway gw(f.node("a"), "gw-a", 0, users);
  // c takes about a third of the partitions, some with routes in them.
  f.start("c");
  f.converge(3);
  f.settle();
  CHECK(f.node("c").live_metrics().cluster_rebuilt > 0);
  CHECK(f.node("c").live_metrics().cluster_directory_entries > 0);
  auto svc = test::connect_to(f.node("c"), "service");
  for (int i = 0; i < users; ++i) {
    auto sent = svc->send("user:" + std::to_string(i), "after");
    REQUIRE(sent);
  }
  REQUIRE(wait_until([&] { return gw.got.count == users; }));
}

TEST_CASE("of two nodes that both hold a moved user's route, a rebuild keeps the later put, whichever answers last",
          "[cluster][e2e]") {
  cluster_fixture f;
  for (const auto* id : {"a", "b"}) {
    auto c = f.config(id);
    c.cluster_lease_ttl_s = 20;  // a's loop is held below: it must keep its membership
    f.start(c);
  }
  f.converge(2);
  f.settle();
  // A user owned by b among {a, b} and by c once c joins.
  const auto user = user_moving("b", "c");
  const int n = std::stoi(user.substr(5));
  // The user's gateway moves from a to b; a's route stays while its lease lives.
  gateway old_gw(f.node("a"), "gw-a", n, 1);
  gateway new_gw(f.node("b"), "gw-b", n, 1);
  auto svc = test::connect_to(f.node("b"), "service");
  REQUIRE(svc->send(user, "before") == std::string("gw-b"));
  auto c = f.config("c");
  c.cluster_lease_ttl_s = 20;
  {
    // a answers c's rebuild last: after b's answer is in.
    auto hold = f.node("a").hold_loop();
    f.start(c);
    REQUIRE(wait_until(
        [&] {
          const auto m = f.node("c").live_metrics();
          return m.cluster_partitions_rebuilding > 0 && m.cluster_directory_entries > 0;
        },
        8s));
  }
  f.converge(3);
  f.settle();
  auto on_c = test::connect_to(f.node("c"), "service");
  for (auto* s : {svc.get(), on_c.get()}) {
    const auto sent = s->send(user, "after");
    REQUIRE(sent);
    CHECK(*sent == "gw-b");
  }
  REQUIRE(wait_until([&] { return new_gw.got.count == 3; }));
  CHECK(old_gw.got.count == 0);
}

TEST_CASE("a rebuild's answer many times the link's outbound queue waits for NATS instead of being dropped",
          "[cluster][e2e]") {
  cluster_fixture f;
  // a reaches NATS through a proxy that can hold what a sends (NATS
  // stopped reading, in effect) while what NATS sends a still arrives.
  proxy_thread proxy(f.nats->port());
  // The least NATS queue allowed (--max-frame, 1 MiB).
  auto ca = f.config("a");
  ca.cluster_nats_queue_bytes = ca.max_frame;
  ca.cluster_nats = {"nats://127.0.0.1:" + std::to_string(proxy.port())};
  f.start(ca);
  f.converge(1);
  f.settle();
  // 32,000 users with 1,000-byte keys: b will take about half, a 16 MB
  // answer, several times what the socket buffers and the queue hold.
  constexpr int users = 32'000;
  const std::string pad(990, 'k');
  const auto key = [&pad](int i) { return "user:" + pad + std::to_string(i); };
  auto gw = test::connect_to(f.node("a"), "gateway");
  auto lease = gw->lease_grant(60s);
  REQUIRE(lease);
  std::mutex got_mu;
  std::set<std::string> got;  // the payloads delivered
  REQUIRE_FALSE(gw->open_inbox("gw-a", lease->id, [&](const inbox_message& m) {
    std::lock_guard lock(got_mu);
    got.insert(text(m));
  }));
  std::atomic<int> put{0}, put_failed{0};
  for (int i = 0; i < users; ++i)
    gw->async_registry_put(key(i), "gw-a", lease->id,
                           [&](std::expected<std::uint64_t, std::error_code> r) { ++(r ? put : put_failed); });
  REQUIRE(wait_until([&] { return put + put_failed == users; }));
  REQUIRE(put_failed == 0);
  // b joins and asks a for the keys of the partitions it takes; a's answer
  // cannot leave a meanwhile.
  proxy.run([](chaos::tcp_proxy& p) { p.cut_from_node(); });
  auto cb = f.config("b");
  cb.cluster_nats_queue_bytes = cb.max_frame;
  f.start(cb);
  f.converge(2);
  REQUIRE(wait_until([&] { return f.node("b").live_metrics().cluster_partitions_rebuilding > 0; }));
  // a has the request and answers into its link: sent at once, most of the
  // answer would be refused by NATS's queue now (and asked for again).
  const auto out_before = f.node("a").live_metrics().cluster_messages_out;
  REQUIRE(wait_until([&] { return f.node("a").live_metrics().cluster_messages_out > out_before + 50; }));
  std::this_thread::sleep_for(300ms);  // the answer's loop turns go on; well below cnats's write deadline (2 s)
  proxy.run([](chaos::tcp_proxy& p) { p.heal(); });
  f.settle();
  CHECK(f.node("a").live_metrics().cluster_send_failed == 0);  // nothing NATS refused
  const auto b = f.node("b").live_metrics();
  CHECK(b.cluster_rebuilt > 0);
  CHECK(b.cluster_directory_entries > users / 4);
  // Every user is reachable from b, those of b's partitions through the
  // directory the answer rebuilt.
  auto svc = test::connect_to(f.node("b"), "service");
  std::size_t routed = 0;
  constexpr int per_send = 200;
  for (int first = 0; first < users; first += per_send) {
    std::vector<std::string> keys;
    for (int i = first; i < first + per_send; ++i) keys.push_back(key(i));
    const std::vector<std::string_view> views(keys.begin(), keys.end());
    const std::string payload = std::to_string(first);
    auto sent = svc->send_many(views, std::as_bytes(std::span(payload.data(), payload.size())));
    REQUIRE(sent);
    routed += sent->routed;
  }
  CHECK(routed == users);
  // Every send reached the gateway (once per path: the keys of a's
  // partitions and of b's travel apart).
  CHECK(wait_until([&] {
    std::lock_guard lock(got_mu);
    return got.size() == users / per_send;
  }));
}

TEST_CASE("users of a stopped node's gateways are reachable again once the gateways put them on another node",
          "[cluster][e2e]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  constexpr int users = 30;
  {
    gateway gw(f.node("a"), "gw-1", 0, users);
    f.node("a").stop();  // its partitions move to b and c
  }
  f.converge(2);
  f.settle();
  gateway again(f.node("c"), "gw-1", 0, users);
  auto svc = test::connect_to(f.node("b"), "service");
  for (int i = 0; i < users; ++i) REQUIRE(svc->send("user:" + std::to_string(i), "back"));
  REQUIRE(wait_until([&] { return again.got.count == users; }));
}

TEST_CASE("a forwarded send whose node does not answer in time is answered outcome_unknown", "[cluster][e2e]") {
  cluster_fixture f;
  for (const auto* id : {"a", "b"}) {
    auto c = f.config(id);
    c.cluster_lease_ttl_s = 10;  // the hold below must not cost a its membership
    c.cluster_forward_timeout = 300ms;
    f.start(c);
  }
  f.converge(2);
  f.settle();
  gateway gw(f.node("a"), "gw-a", 0, 20);
  auto svc = test::connect_to(f.node("b"), "service");
  {
    auto hold = f.node("a").hold_loop();
    // Every key's path goes through a (its owner or its home): no answer.
    auto sent = svc->send("user:0", "x");
    REQUIRE_FALSE(sent);
    CHECK(sent.error() == errc::outcome_unknown);
  }
  CHECK(f.node("b").live_metrics().cluster_outcome_unknown == 1);
  // a answers again: sends go through (the late outcome was ignored).
  REQUIRE(wait_until([&] { return svc->send("user:1", "y").has_value(); }));
}

TEST_CASE("a node out of standing answers unavailable for the routes it owns, and serves them again after",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto& a = f.start("a");
  f.converge(1);
  f.settle();
  gateway gw(a, "gw-a", 0, 5);
  auto svc = test::connect_to(a, "service");
  REQUIRE(svc->send("user:0", "before"));
  f.etcd.kill(0);
  REQUIRE(wait_until([&] { return !a.live_metrics().cluster_in_standing; }, 5s));
  // It owns every partition, but cannot trust its ownership now.
  auto put = gw.c->registry_put("user:9", "gw-a", gw.lease);
  REQUIRE_FALSE(put);
  CHECK(put.error() == errc::unavailable);
  auto sent = svc->send("user:0", "during");
  REQUIRE_FALSE(sent);
  CHECK(sent.error() == errc::unavailable);
  CHECK(a.live_metrics().cluster_unavailable == 2);
  f.etcd.restart(0);
  REQUIRE(wait_until([&] { return a.live_metrics().cluster_in_standing; }, 10s));
  REQUIRE(wait_until([&] { return svc->send("user:0", "after").has_value(); }));
  CHECK(gw.c->registry_put("user:9", "gw-a", gw.lease));
}

TEST_CASE("a send whose keys are all decided on the node answers per key, in order, as on one node", "[cluster][e2e]") {
  cluster_fixture f;
  auto& a = f.start("a");
  f.converge(1);
  f.settle();
  gateway gw(a, "gw-a", 0, 1);
  auto svc = test::connect_to(a, "service");
  const std::string payload = "x";
  const std::string_view keys[] = {"user:nobody", "user:0"};
  auto r = svc->send_many(keys, std::as_bytes(std::span(payload.data(), payload.size())));
  REQUIRE(r);
  CHECK(r->routed == 1);
  CHECK(r->gateways == std::vector<std::string>{"", "gw-a"});
}

TEST_CASE("the routes of a node that came back as a new incarnation are reachable again from the others",
          "[cluster][e2e]") {
  cluster_fixture f;
  auto& a = f.start("a");
  f.start("b");
  f.converge(2);
  f.settle();
  constexpr int users = 40;
  gateway gw(a, "gw-a", 0, users, 60s);
  {
    auto hold = a.hold_loop();  // no beat: the lease lapses, b drops a's routes
    std::this_thread::sleep_for(3500ms);
  }
  // a registers again; b asks the new incarnation for its routes.
  REQUIRE(wait_until([&] { return a.live_metrics().cluster_in_standing; }, 15s));
  f.converge(2);
  f.settle();
  auto svc = test::connect_to(f.node("b"), "service");
  REQUIRE(wait_until([&] { return svc->send("user:0", "probe").has_value(); }, 15s));
  for (int i = 0; i < users; ++i) REQUIRE(svc->send("user:" + std::to_string(i), "again"));
  REQUIRE(wait_until([&] { return gw.got.count >= users + 1; }));
}

TEST_CASE("a principal on one node cannot take over a route another principal holds on another node",
          "[cluster][e2e][auth]") {
  test::temp_dir dir{"switchyard-cluster-auth"};
  const auto file = (dir.path() / "auth.toml").string();
  const auto hash = [](const std::string& token) { return auth::to_hex(auth::sha256(token)); };
  std::ofstream(file) << "[principals.gw1]\ntoken_sha256 = [\"" << hash("gw1-token")
                      << "\"]\ninbox = { allow = [\"gw1\"] }\nregistry_put = { allow = [\"user.*\"] }\n"
                      << "[principals.gw2]\ntoken_sha256 = [\"" << hash("gw2-token")
                      << "\"]\ninbox = { allow = [\"gw2\"] }\nregistry_put = { allow = [\"user.*\"] }\n"
                      << "[principals.svc]\ntoken_sha256 = [\"" << hash("svc-token")
                      << "\"]\nsend = { allow = [\"user.*\"] }\n";
  cluster_fixture f;
  for (const auto* id : {"a", "b"}) {
    auto c = f.config(id);
    c.auth_file = file;
    f.start(c);
  }
  f.converge(2);
  f.settle();
  const auto as = [&](const std::string& id, const std::string& token) {
    client_options o;
    o.port = f.node(id).port();
    o.token = token;
    auto c = client::connect(o);
    REQUIRE(c);
    return std::move(*c);
  };
  test::collector<std::string> got1, got2;
  auto gw1 = as("a", "gw1-token");
  auto l1 = gw1->lease_grant(30s);
  REQUIRE(l1);
  REQUIRE_FALSE(gw1->open_inbox("gw1", l1->id, [&](const inbox_message& m) { got1.add(text(m)); }));
  auto gw2 = as("b", "gw2-token");
  auto l2 = gw2->lease_grant(30s);
  REQUIRE(l2);
  REQUIRE_FALSE(gw2->open_inbox("gw2", l2->id, [&](const inbox_message& m) { got2.add(text(m)); }));
  // Keys owned by either node: the check holds on a remote owner and on
  // the putting node itself.
  for (int i = 0; i < 20; ++i) REQUIRE(gw1->registry_put("user." + std::to_string(i), "gw1", l1->id));
  for (int i = 0; i < 20; ++i) {
    auto taken = gw2->registry_put("user." + std::to_string(i), "gw2", l2->id);
    REQUIRE_FALSE(taken);
    CHECK(taken.error() == errc::forbidden);
  }
  // The refused puts left nothing behind on b: sends still reach gw1.
  auto svc = as("b", "svc-token");
  for (int i = 0; i < 20; ++i) {
    auto sent = svc->send("user." + std::to_string(i), "mine");
    REQUIRE(sent);
    CHECK(*sent == "gw1");
  }
  REQUIRE(wait_until([&] { return got1.count == 20; }));
  CHECK(got2.count == 0);
}

TEST_CASE("a gateway's routes refused unavailable while it reconnects are restored once their owners are back",
          "[cluster][e2e]") {
  cluster_fixture f;
  f.start("a");
  f.start("b");
  f.converge(2);
  f.settle();
  constexpr int users = 30;
  client_options o;
  o.client_name = "gateway";
  o.addresses = {"127.0.0.1:" + std::to_string(f.node("a").port()), "127.0.0.1:" + std::to_string(f.node("b").port())};
  o.reconnect.base_delay = 50ms;
  std::atomic<bool> restored{false};  // after the restore's first answers
  o.on_reconnect = [&](const reconnect_info&) { restored = true; };
  auto conn = client::connect(o);
  REQUIRE(conn);
  auto& gw = **conn;
  test::collector<std::string> got;
  auto lease = gw.lease_grant(30s);
  REQUIRE(lease);
  REQUIRE_FALSE(gw.open_inbox("gw-1", lease->id, [&](const inbox_message& m) { got.add(text(m)); }));
  for (int i = 0; i < users; ++i) REQUIRE(gw.registry_put("user:" + std::to_string(i), "gw-1", lease->id));
  // The client picked its first node at random: `home` is the one it is on.
  const std::string home = test::connect_to(f.node("a"))->server_instance() == gw.server_instance() ? "a" : "b";
  const std::string other = home == "a" ? "b" : "a";
  // etcd goes: no node may act as an owner. Then the gateway's node goes,
  // and its client restores the gateway on the other: a new lease, the
  // routes put again, and the other must refuse those of its own
  // partitions (unavailable).
  // The client's log says when a restored put was refused and is retried.
  // (Shared: the sink outlives the test if a REQUIRE ends it early.)
  auto retried = std::make_shared<std::atomic<int>>(0);
  set_log_sink([retried](log_level, std::string_view m) {
    if (m.find("not restored yet") != std::string_view::npos) ++*retried;
  });
  f.etcd.kill(0);
  REQUIRE(wait_until([&] { return !f.node(other).live_metrics().cluster_in_standing; }, 10s));
  f.node(home).stop();
  REQUIRE(wait_until([&] { return restored.load(); }, 10s));
  CHECK(retried->load() > 0);  // the path under test ran
  // etcd back: the other node takes every partition once the stopped
  // one's etcd lease lapsed; the client's retries put every route again.
  f.etcd.restart(0);
  REQUIRE(wait_until([&] { return f.node(other).live_metrics().cluster_in_standing; }, 15s));
  auto svc = test::connect_to(f.node(other), "service");
  for (int i = 0; i < users; ++i) {
    const auto key = "user:" + std::to_string(i);
    std::expected<std::string, std::error_code> sent;
    REQUIRE(wait_until([&] { return (sent = svc->send(key, "back")).has_value(); }, 15s));
    CHECK(*sent == "gw-1");
  }
  REQUIRE(wait_until([&] { return got.count >= users; }));
  set_log_sink(nullptr);
}

// Durable streams across nodes (docs/cluster.md, "Durable streams"): real
// etcd and nats-server processes, switchyard nodes with real LMDB logs in
// temporary folders, real clients.

#include "broker/cluster/node_link_generated.h"
#include "broker/cluster/partition_map.hpp"
#include "protocol/errc.hpp"
#include "storage/sequence_log.hpp"
#include "tests/admin/cli_runner.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

using namespace switchyard;
using namespace std::chrono_literals;
using test::cluster_fixture;
using test::str;
using test::text;
using test::wait_until;

namespace {

// A cluster whose nodes keep a sequence log, each in its own folder (kept
// across a node's restart).
struct log_cluster {
  cluster_fixture f;
  std::map<std::string, test::temp_dir> dirs;

  broker::server_config config(const std::string& id) {
    auto c = f.config(id);
    c.data_dir = dirs[id].path().string();
    return c;
  }
  test::test_server& start(const std::string& id) { return f.start(config(id)); }
  void start_settled(std::initializer_list<const char*> ids) {
    for (const auto* id : ids) start(id);
    f.converge(ids.size());
    f.settle();
  }
  // The node whose log holds the streams of one partition (the only one
  // any test stream fell in so far), or "".
  std::string holder() {
    std::string found;
    for (auto& [id, n] : f.nodes)
      if (n->running() && n->live_metrics().cluster_stream_partitions > 0) found = id;
    return found;
  }
  // Of two nodes a and b: the holder of the one partition with streams so
  // far, and the other.
  std::pair<std::string, std::string> holder_and_other() {
    const auto h = holder();
    REQUIRE_FALSE(h.empty());
    return {h, h == "a" ? "b" : "a"};
  }
  // An admin client of node `id` (cluster takeover).
  std::unique_ptr<client> admin_of(const std::string& id) {
    client_options o;
    o.port = f.node(id).port();
    o.admin = true;
    auto admin = client::connect(o);
    REQUIRE(admin);
    return std::move(*admin);
  }
  // How many records of `stream` node `id`'s log holds (the node stopped).
  std::uint64_t records_in_log(const std::string& id, const std::string& stream) {
    storage::log_options o;
    o.dir = dirs[id].path() / "log";
    o.read_only = true;
    auto log = storage::sequence_log::open(o);
    REQUIRE(log);
    auto info = (*log)->info(stream);
    return info ? info->records : 0;
  }
};

}  // namespace

TEST_CASE("appends through every node to a stream one node holds get one gap-free sequence, durable in its log",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b", "c"});
  std::map<std::string, std::unique_ptr<client>> clients;
  for (const auto* id : {"a", "b", "c"}) clients[id] = test::connect_to(c.f.node(id), std::string("svc-") + id);
  constexpr int appends = 90;
  std::uint64_t epoch = 0;
  for (int i = 1; i <= appends; ++i) {
    auto& through = clients[std::string(1, static_cast<char>('a' + i % 3))];
    auto ack = through->append("orders", text("o" + std::to_string(i)));
    REQUIRE(ack);
    CHECK(ack->seq == static_cast<std::uint64_t>(i));
    if (i == 1) epoch = ack->epoch;
    CHECK(ack->epoch == epoch);
  }
  const auto holder = c.holder();
  REQUIRE_FALSE(holder.empty());
  // Read back through every node: the holder's records, in order.
  for (auto& [id, cl] : clients) {
    auto r = cl->read("orders");
    REQUIRE(r);
    CHECK(r->epoch == epoch);
    REQUIRE(r->records.size() == appends);
    for (int i = 0; i < appends; ++i)
      CHECK(str(r->records[static_cast<std::size_t>(i)].payload) == "o" + std::to_string(i + 1));
    auto info = cl->stream_info("orders");
    REQUIRE(info);
    CHECK(info->last_seq == appends);
  }
  std::uint64_t forwarded = 0, served = 0;
  for (const auto* id : {"a", "b", "c"}) {
    const auto m = c.f.node(id).live_metrics();
    forwarded += m.cluster_stream_forwarded;
    served += m.cluster_stream_served;
  }
  CHECK(forwarded >= appends * 2 / 3);  // the appends through the two other nodes, and their reads
  CHECK(served == forwarded);
  // Only the holder's log has the stream, with every record.
  clients.clear();
  for (const auto* id : {"a", "b", "c"}) c.f.node(id).stop();
  for (const auto* id : {"a", "b", "c"}) CHECK(c.records_in_log(id, "orders") == (id == holder ? appends : 0u));
}

TEST_CASE("a durable publish on one node reaches subscribers on every node once each, with the holder's positions",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b", "c"});
  struct seen {
    std::mutex mu;
    std::vector<std::pair<std::string, std::uint64_t>> got;  // payload, seq
  };
  std::map<std::string, seen> per_node;
  std::map<std::string, std::unique_ptr<client>> subs;
  for (const auto* id : {"a", "b", "c"}) {
    subs[id] = test::connect_to(c.f.node(id), std::string("sub-") + id);
    auto& s = per_node[id];
    REQUIRE(subs[id]->subscribe_durable("room.1", [&s](const message& m) {
      std::lock_guard lock(s.mu);
      s.got.emplace_back(std::string(m.payload_text()), m.seq);
    }));
  }
  auto pub = test::connect_to(c.f.node("b"), "pub");
  constexpr int messages = 30;
  for (int i = 1; i <= messages; ++i) {
    auto ack = pub->publish_durable("room.1", "room.1", text("m" + std::to_string(i)));
    REQUIRE(ack);
    CHECK(ack->seq == static_cast<std::uint64_t>(i));
  }
  for (auto& [id, s] : per_node) {
    REQUIRE(wait_until([&] {
      std::lock_guard lock(s.mu);
      return s.got.size() >= messages;
    }));
    std::lock_guard lock(s.mu);
    CHECK(s.got.size() == messages);
    for (int i = 0; i < messages; ++i) {
      CHECK(s.got[static_cast<std::size_t>(i)].first == "m" + std::to_string(i + 1));
      CHECK(s.got[static_cast<std::size_t>(i)].second == static_cast<std::uint64_t>(i + 1));
    }
  }
}

TEST_CASE("many appends through a node that does not hold the stream travel many to a NATS message, each way",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  REQUIRE(test::connect_to(c.f.node("a"), "first")->append("metrics", text("m0")));
  const auto [holder, other] = c.holder_and_other();
  auto cl = test::connect_to(c.f.node(other), "svc");
  constexpr int appends = 2000;
  const auto out_before = c.f.node(other).live_metrics().cluster_messages_out;
  const auto back_before = c.f.node(holder).live_metrics().cluster_messages_out;
  std::mutex mu;
  std::vector<std::uint64_t> seqs;
  int failed = 0;
  for (int i = 1; i <= appends; ++i) {
    const auto payload = "m" + std::to_string(i);
    cl->async_append("metrics", std::as_bytes(std::span(payload.data(), payload.size())),
                     [&](std::expected<append_ack, std::error_code> r) {
                       std::lock_guard lock(mu);
                       if (r)
                         seqs.push_back(r->seq);
                       else
                         ++failed;
                     });
  }
  REQUIRE_FALSE(cl->flush());  // answered once every forwarded append was
  {
    std::lock_guard lock(mu);
    CHECK(failed == 0);
    REQUIRE(seqs.size() == appends);
    for (int i = 0; i < appends; ++i) CHECK(seqs[static_cast<std::size_t>(i)] == static_cast<std::uint64_t>(i + 2));
  }
  // One message per request (and per answer) would be 2,000 each way;
  // batched per loop turn, several to a message.
  CHECK(c.f.node(other).live_metrics().cluster_messages_out - out_before <= appends / 4);
  CHECK(c.f.node(holder).live_metrics().cluster_messages_out - back_before <= appends / 4);
  CHECK(c.f.node(other).live_metrics().cluster_stream_forwarded >= appends);
}

namespace {

// What a gateway's durable inbox received, in order.
struct inbox_log {
  struct entry {
    std::string payload;
    std::uint64_t seq = 0;
    std::uint64_t epoch = 0;
    bool replayed = false;
  };
  std::mutex mu;
  std::vector<entry> got;
  void add(const inbox_message& m) {
    std::lock_guard lock(mu);
    got.push_back({std::string(m.payload_text()), m.seq, m.epoch, m.replayed});
  }
  std::vector<entry> snapshot() {
    std::lock_guard lock(mu);
    return got;
  }
};

}  // namespace

TEST_CASE(
    "a durable send reaches a gateway on another node with its place in the holder's log, and a gateway "
    "back on another connection reads what it missed",
    "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b", "c"});
  const std::string stream = "conv:1";
  const std::vector<std::string_view> alice{"user:alice"};
  std::uint64_t epoch = 0;
  {
    // The first record names the stream's holder (nobody has a route yet).
    auto first = test::connect_to(c.f.node("a"), "svc")->send_durable(alice, stream, text("zero"));
    if (!first) FAIL(first.error().message());
    CHECK(first->routed == 0);
    CHECK(first->seq == 1);
    epoch = first->epoch;
  }
  const auto holder = c.holder();
  REQUIRE_FALSE(holder.empty());
  // The gateway on one of the other nodes, the service on the third.
  std::vector<std::string> others;
  for (const auto* id : {"a", "b", "c"})
    if (id != holder) others.emplace_back(id);
  const auto& home = others[0];
  const auto& via = others[1];
  auto svc = test::connect_to(c.f.node(via), "svc");

  inbox_log live;
  auto gw = test::connect_to(c.f.node(home), "gateway");
  auto lease = gw->lease_grant(30s);
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox_durable("gw-1", lease->id, [&](const inbox_message& m) { live.add(m); }));
  REQUIRE(gw->registry_put("user:alice", "gw-1", lease->id));
  constexpr std::uint64_t sends = 5;
  for (std::uint64_t i = 1; i <= sends; ++i) {
    auto r = svc->send_durable(alice, stream, text("m" + std::to_string(i)));
    REQUIRE(r);
    CHECK(r->seq == i + 1);
    CHECK(r->epoch == epoch);
    CHECK(r->routed == 1);
    REQUIRE(r->gateways.size() == 1);
    CHECK(r->gateways[0] == "gw-1");
  }
  REQUIRE(wait_until([&] { return live.snapshot().size() >= sends; }));
  REQUIRE_FALSE(svc->flush());
  {
    const auto got = live.snapshot();
    REQUIRE(got.size() == sends);  // once each
    for (std::uint64_t i = 1; i <= sends; ++i) {
      const auto& e = got[i - 1];
      CHECK(e.payload == "m" + std::to_string(i));
      CHECK(e.seq == i + 1);
      CHECK(e.epoch == epoch);
      CHECK_FALSE(e.replayed);
    }
  }
  CHECK(c.f.node(holder).live_metrics().cluster_sends_forwarded > 0);

  // The gateway goes; three records are sent meanwhile (delivered to
  // nobody: its inbox is closed).
  const auto positions = gw->inbox_stream_positions("gw-1");
  REQUIRE(positions.at(stream).seq == sends + 1);
  gw.reset();
  for (std::uint64_t i = sends + 1; i <= sends + 3; ++i)
    REQUIRE(svc->send_durable(alice, stream, text("m" + std::to_string(i))));

  // Back on a new connection (and lease) of the same node: it reads what
  // it missed from the holder, through its node, then gets live sends.
  inbox_log back;
  auto gw2 = test::connect_to(c.f.node(home), "gateway");
  auto lease2 = gw2->lease_grant(30s);
  REQUIRE(lease2);
  durable_options resume;
  resume.resume_from = positions;
  REQUIRE_FALSE(gw2->open_inbox_durable(
      "gw-1", lease2->id, [&](const inbox_message& m) { back.add(m); }, resume));
  REQUIRE(gw2->registry_put("user:alice", "gw-1", lease2->id));
  REQUIRE(wait_until([&] { return back.snapshot().size() >= 3; }));
  auto last = svc->send_durable(alice, stream, text("m9"));
  REQUIRE(last);
  CHECK(last->routed == 1);
  REQUIRE(wait_until([&] { return back.snapshot().size() >= 4; }));
  REQUIRE_FALSE(svc->flush());
  const auto got = back.snapshot();
  REQUIRE(got.size() == 4);
  for (std::uint64_t i = 0; i < 4; ++i) {
    CHECK(got[i].payload == "m" + std::to_string(sends + 1 + i));
    CHECK(got[i].seq == sends + 2 + i);
    CHECK(got[i].epoch == epoch);
  }
  CHECK(got[0].replayed);
  CHECK_FALSE(got[3].replayed);
}

TEST_CASE("a durable send with an expiry reaches a gateway on another node with its place and the time it has left",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b", "c"});
  const std::string stream = "conv:2";
  const std::vector<std::string_view> alice{"user:alice"};
  auto first = test::connect_to(c.f.node("a"), "svc")->send_durable(alice, stream, text("zero"));
  REQUIRE(first);
  const auto holder = c.holder();
  REQUIRE_FALSE(holder.empty());
  std::vector<std::string> others;
  for (const auto* id : {"a", "b", "c"})
    if (id != holder) others.emplace_back(id);
  const auto& home = others[0];
  {
    // The offer fields (the time left) go to gateways with the flag on.
    client_options o;
    o.port = c.f.node(home).port();
    o.admin = true;
    auto admin = client::connect(o);
    REQUIRE(admin);
    REQUIRE((*admin)->set_flag("offers", 100));
  }
  struct seen {
    std::uint64_t seq = 0;
    std::chrono::milliseconds time_left{0};
  };
  test::collector<seen> got;
  auto gw = test::connect_to(c.f.node(home), "gateway");
  auto lease = gw->lease_grant(30s);
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox_durable("gw-2", lease->id, [&](const inbox_message& m) {
    got.add({m.seq, m.time_left});
  }));
  REQUIRE(gw->registry_put("user:alice", "gw-2", lease->id));
  auto svc = test::connect_to(c.f.node(others[1]), "svc");
  const auto r = svc->send_durable(alice, stream, text("soon"), 30s);
  REQUIRE(r);
  CHECK(r->routed == 1);
  CHECK(r->seq == 2);
  REQUIRE(wait_until([&] { return got.count == 1; }));
  const auto m = got.snapshot().front();
  CHECK(m.seq == 2);
  CHECK(m.time_left > 0ms);
  CHECK(m.time_left <= 30s);
}

TEST_CASE("a durable send whose key's owner is silent is answered in time with its place, the key not routed",
          "[cluster][e2e]") {
  log_cluster c;
  for (const auto* id : {"a", "b", "c"}) {
    auto cfg = c.config(id);
    cfg.cluster_lease_ttl_s = 10;  // the hold below must not cost the owner its membership
    cfg.cluster_forward_timeout = 1000ms;
    c.f.start(cfg);
  }
  c.f.converge(3);
  c.f.settle();
  const std::string stream = "conv:3";
  auto first = test::connect_to(c.f.node("a"), "svc")
                   ->send_durable(std::vector<std::string_view>{"user:x"}, stream, text("zero"));
  REQUIRE(first);
  const auto holder = c.holder();
  REQUIRE_FALSE(holder.empty());
  // A user owned by another node than the holder; its gateway and the
  // service on the holder: only the owner is elsewhere.
  const std::string owner = holder == "a" ? "b" : "a";
  const auto user = test::user_owned_by(owner, {"a", "b", "c"});
  auto gw = test::connect_to(c.f.node(holder), "gateway");
  auto lease = gw->lease_grant(30s);
  REQUIRE(lease);
  test::collector<std::string> got;
  REQUIRE_FALSE(
      gw->open_inbox("gw-3", lease->id, [&](const inbox_message& m) { got.add(std::string(m.payload_text())); }));
  REQUIRE(gw->registry_put(user, "gw-3", lease->id));
  auto svc = test::connect_to(c.f.node(holder), "svc");
  const std::vector<std::string_view> keys{user};
  {
    auto hold = c.f.node(owner).hold_loop();
    const auto r = svc->send_durable(keys, stream, text("late"));
    // Never outcome_unknown: the record is durable; the key counts as not
    // routed (the gateway finds it by reading).
    REQUIRE(r);
    CHECK(r->seq == 2);
    CHECK(r->routed == 0);
  }
  // Once the owner is back, the send is delivered late, once.
  REQUIRE(wait_until([&] { return got.count >= 1; }));
  REQUIRE_FALSE(svc->flush());
  CHECK(got.count == 1);
}

TEST_CASE("a stream list on any node lists the streams of every node's log in name order, each once",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b", "c"});
  // Thirty streams: their partitions' holders are spread over the nodes.
  std::vector<std::string> names;
  for (int i = 0; i < 30; ++i) names.push_back(fmt::format("list:{:02}", i));
  auto svc = test::connect_to(c.f.node("a"), "svc");
  for (std::size_t i = 0; i < names.size(); ++i) REQUIRE(svc->append(names[i], text("r" + std::to_string(i))));
  std::size_t holders = 0;
  for (const auto* id : {"a", "b", "c"}) holders += c.f.node(id).live_metrics().cluster_stream_partitions > 0;
  REQUIRE(holders >= 2);
  for (const auto* id : {"a", "b", "c"}) {
    auto admin = c.admin_of(id);
    bool more = true;
    const auto all = admin->stream_list("list:", 0, &more);
    REQUIRE(all);
    CHECK_FALSE(more);
    std::vector<std::string> got;
    for (const auto& s : *all) {
      got.push_back(s.name);
      CHECK(s.records == 1);
    }
    CHECK(got == names);
    // A limit cuts the merged list, and says so.
    const auto first = admin->stream_list("list:", 10, &more);
    REQUIRE(first);
    CHECK(more);
    REQUIRE(first->size() == 10);
    CHECK(first->front().name == "list:00");
    CHECK(first->back().name == "list:09");
  }
}

TEST_CASE("a stream whose holder is gone is answered unavailable, and continues where it was when the holder is back",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  auto cb = test::connect_to(c.f.node("b"), "svc-b");
  auto first = ca->append("ledger", text("one"));
  REQUIRE(first);
  const auto [holder, other] = c.holder_and_other();
  auto& survivor = other == "a" ? ca : cb;
  (holder == "a" ? ca : cb).reset();
  c.f.node(holder).stop();
  c.f.converge(1);
  c.f.settle();  // the survivor owns every partition now, the stream still lives on the holder
  auto during = survivor->append("ledger", text("two"));
  REQUIRE_FALSE(during);
  CHECK(during.error() == errc::unavailable);
  auto read = survivor->read("ledger");
  REQUIRE_FALSE(read);
  CHECK(read.error() == errc::unavailable);
  CHECK(c.f.node(other).live_metrics().cluster_unavailable >= 2);
  // The holder back (same node id, same log): the stream goes on.
  c.f.nodes.erase(holder);  // its log closed first
  c.start(holder);
  c.f.converge(2);
  c.f.settle();
  std::expected<append_ack, std::error_code> after;
  REQUIRE(wait_until([&] { return (after = survivor->append("ledger", text("three"))).has_value(); }, 10s));
  CHECK(after->seq == 2);
  CHECK(after->epoch == first->epoch);
}

TEST_CASE("a forwarded stream request whose holder does not answer in time is answered outcome_unknown",
          "[cluster][e2e]") {
  log_cluster c;
  for (const auto* id : {"a", "b"}) {
    auto cfg = c.config(id);
    cfg.cluster_lease_ttl_s = 10;  // the hold below must not cost the holder its membership
    cfg.cluster_forward_timeout = 300ms;
    c.f.start(cfg);
  }
  c.f.converge(2);
  c.f.settle();
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  REQUIRE(ca->append("audit", text("one")));
  const auto [holder, other] = c.holder_and_other();
  auto cl = test::connect_to(c.f.node(other), "svc");
  {
    auto hold = c.f.node(holder).hold_loop();
    auto ack = cl->append("audit", text("two"));
    REQUIRE_FALSE(ack);
    CHECK(ack.error() == errc::outcome_unknown);
  }
  CHECK(c.f.node(other).live_metrics().cluster_outcome_unknown == 1);
  // The holder ran it once its loop was back (the answer came too late):
  // the outcome was unknown, not a loss. The next append follows it.
  auto next = cl->append("audit", text("three"));
  REQUIRE(next);
  CHECK(next->seq == 3);
}

TEST_CASE("a stream stays with the node that holds it when its partition moves to a node that joins later",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a"});
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  // Streams in many partitions: a, alone, owns and so holds them all.
  constexpr int streams = 40;
  std::set<std::uint32_t> partitions;
  for (int s = 0; s < streams; ++s) {
    REQUIRE(ca->append("s" + std::to_string(s), text("first")));
    partitions.insert(broker::partition_map::partition_of("s" + std::to_string(s)));
  }
  CHECK(c.f.node("a").live_metrics().cluster_stream_partitions == partitions.size());
  c.start("b");
  c.start("c");
  c.f.converge(3);
  c.f.settle();  // about two thirds of a's partitions moved to b and c
  CHECK(c.f.node("a").live_metrics().cluster_partitions_owned < 512);
  auto cb = test::connect_to(c.f.node("b"), "svc-b");
  for (int s = 0; s < streams; ++s) {
    auto ack = cb->append("s" + std::to_string(s), text("second"));
    REQUIRE(ack);
    CHECK(ack->seq == 2);  // the same stream, not a new one on the partition's new owner
  }
  CHECK(c.f.node("a").live_metrics().cluster_stream_partitions == partitions.size());
  CHECK(c.f.node("b").live_metrics().cluster_stream_partitions == 0);
  CHECK(c.f.node("c").live_metrics().cluster_stream_partitions == 0);
}

TEST_CASE(
    "a takeover of a gone holder's streams starts them again on the survivors with new epochs, and the old "
    "holder's log is refused there",
    "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  auto first = ca->append("ledger", text("one"));
  REQUIRE(first);
  REQUIRE(ca->append("ledger", text("two")));
  const auto [holder, other] = c.holder_and_other();
  ca.reset();
  auto admin = c.admin_of(other);
  // Refused while the holder is a member, and for the node asked.
  auto member = admin->cluster_takeover(holder);
  REQUIRE_FALSE(member);
  CHECK(member.error() == errc::bad_request);
  auto self = admin->cluster_takeover(other);
  REQUIRE_FALSE(self);
  CHECK(self.error() == errc::bad_request);

  c.f.node(holder).stop();
  c.f.nodes.erase(holder);
  c.f.converge(1);
  auto svc = test::connect_to(c.f.node(other), "svc");
  auto during = svc->append("ledger", text("three"));
  REQUIRE_FALSE(during);
  CHECK(during.error() == errc::unavailable);

  // The operator's command (the real switchyard-cli).
  const auto [code, out] = test::cli(c.f.node(other).port(), "cluster takeover " + holder + " --yes --json");
  INFO(out);
  CHECK(code == 0);
  CHECK(out == "{\"address\":\"127.0.0.1:" + std::to_string(c.f.node(other).port()) + "\",\"node_id\":\"" + holder +
                   "\",\"moved\":[{\"partition\":" + std::to_string(broker::partition_map::partition_of("ledger")) +
                   ",\"holder\":\"" + other + "\"}]}\n");
  // The stream starts again here: a new epoch, from sequence 1 (the two
  // records on the gone holder are the declared loss).
  std::expected<append_ack, std::error_code> again;
  REQUIRE(wait_until([&] { return (again = svc->append("ledger", text("four"))).has_value(); }, 10s));
  CHECK(again->seq == 1);
  CHECK(again->epoch != first->epoch);
  // A second takeover finds nothing left to move.
  auto nothing = admin->cluster_takeover(holder);
  REQUIRE(nothing);
  CHECK(nothing->partitions.empty());
  // The old holder, started again on its log: refused (its records are a
  // history the cluster no longer has).
  try {
    c.start(holder);
    FAIL("the old holder started on a log whose streams were taken over");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("a takeover declared it lost") && Catch::Contains("ledger"));
  }
}

TEST_CASE("a Ping after an append that waits for its partition's holder to be named is answered after the Appended",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a"});
  auto cl = test::connect_to(c.f.node("a"), "svc");
  // Fresh streams: each one's partition gets its holder (a, the owner) first.
  for (int i = 0; i < 5; ++i) {
    std::atomic<bool> appended{false};
    const auto payload = text("x");
    cl->async_append("fresh-" + std::to_string(i), payload,
                     [&](std::expected<append_ack, std::error_code> r) { appended = r.has_value(); });
    REQUIRE_FALSE(cl->flush());
    CHECK(appended);
  }
}

TEST_CASE("a holder back with a new data folder refuses to start until its lost streams are declared lost",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  auto first = ca->append("ledger", text("one"));
  REQUIRE(first);
  const auto [holder, other] = c.holder_and_other();
  ca.reset();
  c.f.node(holder).stop();
  c.f.nodes.erase(holder);
  c.dirs.erase(holder);  // its disk is gone: the next start gets an empty folder
  c.f.converge(1);
  try {
    c.start(holder);
    FAIL("a holder started on a new data folder as if it still had its streams");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("new or replaced data folder") && Catch::Contains("cluster takeover"));
  }
  c.f.nodes.erase(holder);
  c.f.converge(1);  // the refused start left the cluster
  auto admin = c.admin_of(other);
  auto moved = admin->cluster_takeover(holder);
  REQUIRE(moved);
  CHECK(moved->partitions.size() == 1);
  // Declared: it starts, and the stream goes on (again) on its new holder.
  c.start(holder);
  c.f.converge(2);
  auto ch = test::connect_to(c.f.node(holder), "svc");
  std::expected<append_ack, std::error_code> again;
  REQUIRE(wait_until([&] { return (again = ch->append("ledger", text("two"))).has_value(); }, 10s));
  CHECK(again->seq == 1);
  CHECK(again->epoch != first->epoch);
}

TEST_CASE("a holder cut off while its streams are taken over stops serving them, drains and stops", "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  auto ca = test::connect_to(c.f.node("a"), "svc-a");
  REQUIRE(ca->append("ledger", text("one")));
  const auto [holder, other] = c.holder_and_other();
  ca.reset();
  auto at_holder = test::connect_to(c.f.node(holder), "svc-h");
  auto admin = c.admin_of(other);
  {
    // The holder's loop stuck past its lease (TTL 2 s): the other node
    // drops it, and an operator declares its streams lost meanwhile.
    auto hold = c.f.node(holder).hold_loop();
    REQUIRE(wait_until([&] { return c.f.node(other).live_metrics().cluster_members == 1; }, 10s));
    auto moved = admin->cluster_takeover(holder);
    REQUIRE(moved);
    CHECK(moved->partitions.size() == 1);
  }
  // Back, the holder serves nothing of those streams: it learns of the
  // takeover, drains and stops.
  auto late = at_holder->append("ledger", text("late"));
  CHECK_FALSE(late.has_value());
  REQUIRE(c.f.node(holder).wait_finished(20s));
  CHECK(c.f.node(holder).streams_taken_over());
}

TEST_CASE("a stream request from another node with a malformed frame is answered bad_request, and the holder serves on",
          "[cluster][e2e]") {
  log_cluster c;
  c.start_settled({"a", "b"});
  auto svc = test::connect_to(c.f.node("a"), "svc");
  REQUIRE(svc->append("orders", text("o1")));
  const auto [holder, other] = c.holder_and_other();

  // What the holder answers `other`, read on NATS beside `other` itself.
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  cluster::nats_link_options o;
  o.servers = {c.f.nats->url()};
  cluster::nats_link watcher(io.get_executor(), o);
  REQUIRE(watcher.start());
  constexpr std::uint64_t ticket = 777'000'777;
  std::mutex mu;
  std::optional<std::pair<std::uint16_t, std::string>> answer;  // code, error
  std::atomic<bool> subscribed{false};
  REQUIRE(watcher.subscribe(
      c.f.name + ".node." + other,
      [&](const cluster::inbound_message& m) {
        flatbuffers::Verifier verifier(reinterpret_cast<const std::uint8_t*>(m.payload.data()), m.payload.size());
        if (!broker::link::VerifyLinkMessageBuffer(verifier)) return;
        const auto* msg = broker::link::GetLinkMessage(m.payload.data());
        // Answers travel batched (StreamBatch).
        const auto* batch = msg->body_as_StreamBatch();
        if (batch == nullptr || batch->answers() == nullptr) return;
        for (const auto* a : *batch->answers()) {
          if (a->ticket() != ticket) continue;
          std::lock_guard lock(mu);
          answer.emplace(a->code(), a->error() ? a->error()->str() : "");
        }
      },
      [&](std::error_code ec) { subscribed = !ec; }));
  std::thread loop([&] { io.run(); });
  const bool ready = wait_until([&] { return subscribed.load(); });

  // From `other`, with its incarnation, a request for the holder's stream
  // whose frame is no frame at all.
  flatbuffers::FlatBufferBuilder b;
  const std::string junk = "no frame here";
  const auto request = broker::link::CreateStreamRequest(
      b, b.CreateString(other), ticket, b.CreateString("orders"),
      b.CreateVector(reinterpret_cast<const std::uint8_t*>(junk.data()), junk.size()), 0);
  b.Finish(
      broker::link::CreateLinkMessage(b, b.CreateString(other), c.f.incarnation_of(other), 1000,
                                      broker::link::Body::StreamRequest, request.Union(), c.f.incarnation_of(holder)),
      broker::link::LinkMessageIdentifier());
  if (ready) c.f.nats_publish(holder, std::as_bytes(std::span(b.GetBufferPointer(), b.GetSize())));
  const bool answered = ready && wait_until([&] {
                          std::lock_guard lock(mu);
                          return answer.has_value();
                        });
  watcher.stop();
  work.reset();
  io.stop();
  loop.join();
  REQUIRE(ready);
  REQUIRE(answered);
  CHECK(answer->first == static_cast<std::uint16_t>(protocol::errc::bad_request));
  CHECK_THAT(answer->second, Catch::Contains("malformed"));

  // The holder serves its stream on.
  auto at_holder = test::connect_to(c.f.node(holder), "svc-holder");
  const auto next = at_holder->append("orders", text("o2"));
  REQUIRE(next);
  CHECK(next->seq == 2);
}

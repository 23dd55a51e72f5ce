#pragma once
// A cluster for end-to-end tests: one etcd member, one nats-server
// (max_payload large enough for the default --max-frame) and the
// switchyard nodes a test starts, in this process, on 127.0.0.1 port 0.

#include "broker/cluster/partition_map.hpp"
#include "cluster/etcd_client.hpp"
#include "cluster/nats_link.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/nats_process.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>
#include <string>

namespace switchyard::test {

// The first user:<i> whose partition's preferred owner among `members` is
// `owner` (the owner it gets once the cluster settled with those members).
inline std::string user_owned_by(const std::string& owner, const std::vector<std::string>& members) {
  broker::cluster_view v;
  for (const auto& id : members) {
    broker::cluster_member m;
    m.node_id = id;
    v.members.push_back(m);
  }
  for (int i = 0; i < 100000; ++i) {
    const auto key = "user:" + std::to_string(i);
    if (broker::partition_map::preferred_owner(v, broker::partition_map::partition_of(key))->node_id == owner)
      return key;
  }
  FAIL("no key is owned by " << owner);
  return {};
}

// One etcd member, one nats-server (max_payload large enough for the
// default --max-frame) and the nodes a test starts.
struct cluster_fixture {
  test::etcd_cluster etcd{1};
  std::unique_ptr<test::nats_process> nats = std::make_unique<test::nats_process>("max_payload: 2MB");
  std::string name = "t" + std::to_string(std::random_device{}());
  std::map<std::string, std::unique_ptr<test::test_server>> nodes;

  broker::server_config config(const std::string& id) const {
    auto c = test::test_server::default_config();
    c.cluster_node_id = id;
    c.cluster_name = name;
    c.cluster_etcd = etcd.endpoints();
    c.cluster_nats = {nats->url()};
    c.cluster_lease_ttl_s = 2;
    c.cluster_interest_timeout = std::chrono::milliseconds(3000);
    return c;
  }
  test::test_server& start(const std::string& id) { return start(config(id)); }
  test::test_server& start(broker::server_config c) {
    const auto id = c.cluster_node_id;
    auto& n = nodes[id] = std::make_unique<test::test_server>(std::move(c));
    return *n;
  }
  test::test_server& node(const std::string& id) { return *nodes.at(id); }
  // Node `id`'s incarnation (its etcd lease), as its member key says.
  std::int64_t incarnation_of(const std::string& id) const {
    cluster::etcd_client client(etcd.endpoints(), std::chrono::seconds(2));
    auto kv = client.get("/switchyard/" + name + "/members/" + id);
    REQUIRE(kv);
    REQUIRE(kv->has_value());
    return (*kv)->lease;
  }
  // Publishes raw bytes on NATS to node `id`'s subject, as another node would.
  void nats_publish(const std::string& id, std::span<const std::byte> bytes) const {
    asio::io_context io;
    cluster::nats_link_options o;
    o.servers = {nats->url()};
    cluster::nats_link link(io.get_executor(), o);
    REQUIRE(link.start());
    REQUIRE(link.publish(name + ".node." + id, bytes));
    link.stop();  // hands what is queued to cnats first
  }
  // Starts nodes `ids` with the default config, then converge() and settle().
  void start_settled(std::initializer_list<const char*> ids) {
    for (const auto* id : ids) start(id);
    converge(ids.size());
    settle();
  }
  // Every running node sees `members` members.
  void converge(std::size_t members) {
    for (auto& [id, n] : nodes)
      if (n->running()) REQUIRE(test::wait_until([&] { return n->live_metrics().cluster_members == members; }));
  }
  // Every partition has an owner among the running nodes, with its route
  // directory complete, and every running node's view says so.
  void settle() {
    REQUIRE(test::wait_until(
        [&] {
          std::size_t owned = 0;
          for (auto& [id, n] : nodes) {
            if (!n->running()) continue;
            const auto m = n->live_metrics();
            if (m.cluster_partitions_rebuilding != 0 || m.cluster_partitions_unowned != 0) return false;
            owned += m.cluster_partitions_owned;
          }
          return owned == 1024;
        },
        std::chrono::seconds(20)));
  }
};

}  // namespace switchyard::test

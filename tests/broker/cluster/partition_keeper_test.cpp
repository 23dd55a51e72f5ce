// partition_keeper against a real etcd member: claims and give-backs in
// batched, fenced transactions.

#include "broker/cluster/partition_keeper.hpp"

#include "broker/cluster/partition_map.hpp"
#include "cluster/etcd_client.hpp"
#include "tests/support/etcd_process.hpp"

#include <catch2/catch.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

using namespace switchyard;
using broker::partition_keeper;
using broker::partition_map;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

std::vector<broker::cluster_member> alone(const std::string& id, std::int64_t lease) {
  broker::cluster_member m;
  m.node_id = id;
  m.incarnation = lease;
  return {m};
}

std::int64_t store_revision(cluster::etcd_client& etcd) {
  auto r = etcd.range_prefix("/nothing-here/");
  REQUIRE(r);
  return r->revision;
}

}  // namespace

TEST_CASE("a lone node claims every partition in a few transactions, not one per partition", "[cluster]") {
  test::etcd_cluster server{1};
  cluster::etcd_client etcd(server.endpoints(), 2s);
  auto lease = etcd.grant_lease(30s);
  REQUIRE(lease);
  partition_keeper keeper(etcd, "k", "a", quiet());
  const auto before = store_revision(etcd);
  CHECK(keeper.claim(alone("a", *lease), *lease) == partition_map::partition_count);
  CHECK(keeper.held() == partition_map::partition_count);
  // Each batch is one revision of the store.
  const auto batches =
      (partition_map::partition_count + partition_keeper::batch_size - 1) / partition_keeper::batch_size;
  CHECK(store_revision(etcd) - before == static_cast<std::int64_t>(batches));
  auto keys = etcd.range_prefix(keeper.prefix());
  REQUIRE(keys);
  REQUIRE(keys->kvs.size() == partition_map::partition_count);
  for (const auto& kv : keys->kvs) {
    CHECK(kv.value == "a");
    CHECK(kv.lease == *lease);
  }
  // Every owner recorded with the revision etcd gave its key: the fencing token.
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) {
    auto kv = etcd.get(keeper.prefix() + std::to_string(p));
    REQUIRE(kv);
    REQUIRE(kv->has_value());
    CHECK(keeper.owners()[p].revision == (*kv)->mod_revision);
  }
}

TEST_CASE("a claim leaves the partitions another node holds to it and takes the rest of their batch", "[cluster]") {
  test::etcd_cluster server{1};
  cluster::etcd_client etcd(server.endpoints(), 2s);
  auto mine = etcd.grant_lease(30s);
  auto theirs = etcd.grant_lease(30s);
  REQUIRE(mine);
  REQUIRE(theirs);
  partition_keeper keeper(etcd, "k", "a", quiet());
  // Another node got three partitions first, spread over two batches.
  for (const std::uint32_t p : {0u, 5u, 700u}) REQUIRE(etcd.put(keeper.prefix() + std::to_string(p), "b", *theirs));
  CHECK(keeper.claim(alone("a", *mine), *mine) == partition_map::partition_count - 3);
  CHECK(keeper.held() == partition_map::partition_count - 3);
  for (const std::uint32_t p : {0u, 5u, 700u}) {
    CHECK(keeper.owners()[p].node_id == "b");
    CHECK(keeper.owners()[p].incarnation == *theirs);
  }
  CHECK(keeper.owners()[1].node_id == "a");
  CHECK(keeper.owners()[701].node_id == "a");
}

TEST_CASE("a give-back deletes only the keys still at the revision this node wrote", "[cluster]") {
  test::etcd_cluster server{1};
  cluster::etcd_client etcd(server.endpoints(), 2s);
  auto lease = etcd.grant_lease(30s);
  REQUIRE(lease);
  partition_keeper keeper(etcd, "k", "a", quiet());
  REQUIRE(keeper.claim(alone("a", *lease), *lease) == partition_map::partition_count);
  // Partition 3's key was rewritten behind this node's back: its fencing
  // token no longer matches, so the give-back must leave it alone.
  REQUIRE(etcd.put(keeper.prefix() + "3", "z"));
  std::vector<std::uint32_t> all(partition_map::partition_count);
  for (std::uint32_t p = 0; p < all.size(); ++p) all[p] = p;
  CHECK(keeper.release(all) == partition_map::partition_count - 1);
  CHECK(keeper.held() == 0);
  auto left = etcd.range_prefix(keeper.prefix());
  REQUIRE(left);
  REQUIRE(left->kvs.size() == 1);
  CHECK(left->kvs[0].key == keeper.prefix() + "3");
  CHECK(left->kvs[0].value == "z");
}

// Unit tests for broker/handlers/server_admin_handler.hpp: the paging rule of
// ConnList (page_connections), and ClusterStatus on a peer without a socket
// (tests/support/recording_peer.hpp).

#include "broker/handlers/server_admin_handler.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"
#include "tests/support/recording_peer.hpp"

#include <catch2/catch.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

using namespace switchyard::broker;
using sort = switchyard::protocol::wire::ConnSort;
namespace protocol = switchyard::protocol;
namespace wire = protocol::wire;

namespace {

// A server_admin_handler whose only source is `cluster_status`, an admin
// peer to answer, and ClusterStatus requests to hand it.
struct cluster_fixture {
  protocol::frame_builder builder;   // the handler's (answers)
  protocol::frame_builder requests;  // the test's
  std::chrono::milliseconds default_window{30'000};
  server_admin_handler handler;
  std::shared_ptr<switchyard::test::recording_peer> peer;
  std::vector<std::uint8_t> request_bytes;

  explicit cluster_fixture(server_admin_handler::cluster_status_fn cluster_status)
      : handler(
            [&] {
              server_admin_handler::sources s;
              s.cluster_status = std::move(cluster_status);
              return s;
            }(),
            default_window, builder,
            std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>())) {
    capability_set admin;
    admin.admin = true;
    peer = std::make_shared<switchyard::test::recording_peer>(1, builder, admin);
  }

  // Hands the handler a ClusterStatus with `request_id`.
  void ask(std::uint64_t request_id) {
    const auto frame = requests.cluster_status(request_id);
    request_bytes.assign(frame.begin(), frame.end());
    auto f = protocol::decode_frame(request_bytes, protocol::default_max_frame);
    REQUIRE(f);
    handler.cluster_status(*peer, request_id, *(*f)->message_as_ClusterStatus());
  }
};

void check_not_in_cluster_mode(const switchyard::test::recording_peer& p, std::uint64_t request_id) {
  REQUIRE(p.sent.size() == 1);
  CHECK(p.answer(0).request_id() == request_id);
  const auto* e = p.answer(0).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(e->code() == wire::ErrorCode::not_found);
  CHECK_FALSE(e->fatal());
  CHECK(e->message()->string_view() == "this server is not in cluster mode (no --cluster-node-id)");
  CHECK_FALSE(p.closed());
}

std::uint8_t by(sort s) { return static_cast<std::uint8_t>(s); }

// Connections 1..n (shuffled order in), each with pending bytes id % 4.
std::vector<conn_key> keys(std::uint64_t n) {
  std::vector<conn_key> out;
  for (std::uint64_t i = n; i >= 1; --i) {
    conn_key k;
    k.id = i;
    k.pending_bytes = i % 4;
    out.push_back(k);
  }
  return out;
}

}  // namespace

TEST_CASE("connections by id come oldest first, a page at a time, each cursor the last id of its page") {
  const auto first = page_connections(keys(5), by(sort::id), 2, 0);
  CHECK(first.ids == std::vector<std::uint64_t>{1, 2});
  CHECK(first.next_cursor == 2);
  const auto second = page_connections(keys(5), by(sort::id), 2, first.next_cursor);
  CHECK(second.ids == std::vector<std::uint64_t>{3, 4});
  const auto last = page_connections(keys(5), by(sort::id), 2, second.next_cursor);
  CHECK(last.ids == std::vector<std::uint64_t>{5});
  CHECK(last.next_cursor == 0);
}

TEST_CASE("an id cursor skips connections closed since: the walk goes on after it") {
  auto k = keys(6);
  std::erase_if(k, [](const conn_key& c) { return c.id == 3 || c.id == 4; });  // closed between pages
  const auto page = page_connections(k, by(sort::id), 2, 2);
  CHECK(page.ids == std::vector<std::uint64_t>{5, 6});
  CHECK(page.next_cursor == 0);
}

TEST_CASE("other orders put the largest first, ties by id, and the cursor counts entries") {
  // pending_bytes: 1->1 2->2 3->3 4->0 5->1 6->2 7->3
  const auto first = page_connections(keys(7), by(sort::pending_bytes), 3, 0);
  CHECK(first.ids == std::vector<std::uint64_t>{3, 7, 2});
  CHECK(first.next_cursor == 3);
  const auto second = page_connections(keys(7), by(sort::pending_bytes), 3, first.next_cursor);
  CHECK(second.ids == std::vector<std::uint64_t>{6, 1, 5});
  const auto last = page_connections(keys(7), by(sort::pending_bytes), 3, second.next_cursor);
  CHECK(last.ids == std::vector<std::uint64_t>{4});
  CHECK(last.next_cursor == 0);
}

TEST_CASE("every connection appears exactly once across the pages of any order") {
  for (std::uint8_t s = 0; s <= by(sort::MAX); ++s) {
    std::set<std::uint64_t> seen;
    std::uint64_t cursor = 0;
    for (int page = 0; page < 100; ++page) {  // bounded: 25 entries, 4 a page
      const auto p = page_connections(keys(25), s, 4, cursor);
      for (const auto id : p.ids) CHECK(seen.insert(id).second);
      cursor = p.next_cursor;
      if (cursor == 0) break;
    }
    CHECK(seen.size() == 25);
  }
}

TEST_CASE("a cursor past the end, or an empty server, gives an empty last page") {
  CHECK(page_connections(keys(3), by(sort::id), 10, 99).ids.empty());
  CHECK(page_connections(keys(3), by(sort::dropped), 10, 99).ids.empty());
  const auto none = page_connections({}, by(sort::idle), 10, 0);
  CHECK(none.ids.empty());
  CHECK(none.next_cursor == 0);
}

TEST_CASE("an unknown sort value lists by id") {
  const auto page = page_connections(keys(3), 200, 10, 0);
  CHECK(page.ids == std::vector<std::uint64_t>{1, 2, 3});
}

TEST_CASE("ClusterStatus on a server without a cluster status source answers not_found: not in cluster mode",
          "[broker][handlers]") {
  cluster_fixture f({});
  f.ask(5);
  check_not_in_cluster_mode(*f.peer, 5);
}

TEST_CASE("ClusterStatus answers not_found when the cluster status source reports nothing", "[broker][handlers]") {
  int asked = 0;
  cluster_fixture f([&]() -> std::optional<cluster_status_report> {
    ++asked;
    return std::nullopt;
  });
  f.ask(6);
  CHECK(asked == 1);
  check_not_in_cluster_mode(*f.peer, 6);
}

TEST_CASE("ClusterStatus answers what the cluster status source reports, asked anew each time", "[broker][handlers]") {
  int asked = 0;
  cluster_fixture f([&] {
    cluster_status_report r;
    r.cluster_name = "prod";
    r.node_id = "node-a";
    r.incarnation = 7'587'862'384'523'648'004;
    r.view_revision = 40 + ++asked;
    r.in_standing = true;
    r.members.push_back({.node_id = "node-a", .address = "10.0.0.1:7878", .self = true, .patterns = 2});
    r.members.push_back({.node_id = "node-b", .synced_in = true, .messages_in = 9, .failed_out = 4});
    r.etcd.push_back({.endpoint = "http://10.0.0.1:2379", .reachable = true, .leader = true, .version = "3.4.23"});
    r.nats.state = "reconnecting";
    r.nats.reconnects = 3;
    r.lost_in = 8;
    return std::optional(r);
  });
  f.ask(7);
  f.ask(8);
  REQUIRE(f.peer->sent.size() == 2);
  CHECK(f.peer->answer(0).request_id() == 7);
  CHECK(f.peer->answer(1).request_id() == 8);
  CHECK(f.peer->answer(0).message_as_ClusterStatusResult()->view_revision() == 41);
  const auto* m = f.peer->answer(1).message_as_ClusterStatusResult();
  REQUIRE(m != nullptr);
  CHECK(m->view_revision() == 42);
  CHECK(m->cluster_name()->string_view() == "prod");
  CHECK(m->node_id()->string_view() == "node-a");
  CHECK(m->incarnation() == 7'587'862'384'523'648'004);
  CHECK(m->in_standing());
  CHECK_FALSE(m->synced());
  REQUIRE(m->members()->size() == 2);
  CHECK(m->members()->Get(0)->self());
  CHECK(m->members()->Get(0)->address()->string_view() == "10.0.0.1:7878");
  CHECK(m->members()->Get(0)->patterns() == 2);
  CHECK(m->members()->Get(1)->node_id()->string_view() == "node-b");
  CHECK(m->members()->Get(1)->synced_in());
  CHECK(m->members()->Get(1)->messages_in() == 9);
  CHECK(m->members()->Get(1)->failed_out() == 4);
  REQUIRE(m->etcd()->size() == 1);
  CHECK(m->etcd()->Get(0)->leader());
  CHECK(m->etcd()->Get(0)->version()->string_view() == "3.4.23");
  CHECK(m->nats()->state()->string_view() == "reconnecting");
  CHECK(m->nats()->reconnects() == 3);
  CHECK(m->lost_in() == 8);
}

TEST_CASE("a ClusterStatus sent with request id 0 is answered all the same, as Stats is", "[broker][handlers]") {
  cluster_fixture f([] { return std::optional(cluster_status_report{.cluster_name = "prod"}); });
  f.ask(0);
  REQUIRE(f.peer->sent.size() == 1);
  CHECK(f.peer->answer(0).request_id() == 0);
  REQUIRE(f.peer->answer(0).message_as_ClusterStatusResult() != nullptr);
  CHECK(f.peer->answer(0).message_as_ClusterStatusResult()->cluster_name()->string_view() == "prod");
}

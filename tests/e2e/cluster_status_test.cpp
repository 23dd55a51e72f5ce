// End to end: ClusterStatus (docs/protocol.md §14.1) through the client
// library. A real single-node broker is not in cluster mode and says so; a
// node's answer, made by the real server_admin_handler from the report its
// cluster layer gives (tests/support/admin_handler_host.hpp), reaches
// client::cluster_status field for field.

#include "switchyard/client.hpp"
#include "tests/support/admin_handler_host.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

using namespace switchyard;
using namespace switchyard::test;
namespace wire = protocol::wire;

namespace {

std::unique_ptr<client> connect_on(std::uint16_t port, bool admin) {
  client_options o;
  o.port = port;
  o.client_name = "operator";
  o.admin = admin;
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

}  // namespace

TEST_CASE("a single-node broker answers ClusterStatus with not_found saying it is not in cluster mode", "[e2e]") {
  test_server server;
  raw_connection raw(server.port());
  static constexpr std::array<std::string_view, 1> caps{"admin"};
  raw.send_hello(caps);
  raw_frame storage;
  REQUIRE(raw.next_of(wire::Message::Welcome, storage));
  protocol::frame_builder b;
  raw.send(b.cluster_status(7));
  const wire::Frame* f = nullptr;
  do {  // past a heartbeat Ping
    f = raw.next(storage);
    REQUIRE(f);
  } while (f->request_id() != 7);
  const auto* e = f->message_as_Error();
  REQUIRE(e);
  CHECK(e->code() == wire::ErrorCode::not_found);
  CHECK_FALSE(e->fatal());
  CHECK(e->message()->str() == "this server is not in cluster mode (no --cluster-node-id)");
  // The connection stays.
  raw.send(b.ping(8));
  REQUIRE(raw.next_of(wire::Message::Pong, storage));
}

TEST_CASE("client::cluster_status of a single-node broker is not_found", "[e2e]") {
  test_server server;
  auto c = connect_on(server.port(), true);
  const auto st = c->cluster_status();
  REQUIRE_FALSE(st);
  CHECK(st.error() == errc::not_found);
  CHECK_FALSE(c->flush());  // the connection stays
}

TEST_CASE("client::cluster_status without the admin capability is not_supported and sends nothing", "[e2e]") {
  test_server server;
  auto c = connect_on(server.port(), false);
  const auto st = c->cluster_status();
  REQUIRE_FALSE(st);
  CHECK(st.error() == errc::not_supported);
}

TEST_CASE("every field of a node's cluster status reaches client::cluster_status", "[e2e]") {
  const auto report = sample_cluster_status();
  admin_handler_host host([&] { return std::optional(report); });
  auto c = connect_on(host.port(), true);
  const auto st = c->cluster_status();
  REQUIRE(st);
  CHECK(host.cluster_status_requests() == 1);
  CHECK(st->cluster_name == report.cluster_name);
  CHECK(st->node_id == report.node_id);
  CHECK(st->incarnation == report.incarnation);
  CHECK(st->view_revision == report.view_revision);
  CHECK(st->in_standing == report.in_standing);
  CHECK(st->synced == report.synced);
  REQUIRE(st->members.size() == report.members.size());
  for (std::size_t i = 0; i < report.members.size(); ++i) {
    const auto& got = st->members[i];
    const auto& want = report.members[i];
    INFO("member " << want.node_id);
    CHECK(got.node_id == want.node_id);
    CHECK(got.address == want.address);
    CHECK(got.incarnation == want.incarnation);
    CHECK(got.self == want.self);
    CHECK(got.synced_in == want.synced_in);
    CHECK(got.patterns == want.patterns);
    CHECK(got.messages_out == want.messages_out);
    CHECK(got.messages_in == want.messages_in);
    CHECK(got.records_out == want.records_out);
    CHECK(got.records_in == want.records_in);
    CHECK(got.lost_in == want.lost_in);
    CHECK(got.failed_out == want.failed_out);
    CHECK(got.partitions == want.partitions);
  }
  REQUIRE(st->etcd.size() == report.etcd.size());
  for (std::size_t i = 0; i < report.etcd.size(); ++i) {
    const auto& got = st->etcd[i];
    const auto& want = report.etcd[i];
    INFO("etcd endpoint " << want.endpoint);
    CHECK(got.endpoint == want.endpoint);
    CHECK(got.reachable == want.reachable);
    CHECK(got.leader == want.leader);
    CHECK(got.version == want.version);
    CHECK(got.error == want.error);
  }
  CHECK(st->nats.state == report.nats.state);
  CHECK(st->nats.server_url == report.nats.server_url);
  CHECK(st->nats.max_payload == report.nats.max_payload);
  CHECK(st->nats.messages_in == report.nats.messages_in);
  CHECK(st->nats.messages_out == report.nats.messages_out);
  CHECK(st->nats.dropped_in == report.nats.dropped_in);
  CHECK(st->nats.dropped_out == report.nats.dropped_out);
  CHECK(st->nats.reconnects == report.nats.reconnects);
  CHECK(st->local_patterns == report.local_patterns);
  CHECK(st->unconfirmed == report.unconfirmed);
  CHECK(st->interest_timeouts == report.interest_timeouts);
  CHECK(st->lost_in == report.lost_in);
}

TEST_CASE("a server whose cluster status source reports nothing answers client::cluster_status with not_found",
          "[e2e]") {
  admin_handler_host host([] { return std::optional<broker::cluster_status_report>(); });
  auto c = connect_on(host.port(), true);
  const auto st = c->cluster_status();
  REQUIRE_FALSE(st);
  CHECK(st.error() == errc::not_found);
}

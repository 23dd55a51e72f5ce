// Round trips of the cluster status messages (tags 61, 62: ClusterStatus,
// ClusterStatusResult) through frame_builder and decode_frame.

#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace switchyard::protocol;
namespace wire = switchyard::protocol::wire;

// The frame copied to 8-byte aligned storage, as a connection buffer holds it.
struct aligned_frame {
  std::vector<std::uint64_t> words;
  std::size_t size = 0;
  explicit aligned_frame(bytes_view b) : words((b.size() + 7) / 8), size(b.size()) {
    std::memcpy(words.data(), b.data(), b.size());
  }
  bytes_view view() const { return {reinterpret_cast<const std::uint8_t*>(words.data()), size}; }
};

const wire::Frame* decode_ok(const aligned_frame& f) {
  auto r = decode_frame(f.view(), default_max_frame);
  if (!r) FAIL("decode_frame failed: " << r.error().message());
  return *r;
}

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string("<absent>"); }

constexpr std::int64_t big_lease = 7'587'862'384'523'648'004;  // an etcd lease id: above 2^53

}  // namespace

TEST_CASE("the cluster status messages take union tags 61 and 62", "[protocol]") {
  CHECK(static_cast<int>(wire::Message::ClusterStatus) == 61);
  CHECK(static_cast<int>(wire::Message::ClusterStatusResult) == 62);
}

TEST_CASE("a cluster status request round-trips with its request id", "[protocol]") {
  frame_builder b;
  const aligned_frame frame(b.cluster_status(41));
  const auto* f = decode_ok(frame);
  CHECK(f->request_id() == 41);
  CHECK(f->message_as_ClusterStatus() != nullptr);
}

TEST_CASE("a cluster status result round-trips every field of the node, its members, etcd and NATS", "[protocol]") {
  frame_builder b;
  const std::array<cluster_member_fields, 2> members{{
      {"node-a", "10.0.0.1:7878", big_lease, true, false, 3, 1, 2, 4, 5, 6, 7},
      {"node-b", "10.0.0.2:7878", -5, false, true, 12, 1042, 998, 5000, 4000, 2,
       std::numeric_limits<std::uint64_t>::max()},
  }};
  const std::array<etcd_endpoint_fields, 2> etcd{{
      {"http://10.0.0.1:2379", true, true, "3.4.23", {}},
      {"http://10.0.0.2:2379", false, false, {}, "connection refused"},
  }};
  cluster_status_fields in;
  in.cluster_name = "prod";
  in.node_id = "node-a";
  in.incarnation = big_lease;
  in.view_revision = 42;
  in.in_standing = true;
  in.synced = false;
  in.members = members;
  in.etcd = etcd;
  in.nats = {"connected", "nats://10.0.0.1:4222", 1 << 20, 998, 1042, 8, 9, 10};
  in.local_patterns = 11;
  in.unconfirmed = 12;
  in.interest_timeouts = 13;
  in.lost_in = 14;
  const aligned_frame frame(b.cluster_status_result(9, in));
  const auto* f = decode_ok(frame);
  CHECK(f->request_id() == 9);
  const auto* m = f->message_as_ClusterStatusResult();
  REQUIRE(m != nullptr);
  CHECK(str(m->cluster_name()) == "prod");
  CHECK(str(m->node_id()) == "node-a");
  CHECK(m->incarnation() == big_lease);
  CHECK(m->view_revision() == 42);
  CHECK(m->in_standing());
  CHECK_FALSE(m->synced());
  CHECK(m->local_patterns() == 11);
  CHECK(m->unconfirmed() == 12);
  CHECK(m->interest_timeouts() == 13);
  CHECK(m->lost_in() == 14);

  REQUIRE(m->members() != nullptr);
  REQUIRE(m->members()->size() == 2);
  const auto* a = m->members()->Get(0);
  CHECK(str(a->node_id()) == "node-a");
  CHECK(str(a->address()) == "10.0.0.1:7878");
  CHECK(a->incarnation() == big_lease);
  CHECK(a->self());
  CHECK_FALSE(a->synced_in());
  CHECK(a->patterns() == 3);
  CHECK(a->messages_out() == 1);
  CHECK(a->messages_in() == 2);
  CHECK(a->records_out() == 4);
  CHECK(a->records_in() == 5);
  CHECK(a->lost_in() == 6);
  CHECK(a->failed_out() == 7);
  const auto* bm = m->members()->Get(1);
  CHECK(str(bm->node_id()) == "node-b");
  CHECK(bm->incarnation() == -5);
  CHECK_FALSE(bm->self());
  CHECK(bm->synced_in());
  CHECK(bm->patterns() == 12);
  CHECK(bm->messages_out() == 1042);
  CHECK(bm->messages_in() == 998);
  CHECK(bm->records_out() == 5000);
  CHECK(bm->records_in() == 4000);
  CHECK(bm->lost_in() == 2);
  CHECK(bm->failed_out() == std::numeric_limits<std::uint64_t>::max());

  REQUIRE(m->etcd() != nullptr);
  REQUIRE(m->etcd()->size() == 2);
  const auto* e1 = m->etcd()->Get(0);
  CHECK(str(e1->endpoint()) == "http://10.0.0.1:2379");
  CHECK(e1->reachable());
  CHECK(e1->leader());
  CHECK(str(e1->version()) == "3.4.23");
  CHECK(e1->error() == nullptr);
  const auto* e2 = m->etcd()->Get(1);
  CHECK_FALSE(e2->reachable());
  CHECK_FALSE(e2->leader());
  CHECK(e2->version() == nullptr);
  CHECK(str(e2->error()) == "connection refused");

  const auto* n = m->nats();
  REQUIRE(n != nullptr);
  CHECK(str(n->state()) == "connected");
  CHECK(str(n->server_url()) == "nats://10.0.0.1:4222");
  CHECK(n->max_payload() == 1 << 20);
  CHECK(n->messages_in() == 998);
  CHECK(n->messages_out() == 1042);
  CHECK(n->dropped_in() == 8);
  CHECK(n->dropped_out() == 9);
  CHECK(n->reconnects() == 10);
}

TEST_CASE("a cluster status result of a node alone has empty lists, absent strings and its NATS table", "[protocol]") {
  frame_builder b;
  const aligned_frame frame(b.cluster_status_result(0, {}));
  const auto* f = decode_ok(frame);
  CHECK(f->request_id() == 0);
  const auto* m = f->message_as_ClusterStatusResult();
  REQUIRE(m != nullptr);
  CHECK(m->cluster_name() == nullptr);
  CHECK(m->node_id() == nullptr);
  CHECK(m->members()->size() == 0);
  CHECK(m->etcd()->size() == 0);
  REQUIRE(m->nats() != nullptr);
  CHECK(m->nats()->state() == nullptr);
  CHECK(m->nats()->messages_in() == 0);
}

// remote_node: the batch of Delivers for another node.

#include "broker/cluster/remote_node.hpp"

#include <catch2/catch.hpp>

#include <vector>

using switchyard::broker::cluster_member;
using switchyard::broker::delivery_meta;
using switchyard::broker::remote_node;

namespace {
std::uint32_t u32_at(const std::vector<std::byte>& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(b[at + i]) << (8 * i);
  return v;
}
}  // namespace

TEST_CASE("a remote node's records are length, time left, the frame, padded to 8 bytes", "[cluster]") {
  bool relaying = false;
  int started = 0;
  remote_node n(cluster_member{"b", "", 1}, relaying, 1024, [&](remote_node&, bool full) {
    CHECK_FALSE(full);
    ++started;
  });
  const std::vector<std::uint8_t> frame(13, 0xab);
  n.deliver(switchyard::protocol::bytes_view(frame));
  n.deliver(switchyard::protocol::bytes_view(frame),
            delivery_meta{std::chrono::steady_clock::now() + std::chrono::seconds(5), 0, false});
  CHECK(started == 1);  // only the first record of a batch schedules it
  const auto& b = n.batch();
  REQUIRE(b.size() == 2 * (8 + 16));
  CHECK(u32_at(b, 0) == 13);
  CHECK(u32_at(b, 4) == 0);
  CHECK(u32_at(b, 24) == 13);
  CHECK(u32_at(b, 28) > 4000);
  CHECK(u32_at(b, 28) <= 5000);
  CHECK(b[8 + 13] == std::byte{0});  // padding
  CHECK(n.batched_records() == 2);
}

TEST_CASE("a remote node's batch is sent before a record would take it past its bound", "[cluster]") {
  bool relaying = false;
  std::vector<std::size_t> sent_sizes;
  remote_node n(cluster_member{"b", "", 1}, relaying, 64, [&](remote_node& self, bool full) {
    if (!full) return;
    sent_sizes.push_back(self.batch().size());
    self.batch_sent();
  });
  const std::vector<std::uint8_t> frame(20, 1);  // 8 + 24 bytes a record
  for (int i = 0; i < 5; ++i) n.deliver(switchyard::protocol::bytes_view(frame));
  CHECK(sent_sizes == std::vector<std::size_t>{64, 64});
  CHECK(n.batch().size() == 32);
  for (const auto s : sent_sizes) CHECK(s <= 64);
}

TEST_CASE("a remote node ignores deliveries made while relaying another node's", "[cluster]") {
  bool relaying = true;
  remote_node n(cluster_member{"b", "", 1}, relaying, 1024, [](remote_node&, bool) { FAIL("nothing to send"); });
  const std::vector<std::uint8_t> frame(8, 1);
  n.deliver(switchyard::protocol::bytes_view(frame));
  CHECK(n.batch().empty());
}

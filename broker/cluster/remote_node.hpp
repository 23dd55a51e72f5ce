#pragma once
// remote_node: another node of the cluster as a delivery target
// (docs/cluster.md, "Channels"). The channel table holds it under every
// pattern that node has local subscribers for (its interest), so a publish
// here matches it at most once, whatever the number of subscribers there;
// fanout hands it the encoded Deliver, which it appends to the batch of
// records for that node. node_bus sends the batch once per loop turn (or
// when it reaches its size bound) as one NATS message, numbered on the
// link; the receiving node delivers to its own subscribers only.
//
// A delivery made while node_bus relays deliveries that came from another
// node is ignored: a message crosses one link at most.
//
// What a remote node gets: Delivers with their expiry as time left, and
// a durable publish's log position (stream, seq, epoch in the holder's
// log), which the receiving node gives its subscribers that want it. Inbox deliveries, offers and notices are never
// routed to a remote node (sends to users cross nodes by another path); those members do nothing here.
//
// Loop thread only.

#include "broker/cluster/cluster_view.hpp"
#include "broker/tables/delivery_target.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace switchyard::broker {

class remote_node final : public delivery_target {
 public:
  // `relaying` is node_bus's flag (borrowed for the node's lifetime);
  // `batch_grew(node, false)` is called after a record went into an empty
  // batch (node_bus sends it at the end of the loop turn), and
  // `batch_grew(node, true)` before a record that would take the batch
  // past `full_bytes` goes in (node_bus sends it at once, so that a batch
  // never exceeds it).
  remote_node(cluster_member member, const bool& relaying, std::size_t full_bytes,
              std::function<void(remote_node&, bool full)> batch_grew);
  remote_node(const remote_node&) = delete;
  remote_node& operator=(const remote_node&) = delete;
  ~remote_node() = default;

  void deliver(const frame_ref& frame) override { add(frame.bytes(), 0); }
  void deliver(protocol::bytes_view frame) override { add(frame, 0); }
  void deliver(const frame_ref& frame, const delivery_meta& meta) override;
  void deliver(protocol::bytes_view frame, const delivery_meta& meta) override;
  bool wants_log_positions() const noexcept override { return true; }
  bool wants_offer_fields() const noexcept override { return false; }
  std::size_t withdraw(std::uint64_t /*offer_id*/) override { return 0; }
  void notify(protocol::bytes_view /*frame*/) override {}

  const cluster_member& member() const noexcept { return member_; }

  // The records not sent yet (node_bus::flush takes them).
  std::vector<std::byte>& batch() noexcept { return batch_; }
  std::size_t batched_records() const noexcept { return batched_records_; }
  void batch_sent() noexcept {
    batch_.clear();
    batched_records_ = 0;
  }

  // The patterns of its interest, as registered in the channel table.
  std::set<std::string>& patterns() noexcept { return patterns_; }

  // The link's numbering. Out: the next sequence number to send. In: the
  // one expected next (0: nothing received yet from this incarnation).
  std::uint64_t next_out() noexcept { return ++sent_seq_; }
  std::uint64_t& expected_in() noexcept { return expected_in_; }

  // What node_bus counts per link (cluster status).
  struct link_counters {
    std::uint64_t messages_out = 0, messages_in = 0;
    std::uint64_t records_out = 0, records_in = 0;
    std::uint64_t lost_in = 0;     // messages from it the numbering shows lost
    std::uint64_t failed_out = 0;  // messages to it NATS refused (queue full, too large, closed)
  };
  link_counters& counters() noexcept { return counters_; }
  // It sent us its whole interest (InterestSync) since it (or we) joined.
  bool synced_in = false;
  // Our last InterestSync to it not yet acknowledged (0: none), when it
  // went, and whether it asked for its reply: node_bus sends it again
  // until it is.
  std::uint64_t sync_out_ticket = 0;
  std::chrono::steady_clock::time_point sync_out_at{};
  bool sync_out_reply_wanted = false;
  // An InterestSync from it arriving in parts: the patterns so far and
  // the part expected next.
  std::set<std::string> sync_in_parts;
  std::uint32_t sync_in_next_part = 0;

 private:
  // Appends one record: u32 length, u32 time left, the frame, padding.
  void add(protocol::bytes_view frame, std::uint32_t time_left_ms);

  cluster_member member_;
  const bool& relaying_;
  std::size_t full_bytes_;
  std::function<void(remote_node&, bool full)> batch_grew_;
  std::vector<std::byte> batch_;
  std::size_t batched_records_ = 0;
  std::set<std::string> patterns_;
  std::uint64_t sent_seq_ = 0;
  std::uint64_t expected_in_ = 0;
  link_counters counters_;
};

}  // namespace switchyard::broker

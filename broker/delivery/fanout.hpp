#pragma once
// Fan-out: encodes a message once and hands it to every delivery target it
// goes to. Two paths:
//
//   publish(channel)      channel_table::match -> one shared Deliver frame
//                         -> delivery_target::deliver(frame_ref) per subscriber
//   send_to_users(keys)   routing_table::route per key -> keys grouped by
//                         inbox -> one InboxDelivery per inbox, copied into
//                         its target (delivery_target::deliver(bytes))
//
// Loop thread only. Never blocks; a target that cannot take a frame drops
// it (its own slow-consumer policy). The steady state allocates nothing per
// message: frames go to the arena, the per-send grouping reuses scratch
// kept here.

#include "broker/tables/channel_table.hpp"
#include "broker/tables/delivery_target.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/tables/server_counters.hpp"
#include "protocol/frame_builder.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace switchyard::broker {

class fanout {
 public:
  // Borrows everything for its lifetime. `counters`: published, sends_routed
  // and sends_unrouted are counted here.
  fanout(channel_table& channels, routing_table& routing, frame_arena& arena, protocol::frame_builder& builder,
         server_counters& counters)
      : channels_(channels), routing_(routing), arena_(arena), builder_(builder), counters_(counters) {}

  // Delivers `payload` to every subscriber of `channel`: one Deliver frame,
  // encoded once whatever the subscriber count. With a log position,
  // targets that want positions get a second encoding that carries it.
  // Returns the number of targets. Precondition:
  // protocol::is_valid_channel(channel). Counts one publish.
  std::size_t publish(std::string_view channel, protocol::bytes_view payload, const log_position* position = nullptr);
  // The same for a message that expires at `deadline` (capability
  // "offers"): nothing is delivered at or after it (a deadline already
  // passed: the queues drop it unwritten, counted as expired). Targets that
  // want the offer fields get their own copy carrying the time left
  // (refreshed when written); the others share one frame (with the log
  // position, for a durable publish, to those that want it).
  std::size_t publish_expiring(std::string_view channel, protocol::bytes_view payload,
                               std::chrono::steady_clock::time_point deadline,
                               std::chrono::steady_clock::time_point now, const log_position* position = nullptr);

  // Resolves each route key and delivers the payload once into each inbox
  // the keys lead to, listing that inbox's keys (with the log position for
  // targets that want it). `gateways` is resized to keys.size(): the inbox
  // key i went to, or empty (no route). The views in `gateways` point into
  // the routing table: valid until its next change. Returns the number of
  // keys routed.
  std::uint32_t send_to_users(std::span<const std::string_view> keys, protocol::bytes_view payload,
                              const log_position* position, std::vector<std::string_view>& gateways);
  // As above, the routes judged at `lease_now` (routing_table::lease_now(),
  // read once for a run of sends: routing_handler's batch).
  std::uint32_t send_to_users(std::span<const std::string_view> keys, protocol::bytes_view payload,
                              const log_position* position, std::vector<std::string_view>& gateways,
                              mono_clock::time_point lease_now);
  // A send with an expiry or an offer id (capability "offers"): as
  // send_to_users, each inbox delivery queued with `meta` (its deadline and
  // offer id; a deadline already passed: dropped unwritten, counted as
  // expired); targets that want the offer fields get time_left_ms
  // (refreshed when written) and the offer id, those that want log
  // positions the position of a durable send.
  std::uint32_t send_offer(std::span<const std::string_view> keys, protocol::bytes_view payload,
                           const delivery_meta& meta, std::chrono::steady_clock::time_point now,
                           std::vector<std::string_view>& gateways, const log_position* position = nullptr);

  // Scratch a caller may fill with a send's keys before send_to_users (the
  // keys of one send at a time; reused, so the steady state allocates
  // nothing). Valid until the next call that uses it.
  std::vector<std::string_view>& key_scratch() noexcept { return key_scratch_; }
  std::vector<std::string_view>& gateway_scratch() noexcept { return gateway_scratch_; }

 private:
  void deliver_to_inbox(delivery_target* owner, std::string_view inbox, std::span<const std::string_view> keys,
                        protocol::bytes_view payload, const log_position* position);
  void deliver_offer(delivery_target* owner, std::string_view inbox, std::span<const std::string_view> keys,
                     protocol::bytes_view payload);
  // Resolves `keys` into gateways_out and groups_ (one per inbox); calls
  // deliver for each group. Returns the keys routed.
  template <class Deliver>
  std::uint32_t route_and_group(std::span<const std::string_view> keys, std::vector<std::string_view>& gateways,
                                mono_clock::time_point lease_now, Deliver&& deliver);
  // The offer being sent (send_offer), for deliver_offer.
  const delivery_meta* offer_meta_ = nullptr;
  const log_position* offer_position_ = nullptr;
  std::uint32_t offer_time_left_ms_ = 0;

  channel_table& channels_;
  routing_table& routing_;
  frame_arena& arena_;
  protocol::frame_builder& builder_;
  server_counters& counters_;
  // Grouping of one send with several keys: one slot per inbox (grows,
  // never shrinks) and the inbox -> slot index.
  struct inbox_group {
    std::string_view inbox;
    delivery_target* owner = nullptr;
    std::vector<std::string_view> keys;
  };
  std::vector<inbox_group> groups_;
  std::unordered_map<std::string_view, std::size_t> group_index_;
  std::vector<std::string_view> key_scratch_;
  std::vector<std::string_view> gateway_scratch_;
};

}  // namespace switchyard::broker

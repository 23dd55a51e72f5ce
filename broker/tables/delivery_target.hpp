#pragma once
// Where fan-out delivers: anything that can take a Deliver or
// InboxDelivery frame. A connection is one (broker/transport/connection.hpp); a remote
// node or a test recorder can be another. The tables (channel_table,
// routing_table) store delivery_target pointers and know nothing else
// about what is behind them.
//
// Loop thread only. A target must remove itself from every table before
// it is destroyed (a connection does so when it closes).

#include "broker/tables/frame_arena.hpp"
#include "broker/tables/outbound_queue.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <string_view>

namespace switchyard::broker {

// A durable message's place in the sequence log, carried by the frames of
// targets that asked for log positions.
struct log_position {
  std::string_view stream;
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
};

class delivery_target {
 public:
  // Queues a frame that other targets share (a channel's Deliver, encoded
  // once per publish): the target keeps a reference, not a copy.
  // Never blocks and never closes the target synchronously: the caller may
  // be iterating a table that holds it. A target over its queue limit
  // drops the frame (at most once delivery) and counts it.
  virtual void deliver(const frame_ref& frame) = 0;
  // The same for a frame only this target gets (an inbox delivery): the
  // bytes are borrowed for the call only and copied if queued.
  virtual void deliver(protocol::bytes_view frame) = 0;
  // Whether frames for this target carry a log position (the "log"
  // capability: a field is only sent to a peer that declared it).
  virtual bool wants_log_positions() const noexcept = 0;

  // Offers (docs/protocol.md §15). The same two deliveries with what the
  // queue needs to know of them (an expiry, an offer id): the target never
  // writes the frame at or after meta.deadline, and drops it on
  // withdraw(meta.offer_id) while it is still queued.
  virtual void deliver(const frame_ref& frame, const delivery_meta& meta) = 0;
  virtual void deliver(protocol::bytes_view frame, const delivery_meta& meta) = 0;
  // Whether frames for this target carry the offer fields (time_left_ms,
  // offer_id) and it gets Withdrawn notices: it declared "offers" and the
  // server's flag "offers" is on for it. Asked per delivery: a flag change
  // applies at once.
  virtual bool wants_offer_fields() const noexcept = 0;
  // Drops the copies of offer `offer_id` still queued for this target;
  // returns how many (0: none was queued, it was written or never came).
  virtual std::size_t withdraw(std::uint64_t offer_id) = 0;
  // Queues a notice (Receipt, Withdrawn): a control frame, never dropped
  // as a slow consumer's delivery would be. Bytes borrowed for the call.
  virtual void notify(protocol::bytes_view frame) = 0;
  // Whether messages on `channel` may reach this target at all (a
  // connection's principal may subscribe to a pattern that overlaps a
  // channel it is denied). Asked once per channel when the channel table
  // builds its match cache, not per message; the table forgets its cache
  // when permissions change (channel_table::permissions_changed).
  virtual bool receives(std::string_view /*channel*/) const { return true; }

 protected:
  ~delivery_target() = default;
};

}  // namespace switchyard::broker

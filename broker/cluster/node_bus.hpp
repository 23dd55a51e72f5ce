#pragma once
// node_bus: this node's links to the other nodes of the cluster over core
// NATS (docs/cluster.md, "Channels" and "Between nodes").
//
//   out  a publish here matches the remote_node of every node with
//        interest in the channel; each batches the encoded Deliver, and
//        the bus sends each batch once per loop turn (or when it reaches
//        batch_bytes) to "<cluster>.node.<id>" as a LinkMessage.
//   in   nats_link hands the loop the messages sent to this node's
//        subject; deliveries are published to the local subscribers only
//        (fanout, with remote_node ignoring them: relaying()).
//   interest  channel_interest's changes go to every peer once per loop
//        turn (Interest, with a ticket); a Subscribe waits for the acks.
//        A peer that joins, or whose link showed a loss, or that did not
//        ack in time, exchanges its whole interest with us (InterestSync).
//   numbering  every message on a link (sender incarnation -> receiver)
//        carries the next sequence number; a gap is messages NATS lost:
//        counted, told to local subscribers as a Dropped notice
//        (link loss handler), and followed by a resync of the interest.
//
// Messages from a node that is not in the view, or from an incarnation
// other than the view's, are dropped (counted): a restarted node is a new
// link. A malformed message is dropped and logged (at most once a second).
//
// Memory a peer can make this node hold: its interest patterns (at most
// max_remote_patterns per peer), one batch per peer (batch_bytes, plus one
// frame), nats_link's mailbox and queue bounds.
//
// Threads: everything on the loop thread; start() before the loop runs.

#include "broker/cluster/channel_interest.hpp"
#include "broker/cluster/cluster_view.hpp"
#include "broker/cluster/remote_node.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/channel_table.hpp"
#include "cluster/nats_link.hpp"
#include "common/asio.hpp"

#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}
namespace switchyard::broker::link {
enum class Body : std::uint8_t;
struct LinkMessage;
}  // namespace switchyard::broker::link

namespace switchyard::broker {

struct node_bus_options {
  std::string cluster_name;
  std::string node_id;
  std::vector<std::string> nats_servers;
  std::chrono::milliseconds interest_timeout{1000};
  std::uint32_t max_frame = 1u << 20;  // --max-frame: a Deliver of this size must fit a NATS message
  std::size_t batch_bytes = 64u << 10;
  // --cluster-nats-queue-bytes: messages waiting to be handed to NATS.
  std::size_t nats_queue_bytes = 16u << 20;
};

// Per peer, for cluster status and /metrics.
struct peer_link_status {
  cluster_member member;
  bool synced_in = false;    // it sent its whole interest
  std::size_t patterns = 0;  // its interest
  remote_node::link_counters counters;
};

struct node_bus_status {
  cluster::link_stats nats;
  std::vector<peer_link_status> peers;
  std::size_t local_patterns = 0;
  std::size_t unconfirmed = 0;          // announcements waiting for acks
  std::uint64_t interest_timeouts = 0;  // announcements answered at their deadline (a peer silent)
  std::uint64_t dropped_unknown = 0;    // messages from nodes or incarnations not in the view
  std::uint64_t dropped_malformed = 0;
  std::uint64_t lost_in = 0;          // sum over the links, including peers gone since
  remote_node::link_counters totals;  // every link's, including links ended since
  std::size_t remote_patterns = 0;    // channel table entries held for the peers' interest
};

class node_bus {
 public:
  // The largest number of patterns held for one peer's interest.
  static constexpr std::size_t max_remote_patterns = 1u << 20;
  // Bytes a LinkMessage adds around one Deliveries record (the check of
  // NATS's max_payload against --max-frame).
  static constexpr std::size_t envelope_bytes = 1024;
  // Pattern bytes in one part of an Interest or InterestSync.
  static constexpr std::size_t part_bytes = 32u << 10;
  // The largest forward jump of a link's numbering taken as a loss; a
  // larger one is a malformed (or forged) message.
  static constexpr std::uint64_t max_seq_jump = 1u << 24;

  // Borrows `io`, `channels`, `fan` and `builder` for its lifetime.
  node_bus(asio::io_context& io, node_bus_options options, channel_table& channels, fanout& fan,
           std::shared_ptr<spdlog::logger> logger);
  ~node_bus();
  node_bus(const node_bus&) = delete;
  node_bus& operator=(const node_bus&) = delete;

  // Start-up, before the loop runs (it runs `io` until NATS confirmed the
  // subscription): connects to NATS, checks its max_payload against
  // max_frame, subscribes to this node's subject. Throws
  // std::runtime_error naming what failed.
  void start();
  // Leaves NATS (what is queued is handed on first). Idempotent.
  void stop();

  // The membership's view and this node's incarnation in it: links to
  // nodes that joined start (each exchanges its whole interest with us),
  // links to nodes that left (or restarted) end and their interest goes.
  void apply_view(std::shared_ptr<const cluster_view> view, std::int64_t own_incarnation);
  const cluster_view* view() const noexcept { return view_.get(); }

  // A local connection subscribed to / left `pattern` (each pair once).
  void local_subscribe(std::string_view pattern);
  void local_unsubscribe(std::string_view pattern);
  // Answers `rid` on `from` with Ok once every peer holds `pattern`;
  // false when they already do (the caller answers now).
  bool answer_when_confirmed(std::string_view pattern, peer& from, std::uint64_t rid);

  // Routes and sends across nodes (route_relay): messages with a Route* or
  // Send* body go to `handler`, after the link's numbering checks, on the
  // loop thread. The message is borrowed for the call.
  using route_handler = std::function<void(remote_node& from, const link::LinkMessage& m)>;
  void on_route_message(route_handler handler) { route_handler_ = std::move(handler); }
  // Durable streams across nodes (stream_relay): messages with a Stream*
  // body, the same way.
  void on_stream_message(route_handler handler) { stream_handler_ = std::move(handler); }
  // Offers across nodes (offer_relay): messages with an Offer* body.
  void on_offer_message(route_handler handler) { offer_handler_ = std::move(handler); }
  // The builder a body for send_body is built in (Clear() it first; the
  // interest and the batches use it too, each call on its own).
  flatbuffers::FlatBufferBuilder& link_builder() noexcept { return *builder_; }
  // Wraps the body just built in link_builder() in a numbered LinkMessage
  // to `node_id` and publishes it; false when that node has no link (not
  // in the view) or NATS refused it (counted as failed_out).
  bool send_body(std::string_view node_id, link::Body type, flatbuffers::Offset<void> body);
  // The same for a body built in `in` (a builder of the caller's, which
  // the LinkMessage is finished in).
  bool send_body(std::string_view node_id, link::Body type, flatbuffers::Offset<void> body,
                 flatbuffers::FlatBufferBuilder& in);
  // `node_id` is a peer in the view (a message to it can be sent).
  bool has_link(std::string_view node_id) const { return peers_.find(node_id) != peers_.end(); }
  const std::string& node_id() const noexcept { return options_.node_id; }
  std::int64_t incarnation() const noexcept { return incarnation_; }

  // Called with the number of messages a link lost.
  void on_link_loss(std::function<void(std::uint64_t lost)> handler) { link_loss_ = std::move(handler); }

  // Every peer in the view sent its whole interest, or the interest
  // timeout passed since it joined (then it is presumed down).
  bool synced() const;
  bool nats_connected() const noexcept { return link_ && link_->state() == cluster::link_state::connected; }
  // True while delivering what came from another node.
  bool relaying() const noexcept { return relaying_; }
  node_bus_status status() const;
  const node_bus_options& options() const noexcept { return options_; }
  // Bytes sent to NATS and not yet handed to cnats (0 before start()):
  // a sender of much at once keeps it below a share of nats_queue_bytes,
  // past which NATS refuses messages (and they are lost).
  std::size_t link_pending_bytes() const noexcept { return link_ ? link_->pending_bytes() : 0; }

 private:
  std::string subject_of(std::string_view node_id) const;
  void on_message(const cluster::inbound_message& m);
  // Deliveries: each record to the local subscribers.
  bool relay(remote_node& from, std::span<const std::uint8_t> records);
  // The batches and the interest delta, once per loop turn.
  void schedule_flush();
  void flush();
  void send_batch(remote_node& to);
  // Our whole interest to `to`, in parts of at most part_bytes of
  // patterns; kept as unacknowledged until its ack, resent meanwhile.
  void send_sync(remote_node& to, bool reply_wanted);
  void send_ack(remote_node& to, std::uint64_t ticket, bool sync);
  // Wraps `body` (built in builder_) in a LinkMessage for `to`, numbered,
  // and publishes it.
  template <class Body>
  bool send(remote_node& to, link::Body type, flatbuffers::Offset<Body> body) {
    return send_in(*builder_, to, type, body.Union());
  }
  bool send_in(flatbuffers::FlatBufferBuilder& b, remote_node& to, link::Body type, flatbuffers::Offset<void> body);
  // Every interest_timeout: InterestSyncs not acknowledged are sent again.
  void arm_resync_timer();
  void answer(std::vector<channel_interest::waiter>& done);
  void arm_deadline_timer();
  // Removes a peer: its interest from the channel table, its waiters.
  // `gone`: it left the view (else it came back as a new incarnation and
  // is still waited for).
  void drop_peer(std::map<std::string, std::unique_ptr<remote_node>, std::less<>>::iterator it, bool gone);
  std::vector<std::string> peer_ids() const;
  void count_malformed(std::string_view why);

  asio::io_context& io_;
  node_bus_options options_;
  channel_table& channels_;
  fanout& fanout_;
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<cluster::nats_link> link_;
  std::unique_ptr<flatbuffers::FlatBufferBuilder> builder_;
  protocol::frame_builder ok_builder_;

  std::shared_ptr<const cluster_view> view_;
  std::int64_t incarnation_ = 0;
  std::map<std::string, std::unique_ptr<remote_node>, std::less<>> peers_;
  std::map<std::string, std::chrono::steady_clock::time_point> joined_at_;
  channel_interest interest_;
  std::uint64_t next_ticket_ = 0;
  bool relaying_ = false;
  bool flush_posted_ = false;
  asio::steady_timer deadline_timer_;
  bool timer_armed_ = false;
  asio::steady_timer resync_timer_;
  bool resync_armed_ = false;
  bool first_view_ = true;
  std::function<void(std::uint64_t)> link_loss_;
  route_handler route_handler_;
  route_handler stream_handler_;
  route_handler offer_handler_;
  std::vector<std::uint64_t> record_scratch_;  // an aligned copy of one record (decode_frame)
  std::vector<std::string> add_scratch_, remove_scratch_;
  std::vector<channel_interest::waiter> done_scratch_;

  std::uint64_t interest_timeouts_ = 0;
  std::uint64_t dropped_unknown_ = 0;
  std::uint64_t dropped_malformed_ = 0;
  std::uint64_t lost_in_ = 0;
  remote_node::link_counters departed_;  // the counters of links that ended
  std::chrono::steady_clock::time_point malformed_logged_{};
  bool stopped_ = false;
};

}  // namespace switchyard::broker

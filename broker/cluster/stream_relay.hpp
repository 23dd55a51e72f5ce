#pragma once
// stream_relay: durable streams across the nodes of a cluster
// (docs/cluster.md, "Durable streams").
//
// A stream lives in the sequence log of one node, its holder: the node
// etcd names for the stream's partition (partition_keeper's stream keys).
// The holder is chosen once, the first time anything needs a stream of
// that partition: the partition's owner at that moment takes it (before
// its log holds anything of it), and it never moves on its own: a
// partition's owner may change as members come and go, its streams stay
// where their records are.
//
//   origin  A request naming a stream (Append, Read, StreamInfo,
//           SetRetention, StreamDelete, a durable Publish) at a node that
//           is not the stream's holder is forwarded to the holder
//           (StreamRequest: the client's frame as it came), or, while the
//           partition has no holder, to the partition's owner. The client
//           holds a peer ticket until the answer (StreamAnswer) comes
//           back, and gets the holder's answer frames as they are (fsync
//           before the Appended, sequences and epochs are the holder's).
//           No answer within the forward timeout: outcome_unknown (the
//           request may or may not have been carried out).
//   holder  Runs the frame through the dispatcher on a remote_peer, as if
//           the client were connected there, and answers with every frame
//           that request was answered with. A durable publish's records
//           reach subscribers on every node through the holder's fan-out.
//   taking  The partition's owner asked for a stream of a partition
//           without a holder (here or from another node) asks membership
//           to pin it (an etcd transaction) and holds the requests until
//           the view names the holder.
//
// What cannot be served is answered `unavailable`: the holder is not a
// member now (down, or cut off: until it is back or an operator declares
// its streams lost), the partition has no owner, or this node is out of
// standing (a holder out of standing serves nothing: another may be
// declared holder meanwhile).
//
// Batching: the requests and answers for one node go out once per loop
// turn (or at the link's batch bytes) in one StreamBatch message.
//
// Memory another node or a client can make this node hold: at most
// max_pending forwarded requests waiting for answers; requests held for a
// holder, at most max_pending and max_held_bytes of frames; at most
// max_pending requests of other nodes running here, each with its answers
// (about one frame) until sent; one outbox per peer (the link's batch
// bytes, or one answer of at most --max-frame).
//
// Loop thread only.

#include "broker/cluster/link_outboxes.hpp"
#include "broker/cluster/node_bus.hpp"
#include "broker/requests/peer.hpp"
#include "common/asio.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}
namespace switchyard::broker::link {
struct StreamRequest;
struct StreamAnswer;
struct StreamBatch;
}  // namespace switchyard::broker::link

namespace switchyard::broker {

class remote_peer;

struct stream_relay_options {
  std::chrono::milliseconds forward_timeout{2000};
  std::uint32_t max_frame = 1u << 20;  // --max-frame: the largest request frame and answer
  std::string log_id;                  // this node's log (the stream keys name it)
};

// For /metrics and cluster status.
struct stream_relay_counters {
  std::uint64_t forwarded = 0;      // requests this node forwarded to a holder
  std::uint64_t served = 0;         // requests from other nodes run here
  std::uint64_t unknown = 0;        // answered outcome_unknown (no answer in time)
  std::uint64_t unavailable = 0;    // answered unavailable (here, or for another node)
  std::size_t held_partitions = 0;  // partitions whose streams this node holds
  std::size_t pending = 0;          // requests waiting for another node or for a holder
};

class stream_relay {
 public:
  // Requests waiting at once (for answers, and for a holder); past it a
  // request is answered unavailable.
  static constexpr std::size_t max_pending = 65'536;
  // Frame bytes held at once for a holder to be named.
  static constexpr std::size_t max_held_bytes = 64u << 20;

  // Runs a frame here on `from` as the dispatcher would for a client
  // connected here, never forwarding it again, if it is a request about
  // `stream` (the one a StreamRequest named); false (nothing done) if not.
  using runner = std::function<bool(peer& from, const protocol::wire::Frame& frame, std::string_view stream)>;

  // Borrows `io` and `bus` for its lifetime. `has_log`: this node has a
  // sequence log (without one it holds no streams: other nodes' requests
  // are answered unavailable). `in_standing`: may this node act as holder
  // or owner now (membership::in_standing). `pin(p)`: ask etcd to make
  // this node the holder of partition p's streams
  // (membership::pin_streams).
  stream_relay(asio::io_context& io, stream_relay_options options, node_bus& bus, bool has_log,
               std::function<bool()> in_standing, std::function<void(std::uint32_t)> pin,
               std::shared_ptr<spdlog::logger> logger);
  ~stream_relay();
  stream_relay(const stream_relay&) = delete;
  stream_relay& operator=(const stream_relay&) = delete;

  // Set once, before the first request.
  void set_runner(runner r) { runner_ = std::move(r); }

  // A request `rid` from a client of this node about `stream`, whose frame
  // is `raw` (length prefix included; borrowed for the call). False: this
  // node holds the stream and may serve it: the caller runs it here now.
  // True: it was forwarded, or is held until the stream's partition has a
  // holder, or was answered unavailable. `forwardable` false: a request
  // only the holder may run (an offer with a stream): unavailable where
  // it would be forwarded.
  bool take(peer& from, std::uint64_t rid, std::string_view stream, protocol::bytes_view raw, bool forwardable = true);

  // A StreamList `request_id` from a client of this node, whose frame is
  // `raw` (length prefix included; borrowed for the call): run here and on
  // every other member with a log, each listing the streams it holds.
  // `merge` gets every member's answer frames (this node's included) and
  // answers `from`; a member that answers an error, or none within the
  // forward timeout, makes the answer that error, or `unavailable` (a
  // partial list would look complete). `from` holds a peer ticket until
  // answered.
  using list_merge = std::function<void(peer& from, std::span<const protocol::bytes_view> answers)>;
  void list_everywhere(peer& from, std::uint64_t request_id, protocol::bytes_view raw, list_merge merge);

  // The node_bus applied a new view: requests held for a holder go on,
  // requests waiting for a node that left are answered outcome_unknown.
  // A partition this node held in the last view and another node holds
  // now was taken over (`cluster takeover`, while this node was cut off):
  // `taken_over` is called with those partitions (this node's log holds
  // a history of their streams the cluster declared lost).
  void view_changed();
  void on_taken_over(std::function<void(const std::vector<std::uint32_t>& partitions)> handler) {
    taken_over_ = std::move(handler);
  }

  stream_relay_counters counters() const;

  // Sends now what waits for the end of the loop turn (the outboxes:
  // answers other nodes wait for): the node is about to leave the
  // cluster. Loop thread, or after the loop stopped.
  void flush_now() { flush(); }

 private:
  struct pending;
  struct gather;
  struct held;
  // Per peer: StreamRequests and StreamAnswers, one StreamBatch per loop
  // turn; `own`: the tickets of this node's requests.
  using outboxes = link_outboxes<link::StreamRequest, link::StreamAnswer, std::uint64_t>;
  using outbox = outboxes::outbox;
  using clock = std::chrono::steady_clock;
  // Where a request about a stream of `partition` goes now.
  struct decision {
    enum class kind { here, forward, take, unavailable } what = kind::unavailable;
    std::string node;  // forward: to whom; unavailable: why
  };
  decision decide(std::string_view stream, std::uint32_t partition) const;
  // Puts a StreamRequest for `raw` in `node`'s outbox, tracked as pending
  // for `from`.
  void forward(peer& from, std::uint64_t rid, std::uint64_t peer_ticket, std::string_view node, std::string_view stream,
               protocol::bytes_view raw);
  void on_message(remote_node& from, const link::LinkMessage& m);
  void on_request(remote_node& from, const link::StreamRequest& r);
  void on_answer(remote_node& from, const link::StreamAnswer& a);
  void on_batch(remote_node& from, const link::StreamBatch& b);
  // This node's requests in a batch NATS refused, or never sent
  // (outboxes_.refused()): answered unavailable.
  void settle_refused();
  void schedule_flush();
  void flush();
  // Why a request was not run: bad_request (not a valid request about its
  // stream) or unavailable (this node cannot take more now).
  struct refusal {
    protocol::errc code;
    std::string why;
  };
  // Runs `frame` (a request about `stream`) here on a remote_peer with
  // `caps` (capability_bits); `done` gets its answer frames once it is
  // answered. nullopt: it runs.
  std::optional<refusal> run_here(protocol::bytes_view frame, std::string_view stream, std::uint32_t caps,
                                  std::function<void(protocol::bytes_view frames)> done);
  // Holds a request until `partition` has a holder (`who` for a client of
  // this node, else `origin`'s request); false when held_ is full.
  bool hold(std::uint32_t partition, std::weak_ptr<peer> who, std::uint64_t rid, std::uint64_t peer_ticket,
            std::string_view origin, std::uint64_t origin_ticket, std::uint32_t caps, std::string_view stream,
            protocol::bytes_view frame);
  std::string held_full_message() const;
  // Writes `frames` (length-prefixed, one after the other) to `to`, then
  // closes its ticket `peer_ticket`.
  void deliver_frames(peer& to, std::uint64_t peer_ticket, protocol::bytes_view frames);
  // Answers request `ticket` of `origin` with `frames` (length-prefixed),
  // in its outbox (dropped when it has no link: the origin answers
  // outcome_unknown at its deadline).
  void answer(std::string_view origin, std::uint64_t ticket, protocol::bytes_view frames);
  // Tells `origin` request `ticket` was not run: the origin answers its
  // client `code` with `why`.
  void answer_error(std::string_view origin, std::uint64_t ticket, protocol::errc code, std::string_view why);
  // Answers a held request unavailable (`why`), here or to its origin.
  void refuse(held& h, std::string_view why);
  // Runs the requests held for `partition` (its holder is now known).
  void release(std::uint32_t partition);
  void arm_timer();
  void on_timer();
  // A member's answer to gather `ticket` (this node's: `node` empty), or
  // its error; the gather is answered once complete.
  void gathered(std::uint64_t ticket, std::string_view node, protocol::bytes_view frames, const refusal* error);

  asio::io_context& io_;
  stream_relay_options options_;
  const bool has_log_;
  node_bus& bus_;
  std::function<bool()> in_standing_;
  std::function<void(std::uint32_t)> pin_;
  std::shared_ptr<spdlog::logger> logger_;
  runner runner_;
  protocol::frame_builder answers_;
  protocol::frame_parser parser_;

  std::uint64_t next_ticket_ = 0;
  std::map<std::uint64_t, pending> pending_;        // forwarded by this node, by ticket
  std::map<std::uint64_t, gather> gathers_;         // StreamLists asked of every member, by ticket
  std::map<std::uint32_t, std::deque<held>> held_;  // waiting for a holder, by partition
  std::size_t held_count_ = 0;
  std::size_t held_bytes_ = 0;
  std::map<std::uint64_t, std::shared_ptr<remote_peer>> running_;  // served here, by local id
  // Per peer: requests and answers not sent yet.
  outboxes outboxes_;
  bool flush_posted_ = false;
  std::uint64_t next_running_ = 0;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  stream_relay_counters counters_;
  std::vector<bool> held_before_;  // per partition: this node held its streams in the last view
  std::function<void(const std::vector<std::uint32_t>&)> taken_over_;
};

}  // namespace switchyard::broker

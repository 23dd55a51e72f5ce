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
// Memory another node or a client can make this node hold: at most
// max_pending forwarded requests waiting for answers, and as many held
// for a holder (each with its frame, at most --max-frame); a running
// request's answers (about one frame).
//
// Loop thread only.

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
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}
namespace switchyard::broker::link {
struct StreamRequest;
struct StreamAnswer;
}  // namespace switchyard::broker::link

namespace switchyard::broker {

class remote_peer;

struct stream_relay_options {
  std::chrono::milliseconds forward_timeout{2000};
  std::uint32_t max_frame = 1u << 20;  // --max-frame: the largest request frame and answer
};

// For /metrics and cluster status.
struct stream_relay_counters {
  std::uint64_t forwarded = 0;      // requests this node forwarded to a holder
  std::uint64_t served = 0;         // requests from other nodes run here
  std::uint64_t unknown = 0;        // answered outcome_unknown (no answer in time)
  std::uint64_t unavailable = 0;    // answered unavailable (here, or for another node)
  std::uint64_t taken = 0;          // partitions whose streams this node came to hold
  std::size_t held_partitions = 0;  // partitions whose streams this node holds
  std::size_t pending = 0;          // requests waiting for another node or for a holder
};

class stream_relay {
 public:
  // Requests waiting at once (for answers, and for a holder); past it a
  // request is answered unavailable.
  static constexpr std::size_t max_pending = 65'536;

  // Runs a frame here on `from` as the dispatcher would for a client
  // connected here, never forwarding it again.
  using runner = std::function<void(peer& from, const protocol::wire::Frame& frame)>;

  // Borrows `io` and `bus` for its lifetime. `in_standing`: may this node
  // act as holder or owner now (membership::in_standing). `pin(p)`: ask
  // etcd to make this node the holder of partition p's streams
  // (membership::pin_streams).
  stream_relay(asio::io_context& io, stream_relay_options options, node_bus& bus, std::function<bool()> in_standing,
               std::function<void(std::uint32_t)> pin, std::shared_ptr<spdlog::logger> logger);
  ~stream_relay();
  stream_relay(const stream_relay&) = delete;
  stream_relay& operator=(const stream_relay&) = delete;

  // Set once, before the first request.
  void set_runner(runner r) { runner_ = std::move(r); }

  // A request `rid` from a client of this node about `stream`, whose frame
  // is `raw` (length prefix included; borrowed for the call). False: this
  // node holds the stream and may serve it: the caller runs it here now.
  // True: it was forwarded, or is held until the stream's partition has a
  // holder, or was answered unavailable.
  bool take(peer& from, std::uint64_t rid, std::string_view stream, protocol::bytes_view raw);

  // The node_bus applied a new view: requests held for a holder go on,
  // requests waiting for a node that left are answered outcome_unknown.
  void view_changed();

  stream_relay_counters counters() const;

 private:
  struct pending;
  struct held;
  using clock = std::chrono::steady_clock;
  // Where a request about a stream of `partition` goes now.
  struct decision {
    enum class kind { here, forward, take, unavailable } what = kind::unavailable;
    std::string node;  // forward: to whom; unavailable: why
  };
  decision decide(std::string_view stream, std::uint32_t partition) const;
  bool owner_is(std::uint32_t partition, std::string_view node) const;
  // Sends a StreamRequest for `raw` to `node`, tracked as pending for `from`.
  void forward(peer& from, std::uint64_t rid, std::uint64_t peer_ticket, std::string_view node, std::string_view stream,
               protocol::bytes_view raw);
  void on_message(remote_node& from, const link::LinkMessage& m);
  void on_request(remote_node& from, const link::StreamRequest& r);
  void on_answer(const link::StreamAnswer& a);
  // Runs a request from `origin` here and answers it once done.
  void serve(std::string_view origin, std::uint64_t ticket, std::uint32_t caps, protocol::bytes_view frame);
  // Answers request `ticket` of `origin` with `frames` (length-prefixed).
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

  asio::io_context& io_;
  stream_relay_options options_;
  node_bus& bus_;
  std::function<bool()> in_standing_;
  std::function<void(std::uint32_t)> pin_;
  std::shared_ptr<spdlog::logger> logger_;
  runner runner_;
  protocol::frame_builder answers_;
  protocol::frame_parser parser_;

  std::uint64_t next_ticket_ = 0;
  std::map<std::uint64_t, pending> pending_;        // forwarded by this node, by ticket
  std::map<std::uint32_t, std::deque<held>> held_;  // waiting for a holder, by partition
  std::size_t held_count_ = 0;
  std::map<std::uint64_t, std::shared_ptr<remote_peer>> running_;  // served here, by local id
  std::uint64_t next_running_ = 0;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  stream_relay_counters counters_;
};

}  // namespace switchyard::broker

#pragma once
// One client connection: transport only. A byte stream (byte_stream.hpp),
// a reader coroutine (framing, verification, the hello, then each frame to
// the dispatcher), a writer coroutine (one gather write per loop turn from
// the bounded outbound queue), the hello deadline and the heartbeat.
//
// It is the peer the handlers answer (peer.hpp) and a delivery target of
// fan-out (delivery_target.hpp); it knows nothing about channels, leases,
// the registry or the log.
//
// Loop thread only. A connection keeps itself alive through its coroutines
// and its entry in the connection_registry until fail() has run.

#include "broker/admission/admission_control.hpp"
#include "broker/transport/byte_stream.hpp"
#include "broker/transport/write_batch.hpp"
#include "broker/requests/capabilities.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/outbound_queue.hpp"
#include "broker/requests/peer.hpp"
#include "broker/config/server_config.hpp"
#include "broker/tables/server_counters.hpp"
#include "common/asio.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/read_buffer.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class authenticator;
class connection_registry;
class feature_flags;
class dispatcher;
class input_memory;
class loop_pressure;

// What the connections of one loop share: borrowed from the server for
// each connection's lifetime. Loop thread only.
struct connection_context {
  const server_config& config;
  frame_arena& arena;
  protocol::frame_builder& builder;  // the loop's scratch encoder
  dispatcher& dispatch;
  loop_pressure& pressure;
  input_memory& input;
  connection_registry& registry;
  admission_control& admission;  // decides on each hello (cap, rate, draining)
  authenticator& auth;           // who each hello is from (docs/security.md)
  server_counters& counters;
  feature_flags& flags;  // server flags (the "offers" ramp)
  write_batch& writes;   // connections to write at the end of the current read
  std::shared_ptr<spdlog::logger> logger;
  bool log_available = false;  // the server has a sequence log ("log" may be granted)
};

class connection final : public peer, public std::enable_shared_from_this<connection> {
 public:
  using clock = std::chrono::steady_clock;

  connection(connection_context& context, byte_stream stream, std::uint64_t id);
  ~connection();

  // Starts the coroutines. With `refused` set, the connection only sends
  // that error (fatal, with its retry hint) and closes, reading nothing:
  // admission_control's answer at accept. A refused connection does not
  // count against max-connections while it says goodbye.
  void start(std::optional<refusal> refused = std::nullopt);

  // Like close_with_error, with a retry hint in the Error (retry_after_ms):
  // a drain's goodbye.
  void close_with_retry(protocol::errc code, std::string_view message, std::chrono::milliseconds retry_after);
  // Closing (a goodbye queued, or closed): nothing more will be handled.
  bool closing() const noexcept { return closing_; }
  // The end of a read that queued frames for this connection while its
  // writer waited (write_batch): writes them now, without blocking, as
  // the writer would have in its next turn; what the socket does not take
  // (or a TLS stream, a write under load, a closing connection) is left to
  // the writer.
  void write_now();

  // delivery_target: queue a Deliver (shared) or an InboxDelivery (own)
  // unless not welcomed yet or closing; over max-pending-bytes the frame
  // is dropped (slow consumer: maybe close, per policy).
  void deliver(const frame_ref& frame) override;
  void deliver(protocol::bytes_view frame) override;
  void deliver(const frame_ref& frame, const delivery_meta& meta) override;
  void deliver(protocol::bytes_view frame, const delivery_meta& meta) override;
  // Declared "offers" and inside the flag's ramp (asked per delivery).
  bool wants_offer_fields() const noexcept override;
  std::size_t withdraw(std::uint64_t offer_id) override;
  void notify(protocol::bytes_view frame) override { send(frame); }
  // The principal's subscribe permissions for `channel` (a subscription
  // that overlaps a denied channel receives nothing from it).
  bool receives(std::string_view channel) const override;

  // peer
  void send(protocol::bytes_view frame) override;
  void close_with_error(protocol::errc code, std::string_view message) override;
  bool closed() const noexcept override { return closed_; }
  std::weak_ptr<peer> weak_peer() noexcept override { return weak_from_this(); }
  void restart_drop_reports() noexcept override { drops_reported_.clear(); }
  void report_lost(std::uint64_t count) override;

  // Bytes queued for this connection (its outbound queue), for metrics.
  std::size_t queued_bytes() const noexcept { return queue_.queued_bytes(); }
  // Past its hello (a Welcome was sent): listed by ConnList.
  bool welcomed() const noexcept { return welcomed_; }
  // What ConnList reports of it at `now` (docs/protocol.md §14); the
  // leases of its inboxes are the caller's to fill in.
  protocol::conn_info_fields info(clock::time_point now) const;
  // For sorting ConnList without building every entry.
  clock::time_point last_received() const noexcept { return last_rx_; }
  std::uint64_t dropped_count() const noexcept { return dropped_; }
  std::uint64_t bytes_in() const noexcept { return bytes_in_; }
  std::uint64_t bytes_out() const noexcept { return bytes_out_; }

 private:
  asio::awaitable<void> reader(std::shared_ptr<connection> self);
  // The reader's two parts: frames until the connection closes, then the
  // remaining input, discarded until the peer closes or the connection fails.
  asio::awaitable<void> read_frames();
  asio::awaitable<void> discard_input();
  // Verifies and handles the complete frames in `buf` (consuming them);
  // returns how many were handled. May close the connection.
  std::size_t handle_input(protocol::read_buffer& buf);
  // Handles one verified frame (`raw`: its bytes, prefix included); false
  // to stop reading.
  bool handle(const protocol::wire::Frame& frame, protocol::bytes_view raw);
  bool handle_hello(const protocol::wire::Frame& frame);
  // The AuthProof answering our AuthChallenge (any other frame fails).
  bool handle_proof(const protocol::wire::Frame& frame);
  // Sends the Welcome for `caps` to `who` (null: no auth file), after
  // admission control; false when refused.
  bool welcome(std::uint64_t request_id, negotiated_capabilities caps, std::shared_ptr<const auth::principal> who);
  // Authentication failed: nothing more is handled, and the unauthorized
  // goodbye goes after --auth-failure-delay-ms (the same for every
  // failure). `why` is for the log only. Returns false (stop reading).
  bool fail_auth(std::string_view why);
  asio::awaitable<void> auth_refusal(std::shared_ptr<connection> self);
  // Queues the fatal Error and starts the close watchdog (closing_ set).
  void goodbye(protocol::errc code, std::string_view message, std::chrono::milliseconds retry_after);
  // Sends `r` as the goodbye and stops counting this connection against
  // the cap.
  void refuse(const refusal& r);
  // After handling: an incomplete frame left in the shared buffer moves to
  // spill_, an emptied spill_ is released, and the frame deadline is
  // checked. False when the connection was closed.
  bool settle_input(protocol::read_buffer& buf, std::size_t handled);
  // A read into the shared buffer found nothing: its front (moved there
  // from spill_) goes back.
  void spill_back(protocol::read_buffer& shared);
  // Makes room for `more` bytes in spill_ (growing by doubling up to
  // `limit`), within the loop's bound on incomplete input; else closes with
  // limit_exceeded and returns false.
  bool grow_spill(std::size_t more, std::size_t limit);
  // Reallocates spill_ to `capacity` (keeping its bytes) and accounts for it.
  void resize_spill(std::size_t capacity);
  void release_spill() noexcept;
  // Closes with limit_exceeded when the incomplete frame is older than
  // frame_timeout; false then.
  bool check_partial_deadline(clock::time_point now);
  asio::awaitable<void> writer(std::shared_ptr<connection> self);
  asio::awaitable<void> hello_watchdog(std::shared_ptr<connection> self);
  asio::awaitable<void> heartbeat(std::shared_ptr<connection> self);
  asio::awaitable<void> close_watchdog(std::shared_ptr<connection> self);

  // Copies a frame only this connection gets into the arena (see lane_).
  frame_ref store_own(protocol::bytes_view frame);
  // A frame was queued: wakes the writer if it waits (or, within a read,
  // lists this connection for write_now at the read's end).
  void kick();
  void wake_writer() noexcept;
  // The writer's start of a write: the oldest frame's wait observed,
  // frames taken from the queue into spans_/buffers_ (writing_bytes_);
  // false when every frame taken had expired or was withdrawn.
  bool take_write();
  // The end of a write of writing_bytes_ that succeeded or failed (`ec`):
  // the frames released, counters, a dropped notice due. False when the
  // connection failed.
  bool wrote(asio_error_code ec);
  // Accounts for a delivery that was queued or, when `queued` is false,
  // dropped (slow consumer: maybe close, per policy).
  void delivered(bool queued);
  // Closes with slow_consumer, dropping what is queued behind the write in
  // flight so the goodbye comes next.
  void close_slow_consumer(std::string_view why);
  // Capability "stream-drops": `frame` (a Deliver or InboxDelivery) was
  // just dropped. If it carried a log position and is the first drop of its
  // (stream, channel or inbox) since drops_reported_ was last cleared,
  // queues a StreamDropped in its place (a control frame: never dropped).
  // Only on the drop path; the frame's bytes may be the loop's builder
  // buffer, which this overwrites.
  void report_dropped_position(protocol::bytes_view frame);
  // Logs (EOF and cancellation as normal), closes the stream and removes
  // the connection everywhere. Idempotent.
  void fail(asio_error_code ec, std::string_view what);

  connection_context& ctx_;
  byte_stream stream_;
  asio::steady_timer wake_;  // the writer waits on it; kick() cancels it
  asio::steady_timer hello_timer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer close_timer_;
  std::string peer_address_;
  std::string client_name_;
  std::string client_id_;
  outbound_queue queue_;
  // The write in flight (take_write to wrote): its frames' bytes, and how
  // many of them write_now wrote before it left the rest to the writer.
  std::vector<protocol::bytes_view> spans_;
  std::vector<asio::const_buffer> buffers_;
  std::size_t writing_bytes_ = 0;
  std::size_t written_now_ = 0;
  static constexpr std::size_t max_batch = 32;  // frames verified ahead of handling
  std::vector<protocol::frame_view> batch_;     // the current read's frames, reused
  frame_lane lane_;                             // this connection's own frames; reset whenever queue_ drains
  protocol::frame_parser parser_;
  // An incomplete frame's bytes, only while there is one (else empty, no
  // allocation); accounted in input_memory.
  protocol::read_buffer spill_;
  clock::time_point partial_since_{};  // when the incomplete frame began; {} if none
  std::size_t read_size_;              // bytes one read may take into the shared buffer (adaptive)
  clock::time_point last_rx_;
  const clock::time_point accepted_at_;
  // When the oldest frame now queued was queued: stamped when a frame
  // wakes the idle writer, and at the start of each write for the frames
  // queued behind it (an upper bound for those). Feeds delivery_latency.
  clock::time_point queued_since_;
  std::uint64_t bytes_in_ = 0;   // read from the socket (after TLS: plaintext)
  std::uint64_t bytes_out_ = 0;  // written to it (plaintext)
  std::uint64_t dropped_ = 0;    // deliveries dropped for it
  bool dropping_ = false;        // dropped since its queue last drained (a slow consumer now)
  // Granted "offers": its ramp bucket (feature_flags::bucket_of its client
  // id), counted in ctx_.flags from the welcome until fail().
  std::uint8_t offers_bucket_ = 0;
  bool offers_member_ = false;
  // Between a Hello with a public key and its AuthProof only.
  struct pending_challenge {
    std::array<std::uint8_t, 32> nonce{};
    std::array<std::uint8_t, 32> public_key{};
    std::uint64_t hello_request_id = 0;
    negotiated_capabilities caps;
  };
  std::unique_ptr<pending_challenge> challenge_;
  bool welcomed_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool writer_waiting_ = false;
  bool write_listed_ = false;    // in ctx_.writes for the current read
  bool reading_ = false;         // the reader runs (not for a connection refused at accept)
  bool refused_ = false;         // refused by admission control: not counted (connection_registry::rejected_closing)
  bool goodbye_queued_ = false;  // the fatal Error is queued: nothing more is
  bool goodbye_sent_ = false;    // ... and written, with the stream half-closed
  bool peer_eof_ = false;        // the peer half-closed while we were closing
  // (stream, channel or inbox) pairs told in a StreamDropped since the last
  // Dropped notice, Subscribe or InboxOpen (each starts a new subscriber's
  // view, which must hear of its first drop of every stream), and the
  // scratch key for looking them up. Empty unless deliveries are dropped.
  std::unordered_set<std::string> drops_reported_;
  std::size_t drop_reports_queued_ = 0;  // StreamDropped frames since the last Dropped notice
  std::string drop_key_;
};

}  // namespace switchyard::broker

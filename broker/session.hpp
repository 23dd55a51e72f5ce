#pragma once
// One client connection: a reader coroutine (framing, verification,
// dispatch), a writer coroutine (one gather write per loop turn from the
// bounded outbound queue), a hello watchdog and a heartbeat.

#include "broker/channel_table.hpp"
#include "broker/outbound_queue.hpp"
#include "common/asio.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/read_buffer.hpp"
#include "storage/group_committer.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_set>
#include <vector>

namespace switchyard::broker {

struct server_core;

// Lives on the broker loop thread; every member function runs there. The
// session keeps itself alive through its coroutines and its entry in
// server_core::sessions until fail() has run.
class session : public std::enable_shared_from_this<session> {
 public:
  using clock = std::chrono::steady_clock;

  session(server_core& core, asio::ip::tcp::socket socket, std::uint64_t id);
  ~session();

  // Starts the coroutines. With `reject` set, the session only sends that
  // error (fatal) and closes: used for connections over the cap.
  void start(std::error_code reject = {});

  // Queues a shared Deliver frame unless the session is not ready or is a
  // slow consumer. Never blocks; never closes the session synchronously
  // (the caller may be iterating the channel table).
  void deliver(const frame_ref& frame);
  // The same for a delivery only this session gets (into one of its
  // inboxes): copied into the session's lane, after its earlier frames.
  void deliver(protocol::bytes_view frame);

  // Sends a fatal error frame, stops reading and closes once the frame is
  // written (or after the shutdown grace). Idempotent.
  void close_with_error(protocol::errc code, std::string_view message);

  std::uint64_t id() const noexcept { return id_; }
  bool wants_log_positions() const noexcept { return log_; }

  // Routes the group committer's results to the loop (server::start
  // calls it once, after creating the committer).
  static void install_append_handler(server_core& core, asio::any_io_executor loop);

  // Resolves route keys and delivers the payload once into each inbox (with
  // the log position, to owners granted "log"); gateways[i] is the inbox key
  // i went to or empty. Returns the keys routed. Loop thread.
  static std::uint32_t deliver_to_users(server_core& core, std::span<const std::string_view> keys,
                                        protocol::bytes_view payload, const channel_table::log_position* position,
                                        std::vector<std::string_view>& gateways);

 private:
  asio::awaitable<void> reader(std::shared_ptr<session> self);
  // The reader's two parts: frames until the session closes, then the
  // remaining input, discarded until the peer closes or the session fails.
  asio::awaitable<void> read_frames();
  asio::awaitable<void> discard_input();
  // Verifies and handles the complete frames in `buf` (consuming them);
  // returns how many were handled. May close the session.
  std::size_t handle_input(protocol::read_buffer& buf);
  // After handling: an incomplete frame left in the shared buffer moves to
  // spill_, an emptied spill_ is released, and the frame deadline is
  // checked. False when the session was closed.
  bool settle_input(protocol::read_buffer& buf, std::size_t handled);
  // A read into the shared buffer found nothing: its front (moved there
  // from spill_) goes back.
  void spill_back(protocol::read_buffer& shared);
  // Makes room for `more` bytes in spill_, within the server's bound on
  // incomplete input (else closes with limit_exceeded and returns false).
  // Room for at least `more` bytes; grows by doubling up to `limit`.
  bool grow_spill(std::size_t more, std::size_t limit);
  // Reallocates spill_ to `capacity` (keeping its bytes) and accounts for it.
  void resize_spill(std::size_t capacity);
  void release_spill() noexcept;
  // Closes with limit_exceeded when the incomplete frame is older than
  // frame_timeout; false then.
  bool check_partial_deadline(clock::time_point now);
  asio::awaitable<void> writer(std::shared_ptr<session> self);
  asio::awaitable<void> hello_watchdog(std::shared_ptr<session> self);
  asio::awaitable<void> heartbeat(std::shared_ptr<session> self);
  asio::awaitable<void> close_watchdog(std::shared_ptr<session> self);

  // Handles one verified frame; returns false to stop reading.
  bool handle(const protocol::wire::Frame& frame);
  bool handle_hello(const protocol::wire::Frame& frame);
  void handle_subscribe(std::uint64_t request_id, const protocol::wire::Subscribe& m);
  void handle_unsubscribe(std::uint64_t request_id, const protocol::wire::Unsubscribe& m);
  void handle_publish(std::uint64_t request_id, const protocol::wire::Publish& m);
  // Leases, registry, inboxes and send (session_routing.cpp).
  void handle_routing(const protocol::wire::Frame& frame);
  void handle_send(std::uint64_t request_id, const protocol::wire::Send& m);
  // The sequence log (session_log.cpp).
  void handle_append(std::uint64_t request_id, const protocol::wire::Append& m);
  // Checks an append (capability, unless the server's policy makes it
  // durable; log on; stream name, payload and encoded subject size);
  // answers the error and returns false when it cannot go ahead.
  bool can_append(std::uint64_t request_id, std::string_view stream, std::size_t payload_size,
                  std::size_t subject_size, bool by_policy = false);
  // Queues an append with its encoded delivery subject (log_subject.hpp;
  // empty for a plain append) with the group committer; once durable, a
  // publish (channel set) or send (route keys set) is delivered, and the
  // sender answered.
  void append_to_log(std::uint64_t request_id, std::string_view stream, std::span<const std::byte> payload,
                     std::span<const std::byte> subject, std::string_view channel,
                     std::span<const std::string_view> route_keys = {});
  void handle_read(std::uint64_t request_id, const protocol::wire::Read& m);
  // StreamInfo, StreamList, SetRetention (session_admin.cpp; needs "log").
  void handle_stream_admin(const protocol::wire::Frame& frame);

 public:
  // Loop thread: answers and delivers what the committer finished.
  static void appends_committed(server_core& core);
  // Loop thread, posted once per turn with appends queued: commits them
  // (batch/none: on the loop, a step at a time) or wakes the writer (sync).
  struct commit_step {
    server_core* core;
    asio::any_io_executor loop;
    void operator()() const;
  };
  static void release_wait(server_core& core, std::uint32_t slot);
  // Loop thread: answers an append once it is durable (or failed).
  void finish_append(std::uint64_t request_id, const std::string& stream,
                     const std::expected<storage::append_ack, std::error_code>& result);

 private:

  // Answers that wait for the log (appends, durable publishes and sends,
  // retention changes) finish out of line. Each takes a ticket when it is
  // queued and returns it once answered (or failed), so that a Ping is
  // answered only after every request before it: the flush idiom.
  std::uint64_t open_ticket();
  void close_ticket(std::uint64_t ticket);
  void handle_ping(std::uint64_t request_id);
  // Why a log request is refused without the "log" capability: it was not
  // asked for, or the server has no log (no data dir).
  std::string_view no_log_message() const noexcept;

  // Copies a frame only this connection gets into the arena (see lane_).
  frame_ref store_own(protocol::bytes_view frame);
  void send(protocol::bytes_view frame);  // queue a control frame
  void send_error(std::uint64_t request_id, protocol::errc code, std::string_view message);
  void kick() noexcept;  // wake the writer if it waits
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
  // Only on the drop path; the frame's bytes may be the core's builder
  // buffer, which this overwrites.
  void report_dropped_position(protocol::bytes_view frame);
  // Cache hints for the frames after batch_[i] (reader only).
  void prefetch_ahead(std::size_t i) const noexcept;
  // Logs (EOF and cancellation as normal), closes the socket and removes
  // the session everywhere. Idempotent.
  void fail(asio_error_code ec, std::string_view what);

  server_core& core_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer wake_;       // the writer waits on it; kick() cancels it
  asio::steady_timer hello_timer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer close_timer_;
  const std::uint64_t id_;
  std::string peer_;
  std::string client_name_;
  std::string client_id_;
  outbound_queue queue_;
  static constexpr std::size_t max_batch = 32;  // frames verified ahead of handling
  std::vector<protocol::frame_view> batch_;     // the current read's frames, reused
  frame_lane lane_;  // this connection's own frames; reset whenever queue_ drains
  protocol::frame_parser parser_;
  // An incomplete frame's bytes, only while there is one (else empty, no
  // allocation); counted in server_core::incomplete_bytes.
  protocol::read_buffer spill_;
  clock::time_point partial_since_{};  // when the incomplete frame began; {} if none
  std::size_t read_size_ = 64 * 1024;  // bytes one read may take into the shared buffer (adaptive)
  std::unordered_set<std::string> patterns_;
  clock::time_point last_rx_;
  bool welcomed_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool writer_waiting_ = false;
  bool reading_ = false;  // the reader runs (not for a rejected connection)
  bool goodbye_queued_ = false;  // the fatal Error is queued: nothing more is
  bool goodbye_sent_ = false;    // ... and written, with the socket half-closed
  bool peer_eof_ = false;        // the peer half-closed while we were closing
  bool dropped_notice_ = false;  // capability granted
  bool publish_ack_ = false;     // capability granted
  bool routing_ = false;         // capability granted
  bool log_ = false;             // capability granted
  bool stream_drops_ = false;    // "stream-drops" granted, with "log" and "dropped-notice"
  // (stream, channel or inbox) pairs told in a StreamDropped since the last
  // Dropped notice, Subscribe or InboxOpen (each starts a new subscriber's
  // view, which must hear of its first drop of every stream), and the
  // scratch key for looking them up. Empty unless deliveries are dropped.
  std::unordered_set<std::string> drops_reported_;
  std::size_t drop_reports_queued_ = 0;  // StreamDropped frames since the last Dropped notice
  std::string drop_key_;
  std::vector<std::string> inbox_ids_;  // inboxes opened on this connection
  // Tickets first_open_ticket_ .. + open_tickets_.size() - 1 are taken;
  // open_tickets_[i] says whether that one was closed (popped from the
  // front once it and every one before it are).
  std::uint64_t first_open_ticket_ = 0;
  std::deque<bool> open_tickets_;
  // Pings waiting for open tickets: (request id, tickets taken before it).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> held_pongs_;
};

}  // namespace switchyard::broker

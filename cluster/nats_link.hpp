#pragma once
// nats_link: the broker's one connection to core NATS (cnats 3.4.1,
// <nats/nats.h>), built so that the broker's Asio loop never waits for
// NATS.
//
//   in   cnats's delivery thread (one per subscription) copies subject,
//        reply and payload into the bounded mailbox (mailbox_mu_) and,
//        when the mailbox was empty, posts one drain to the loop; the
//        drain hands everything queued to the subscriptions' handlers in
//        one loop turn. A full mailbox drops the message and counts it.
//   out  publish() copies the message into the bounded outbound queue
//        (queue_mu_) and wakes the sender thread when the queue was empty;
//        the sender thread takes everything queued at once and hands it
//        to cnats (natsConnection_Publish/PublishRequest). With the
//        default options cnats writes each message to the socket at once
//        (natsOptions_SetSendAsap), so a lone message goes out immediately;
//        a blocked socket blocks the sender thread (up to the write
//        deadline), never the loop: the queue fills and publish() refuses.
//   subscribe()/unsubscribe() travel through the same queue (in order
//   with the publishes, never refused for space), so cnats's
//   SUB/UNSUB writes happen on the sender thread too.
//   cnats's connection callbacks (disconnected, reconnected, closed; on
//   cnats's one library-wide callback thread) set the state and post the
//   status handler to the loop when it changes.
//
// Allocation on the hot path: the mailbox and the queue are each two
// vectors of slots (one filled, one being handed on; swapped under the
// lock) whose buffers are reused from message to message; a message
// allocates only when its subject, reply or payload outgrows its slot's
// buffers. After use a buffer is released when it is larger than
// keep_slot_capacity or when the vector's slots already keep the bound's
// bytes (mailbox_max_bytes, queue_max_bytes). cnats itself allocates one
// natsMsg per incoming message (freed in our callback); each drain and
// each status change is one asio::post (Asio recycles handler memory).
//
// Memory a peer can make us hold: the mailbox (mailbox_max_messages and
// mailbox_max_bytes live, at most twice the bytes in kept buffers), each
// cnats subscription's pending buffer (the same bounds, at least
// cnats_pending_floor_*), and while reconnecting cnats's reconnect buffer
// (queue_max_bytes) besides our own queue.
//
// cnats's library: start() calls nats_Open (idempotent; it also makes
// the process ignore SIGPIPE). No link ever calls nats_Close: other links
// may exist, and cnats cannot be opened again once closed. cnats tears
// itself down at process exit (its own atexit hook); a program that must
// release it earlier calls nats_CloseAndWait() once every link is gone.
//
// Thread contract: construct, start(), subscribe(), unsubscribe(),
// set_status_handler() and stop()/destruction on the loop thread (or
// while the loop is not running; start() may block, so call it at
// start-up). publish(), state(), max_payload() and stats() are safe on
// any thread. Handlers run on the loop thread.

#include "cluster/errc.hpp"
#include "common/asio.hpp"
#include "common/mutex.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

// cnats's types (nats/nats.h), kept out of this header.
struct __natsConnection;
struct __natsSubscription;
struct __natsMsg;

namespace switchyard::cluster {

struct nats_link_options {
  // nats://host:port URLs; at least one. Tried in this order when
  // no_randomize (the default: the first is the node's nearest server).
  std::vector<std::string> servers;
  std::string name = "switchyard";  // the CONNECT name (server's connz)
  bool no_randomize = true;
  // Reconnects: -1 = forever (the default), else the attempts per server
  // before cnats gives up and closes the link for good.
  int max_reconnects = -1;
  std::chrono::milliseconds reconnect_wait{250};    // between rounds over the server list
  std::chrono::milliseconds connect_timeout{2000};  // per (re)connect attempt: TCP + first PING
  // How long one socket write may block the sender thread before cnats
  // treats the connection as broken (and reconnects); also bounds stop().
  std::chrono::milliseconds write_deadline{2000};
  // A server that stops answering (no FIN: a partition, a frozen host) is
  // given up after max_pings_out unanswered PINGs sent ping_interval apart
  // (cnats's defaults, 2 min x 2, are too slow for a cluster link).
  std::chrono::milliseconds ping_interval{5000};
  int max_pings_out = 2;
  // Inbound mailbox (peers' messages waiting for the loop). Each cnats
  // subscription's own pending buffer (between cnats's reader thread and
  // the subscription's delivery thread, which copies into the mailbox)
  // gets the same bounds, but at least cnats_pending_floor_* (so a short
  // burst is decided by our mailbox, not by cnats).
  std::size_t mailbox_max_messages = 8192;
  std::size_t mailbox_max_bytes = 16u << 20;  // subject + reply + payload
  // Outbound queue (publishes waiting for the sender thread); also the
  // size of cnats's reconnect buffer (publishes held while reconnecting).
  std::size_t queue_max_messages = 8192;
  std::size_t queue_max_bytes = 16u << 20;
  // false (default): cnats writes every publish to the socket at once
  // (lowest latency, one write per message). true: cnats's flusher thread
  // writes its buffer at most ~1 ms after a publish (fewer writes for
  // bursts, ~1 ms more latency).
  bool coalesce_writes = false;
};

enum class link_state : std::uint8_t {
  idle,          // not started yet
  connected,     // to server_url
  reconnecting,  // lost the server; cnats retries (publishes buffer in cnats)
  closed,        // stopped, or cnats gave up reconnecting
};

std::string_view to_string(link_state s) noexcept;

struct link_stats {
  link_state state = link_state::idle;
  std::string server_url;           // the server connected to (last one while reconnecting)
  std::int64_t max_payload = 0;     // that server's max_payload
  std::uint64_t messages_in = 0;    // accepted into the mailbox
  std::uint64_t bytes_in = 0;       // their payload bytes
  std::uint64_t messages_out = 0;   // handed to cnats by the sender thread
  std::uint64_t bytes_out = 0;      // their payload bytes
  std::uint64_t dropped_in = 0;     // mailbox full, or a cnats subscription's pending buffer full
  std::uint64_t dropped_out = 0;    // publish() refused with queue_full
  std::uint64_t send_failures = 0;  // cnats refused a queued publish (reconnect buffer full, closed)
  std::uint64_t reconnects = 0;
  std::uint64_t slow_consumer_events = 0;  // cnats reported a subscription's pending buffer full
};

// A message as a handler sees it: borrowed for the duration of the call.
struct inbound_message {
  std::string_view subject;
  std::string_view reply;  // empty: none
  std::span<const std::byte> payload;
};

class nats_link {
 public:
  using subscription_id = std::uint64_t;
  using message_handler = std::function<void(const inbound_message&)>;
  using status_handler = std::function<void(link_state)>;
  // Called on the loop once the server acknowledged a SUB (a round trip on
  // the sender thread), or with the error that prevented it.
  using ready_handler = std::function<void(std::error_code)>;

  // A slot's buffers above this capacity are released after use.
  static constexpr std::size_t keep_slot_capacity = 4096;
  // The least bounds of a cnats subscription's pending buffer.
  static constexpr std::size_t cnats_pending_floor_messages = 4096;
  static constexpr std::size_t cnats_pending_floor_bytes = 4u << 20;

  // Handlers are posted to `loop`. Throws std::invalid_argument for
  // options that cannot work (no servers, a zero bound).
  nats_link(asio::any_io_executor loop, nats_link_options options);
  ~nats_link();  // stop()
  nats_link(const nats_link&) = delete;
  nats_link& operator=(const nats_link&) = delete;

  // Called on the loop whenever the state changes (not for idle). Set it
  // before start().
  void set_status_handler(status_handler handler);

  // Connects (blocking: up to connect_timeout per server; no retries) and
  // starts the sender thread. Errors: unreachable (nobody listens),
  // timeout, bad_response (not a NATS server, auth refused), closed (called
  // twice or after stop()). After a failure the link is closed (unusable).
  std::expected<void, std::error_code> start();

  // The connected server's max_payload (0 before start()), for the
  // broker to check against its --max-frame.
  std::int64_t max_payload() const noexcept { return max_payload_.load(std::memory_order_relaxed); }
  link_state state() const noexcept { return state_.load(std::memory_order_acquire); }

  // Loop thread. Subscribes to `subject` (wildcards allowed); messages go
  // to `handler` on the loop thread until unsubscribe() or stop(). The SUB
  // is sent by the sender thread; `ready`, when given, is posted once the
  // server confirmed it. Errors: invalid_argument (empty subject or one
  // with white space), closed (before start() or after stop()).
  std::expected<subscription_id, std::error_code> subscribe(std::string_view subject, message_handler handler,
                                                            ready_handler ready = {});
  // Loop thread. Stops the handler at once (queued messages for it are
  // skipped) and sends UNSUB. Unknown ids are ignored; may be called from
  // within a handler.
  void unsubscribe(subscription_id id);

  // Any thread; never blocks (one short lock). Copies the message into
  // the outbound queue. Errors: invalid_argument (empty subject), closed
  // (before start() or after stop()), payload_too_large (over the server's
  // max_payload), queue_full (over queue_max_messages/bytes: dropped and
  // counted in dropped_out). closed also once cnats gave up reconnecting.
  std::expected<void, std::error_code> publish(std::string_view subject, std::span<const std::byte> payload,
                                               std::string_view reply = {});

  // Any thread: a snapshot of the counters and state.
  link_stats stats() const;

  // Any thread: bytes (subject, reply and payload) of the publishes
  // accepted and not yet handed to cnats, those the sender thread is
  // handing on included. A producer that must not overflow the queue
  // (queue_max_bytes) paces itself by it.
  std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }

  // Stops the link: later publishes fail with closed; the sender thread
  // hands what is already queued to cnats (sent if connected; if
  // reconnecting it sits in cnats's reconnect buffer and is lost), then
  // exits. The connection is closed (cnats unsubscribes everything), the
  // threads joined, and cnats's last callbacks waited for; messages still
  // in the mailbox are discarded. Blocks up to about write_deadline (the
  // sender stuck on a socket write: cnats holds its connection lock while
  // writing, so nothing can cut the write short), plus connect_timeout (a
  // reconnect attempt or a subscribe confirmation in progress), plus
  // cnats's closing flush (<= 500 ms; only with coalesce_writes). The link
  // is not restartable. Idempotent; on the loop thread (or with the loop
  // not running), also from a handler (the drain stops after it).
  void stop();

 private:
  struct sub_record;
  // An incoming message in the mailbox; buffers reused (see above).
  struct in_slot {
    subscription_id id = 0;
    std::string subject;
    std::string reply;
    std::vector<std::byte> payload;
  };
  enum class op : std::uint8_t { publish, subscribe, unsubscribe };
  // An entry of the outbound queue.
  struct out_slot {
    op kind = op::publish;
    subscription_id id = 0;  // subscribe/unsubscribe
    std::string subject;
    std::string reply;
    std::vector<std::byte> payload;
    ready_handler ready;  // subscribe
  };
  struct handler_entry {
    message_handler fn;
    bool active = true;
  };

  // cnats's callbacks (closure: this, or a sub_record), in the .cpp.
  friend struct nats_callbacks;

  // cnats delivery thread: copies the message into the mailbox.
  void enqueue_in(subscription_id id, __natsMsg* msg) SWITCHYARD_EXCLUDES(mailbox_mu_);
  // Loop thread: hands the mailbox to the handlers.
  void drain() SWITCHYARD_EXCLUDES(mailbox_mu_);
  // Queues a control entry (never refused for space); false after stop().
  bool enqueue_control(op kind, subscription_id id, std::string_view subject, ready_handler ready)
      SWITCHYARD_EXCLUDES(queue_mu_);
  void sender_main() SWITCHYARD_EXCLUDES(queue_mu_);
  void send_one(out_slot& s);
  // cnats callback thread: records a state change and posts the handler.
  void set_state(link_state s);
  // Reads the connected server's URL and max_payload.
  void refresh_server_info(__natsConnection* nc);
  // Gives up the link's use of a subscription record (stop, unsubscribe).
  static void detach(sub_record* r);

  asio::any_io_executor loop_;
  const nats_link_options options_;
  // Expires with the link: posted work checks it (both on the loop thread).
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);

  __natsConnection* conn_ = nullptr;  // set by start(), cleared by stop()
  std::atomic<link_state> state_{link_state::idle};
  std::atomic<std::int64_t> max_payload_{0};
  bool started_ = false;           // loop thread
  bool stopped_ = false;           // loop thread
  status_handler status_handler_;  // loop thread

  // Loop thread: the handlers by subscription id.
  std::unordered_map<subscription_id, handler_entry> handlers_;
  subscription_id next_id_ = 1;
  bool draining_now_ = false;
  std::vector<subscription_id> erase_after_drain_;

  // The cnats subscriptions: created and removed by the sender thread
  // (then stop(), after the join), read by stats() (their drop counts).
  mutable switchyard::mutex records_mu_;
  std::unordered_map<subscription_id, sub_record*> records_ SWITCHYARD_GUARDED_BY(records_mu_);

  // Inbound mailbox: cnats delivery threads -> loop.
  switchyard::mutex mailbox_mu_;
  std::vector<in_slot> mailbox_ SWITCHYARD_GUARDED_BY(mailbox_mu_);
  std::size_t mailbox_count_ SWITCHYARD_GUARDED_BY(mailbox_mu_) = 0;
  std::size_t mailbox_bytes_ SWITCHYARD_GUARDED_BY(mailbox_mu_) = 0;
  std::vector<in_slot> draining_;  // loop thread

  // Outbound queue: any thread -> sender thread.
  switchyard::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<out_slot> queue_ SWITCHYARD_GUARDED_BY(queue_mu_);
  std::size_t queue_count_ SWITCHYARD_GUARDED_BY(queue_mu_) = 0;      // entries, control ones included
  std::size_t queue_publishes_ SWITCHYARD_GUARDED_BY(queue_mu_) = 0;  // publish entries (the bound)
  std::size_t queue_bytes_ SWITCHYARD_GUARDED_BY(queue_mu_) = 0;
  bool queue_open_ SWITCHYARD_GUARDED_BY(queue_mu_) = false;  // start() .. stop()
  bool sender_stop_ SWITCHYARD_GUARDED_BY(queue_mu_) = false;
  std::vector<out_slot> sending_;  // sender thread
  std::thread sender_;

  // Server facts, written by start() and the reconnected callback.
  mutable switchyard::mutex info_mu_;
  std::string server_url_ SWITCHYARD_GUARDED_BY(info_mu_);

  // The closed callback has run: cnats calls nothing of ours after it.
  switchyard::mutex closed_mu_;
  std::condition_variable closed_cv_;
  bool closed_seen_ SWITCHYARD_GUARDED_BY(closed_mu_) = false;

  std::atomic<std::uint64_t> messages_in_{0}, bytes_in_{0}, messages_out_{0}, bytes_out_{0};
  std::atomic<std::uint64_t> dropped_in_{0}, dropped_out_{0}, send_failures_{0}, reconnects_{0};
  std::atomic<std::uint64_t> slow_consumer_events_{0}, cnats_dropped_{0};
  std::atomic<std::size_t> pending_bytes_{0};  // pending_bytes()
};

}  // namespace switchyard::cluster

#pragma once
// Internal: the client's connection state (client::impl) and the event
// loop's thread: declarations only. Not installed.
//
// Where the definitions are (one file per role):
//   client.cpp             event_loop::impl; the subscription list
//                          (remove_sub_locked) behind the public connect,
//                          publish, subscribe, flush and close
//   client_connection.cpp  the session: construction, the hello (handshake,
//                          run), reading and dispatching frames, request
//                          answers (complete), heartbeat, fail and close
//   client_reconnect.cpp   reconnecting and restoring the session; the
//                          session records (leases, registry entries)
//   client_durable.cpp     the durable trackers' reads and positions
//   client_routing.cpp     leases, registry, inboxes, send
//                          (parse_send_result, parse_lease, ...)
//   client_stream.cpp      append, read (parse_records)
//   client_impl_inline.hpp the member templates (requests, on_loop,
//                          replace_inboxes_locked) and the per-message
//                          writer (enqueue, hold_locked, start_write) and
//                          local_builder: a file calling them includes it
//                          (it includes this one).

#include "switchyard/client.hpp"

#include "access.hpp"
#include "byte_stream.hpp"
#include "client_log.hpp"
#include "offer_frames.hpp"
#include "reconnect_backoff.hpp"
#include "signing_key.hpp"
#include "stream_tracker.hpp"
#include "common/asio.hpp"
#include "common/mutex.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/read_buffer.hpp"

#include <atomic>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

namespace switchyard {

namespace wire = protocol::wire;
using asio::redirect_error;
using asio::use_awaitable;
using client_lib::log;

// ------------------------------------------------------------- event_loop

struct event_loop::impl {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;

  // Starts the loop's thread (client.cpp).
  impl();
  // Stops the loop and joins its thread. Never runs on `thread` itself
  // (see ~event_loop).
  ~impl();
  // Any thread. Inline: enqueue() asks it on every publish.
  bool on_loop_thread() const noexcept { return thread.get_id() == std::this_thread::get_id(); }
};

// ------------------------------------------------------------------ client

namespace detail {

// The gap tracking of a durable subscription or inbox. The tracker and
// `deliver` are used on the loop thread only; `active` turns false (any
// thread) when the subscription or inbox is removed, so late read answers
// are ignored.
struct durable_state {
  std::optional<stream_tracker> tracker;  // set right after construction (its reads need a weak_ptr to this)
  stream_tracker::deliver_fn deliver;     // hands a recovered record to the entry's handler
  std::size_t read_batch = 0;
  std::atomic<bool> active{true};
};

struct sub_entry {
  subscription_id id;
  std::string pattern;
  message_handler handler;
  std::shared_ptr<durable_state> durable;  // null for a plain subscription
};
using sub_list = std::vector<std::shared_ptr<const sub_entry>>;

struct inbox_entry {
  std::string id;
  inbox_handler handler;
  std::shared_ptr<durable_state> durable;  // null for a plain inbox
  const void* owner = nullptr;             // who opened it (the gateway helper), to remove only its own
  lease_id lease = 0;                      // opened under it (reopened under it, or its replacement, after a reconnect)
};
using inbox_list = std::vector<std::shared_ptr<const inbox_entry>>;

// One broker address of client_options::addresses (or host/port).
struct broker_address {
  std::string host;
  std::uint16_t port = 0;
};
// "host:port" or "[v6]:port"; nullopt when it is neither.
std::optional<broker_address> parse_address(std::string_view text);

// What the client registered on the broker and restores after a reconnect
// (client_reconnect.cpp). Guarded by client::impl::mu.
struct owned_put {
  std::string value;
  lease_id lease = 0;
};

// SendResult -> send_result (send_many, send_durable; client_routing.cpp).
std::expected<send_result, std::error_code> parse_send_result(const wire::Frame& f);

// Records -> stream_read (read(), and the recovery reads).
std::expected<stream_read, std::error_code> parse_records(const wire::Frame& f);

// LeaseInfo -> lease_info; RegistryEntry -> its version (client_routing.cpp).
std::expected<lease_info, std::error_code> parse_lease(const wire::Frame& f);
std::expected<std::uint64_t, std::error_code> parse_put_version(const wire::Frame& f);
// A RegistryEntry answer's value (registry_get).
std::expected<std::string, std::error_code> parse_entry_value(const wire::Frame& f);

}  // namespace detail

using detail::durable_state;
using detail::inbox_entry;
using detail::inbox_list;
using detail::sub_entry;
using detail::sub_list;

struct client::impl : std::enable_shared_from_this<client::impl> {
  using clock = std::chrono::steady_clock;
  // A request's answer: an error, or the answer frame (valid during the call).
  using completion = std::function<void(std::error_code, const wire::Frame*)>;

  // A client on `l` (borrowed: see `loop`), not connected yet; a random
  // client id when `o` has none.
  impl(client_options o, detail::loop_state& l);

  client_options opts;
  // Borrowed: the client object owns the event_loop reference, so the loop
  // is never destroyed from its own thread when the last coroutine lets go
  // of this impl.
  detail::loop_state& loop;
  asio::io_context& io;
  // The connection's bytes go through it only (TLS can replace it).
  client_lib::byte_stream stream;
  bool tls_configured = false;  // loop thread: stream.configure_tls() done
  // client_options::key / key_file, loaded at the first handshake (loop thread).
  std::optional<client_lib::signing_key> key;
  asio::steady_timer heartbeat_timer;
  protocol::frame_parser parser;

  // Welcome data: written on the loop thread before connect() returns, and
  // again at each reconnect (atomics: read by any thread).
  std::atomic<std::uint64_t> session_id{0};
  std::atomic<std::uint64_t> server_instance{0};  // 0: a server older than the field
  std::string server_version;                     // written only when it changes (a broker upgrade)
  std::atomic<std::uint32_t> max_frame{protocol::default_max_frame};
  std::chrono::milliseconds heartbeat{protocol::default_heartbeat_interval};
  std::vector<std::string> caps SWITCHYARD_GUARDED_BY(mu);
  std::atomic<bool> publish_ack{false};
  std::atomic<bool> routing{false};  // "routing" capability granted
  std::atomic<bool> log_cap{false};  // "log" capability granted
  std::atomic<bool> offers{false};   // "offers" capability granted (client_offers.cpp)
  // "stream-drops" granted: the broker reports the first dropped delivery of
  // each stream (StreamDropped), so a durable subscription's first sight of
  // a stream is its first message since the subscribe. Without it (an older
  // broker) a stream whose first messages were dropped starts at the first
  // that arrives.
  std::atomic<bool> stream_drops{false};

  // The socket's session is up (the read loop runs); a restored session is
  // only `ready` once restore() finished.
  std::atomic<bool> open{false};
  std::atomic<bool> ready{false};  // connected(): a session is up and restored
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> next_request{1};
  clock::time_point last_rx = clock::now();
  std::error_code server_goodbye;                    // last fatal Error from the server (loop thread)
  std::chrono::milliseconds goodbye_retry_after{0};  // its retry_after_ms (loop thread)
  bool closed_by_user = false;                       // loop thread

  // ---- reconnect (loop thread unless said otherwise) ----
  std::vector<detail::broker_address> addresses;  // shuffled; set by run()
  std::size_t address_index = 0;                  // the one in use or tried last
  std::uint64_t generation = 0;                   // +1 per connection: callbacks of an earlier one are ignored
  asio::steady_timer retry_timer;
  detail::reconnect_backoff backoff;
  std::atomic<std::uint64_t> attempts_total{0};
  bool established = false;  // a session was up once: losses are reconnected from then on

  // mu guards the outbound buffer, the requests in flight, the
  // subscriptions and inboxes, and what restore() brings back (each such
  // field says SWITCHYARD_GUARDED_BY(mu)); `writing` and `key_scratch` are
  // the loop thread's.
  switchyard::mutex mu;
  std::condition_variable space_cv;                         // waited on under mu
  std::vector<std::uint8_t> out SWITCHYARD_GUARDED_BY(mu);  // frames waiting for the writer
  std::vector<std::uint8_t> writing;                        // frames being written (loop thread)
  bool write_active SWITCHYARD_GUARDED_BY(mu) = false;      // writer scheduled or running
  // The connection's state for writers:
  //  up         frames go to `out`;
  //  restoring  restore()'s own frames (internal) go to `out`, others are held;
  //  down       reconnecting: user frames are held, internal ones refused;
  //  closed     for good: everything is refused (not_connected).
  enum class link { up, restoring, down, closed };
  link state SWITCHYARD_GUARDED_BY(mu) = link::up;
  // Frames held while not up, written in order once restored: publishes
  // (counted against reconnect.buffer_bytes) and requests made meanwhile
  // (their id: skipped if the request timed out).
  struct held_frame {
    std::size_t size;
    std::uint64_t request_id;  // 0: a publish or send_nowait
  };
  std::vector<std::uint8_t> held SWITCHYARD_GUARDED_BY(mu);
  std::vector<held_frame> held_frames SWITCHYARD_GUARDED_BY(mu);
  std::size_t held_publish_bytes SWITCHYARD_GUARDED_BY(mu) = 0;
  // What restore() brings back (besides subs and inboxes).
  std::map<lease_id, std::chrono::milliseconds> owned_leases SWITCHYARD_GUARDED_BY(mu);  // id -> TTL as granted
  std::unordered_map<lease_id, lease_id> lease_moves
      SWITCHYARD_GUARDED_BY(mu);  // an old id -> the grant that replaced it
  std::map<std::string, detail::owned_put, std::less<>> owned_puts SWITCHYARD_GUARDED_BY(mu);
  // Told (on the loop thread, during restore) of every lease replaced:
  // the gateway helper, keyed by its address.
  std::map<const void*, std::function<void(lease_id old_lease, lease_id new_lease)>> lease_listeners
      SWITCHYARD_GUARDED_BY(mu);
  std::unordered_map<std::uint64_t, completion> requests SWITCHYARD_GUARDED_BY(mu);
  std::shared_ptr<const sub_list> subs SWITCHYARD_GUARDED_BY(mu) = std::make_shared<const sub_list>();
  std::map<std::string, int, std::less<>> pattern_refs SWITCHYARD_GUARDED_BY(mu);
  std::shared_ptr<const inbox_list> inboxes SWITCHYARD_GUARDED_BY(mu) = std::make_shared<const inbox_list>();
  std::vector<std::string_view> key_scratch;  // loop thread: route keys of one delivery

  // Loop thread: hands an inbox delivery to the handlers of its inbox in
  // `handlers` (a durable one's only if its tracker has not seen it).
  // Inline, defined in client_connection.cpp next to dispatch (its only
  // caller, per delivery).
  inline void dispatch_inbox(const wire::InboxDelivery& d, const inbox_list& handlers);

  // ------------------------------------------------------ durable streams
  // (client_durable.cpp, but for the two lists' edits and on_loop)

  std::atomic<std::uint64_t> recovered{0};  // records delivered from the log

  // Loop thread: the recovery read of a durable subscription or inbox; the
  // answer goes back to its tracker unless it was removed meanwhile.
  void durable_read(const std::weak_ptr<durable_state>& weak, const std::string& stream, std::uint64_t from,
                    std::size_t batch);

  // A durable_state whose reads go through this connection. Errors:
  // invalid_position (o.resume_from has a sequence without its epoch).
  std::expected<std::shared_ptr<durable_state>, std::error_code> make_durable(durable_options& o);

  // Under mu (client.cpp): removes subscription `id` (a durable one stops tracking) and
  // drops a reference to its pattern. Returns the pattern ("" for an
  // unknown id) and whether that was the pattern's last subscription.
  std::pair<std::string, bool> remove_sub_locked(subscription_id id) SWITCHYARD_REQUIRES(mu);

  // Under mu (client_impl_inline.hpp): removes the inboxes `drop(entry)`
  // selects (durable ones stop tracking); `add`, if given, joins the list.
  template <class Drop>
  void replace_inboxes_locked(Drop drop, std::shared_ptr<const inbox_entry> add = nullptr) SWITCHYARD_REQUIRES(mu);

  // A durable subscription's or inbox's positions (empty for null), read on
  // the loop thread, which owns the tracker.
  stream_positions positions_of(const std::shared_ptr<durable_state>& d);

  // Any thread but a handler blocking the loop (client_impl_inline.hpp):
  // runs fn on the loop thread and returns its result (directly when called
  // there).
  template <class F>
  auto on_loop(F fn) -> decltype(fn());
  subscription_id next_sub SWITCHYARD_GUARDED_BY(mu) = 1;

  // ---------------------------------------------------------------- write
  // (client_impl_inline.hpp: on the publish and send path of several files)

  // What a frame does past max_pending_bytes.
  enum class room : std::uint8_t {
    // Waits for room (up to request_timeout), or fails at once with
    // buffer_full without opts.wait_for_space; never on the loop thread.
    bounded,
    // Neither: a frame that undoes state the client holds (an
    // Unsubscribe), so that its count is bounded by that state.
    exempt,
  };

  // Appends one encoded frame (any thread); past max_pending_bytes as
  // `r` says. `internal`: restore()'s and the heartbeat's own frames,
  // which go out while the session is being restored and are refused
  // while it is down; the others are held (hold_locked) until it is
  // restored. `request_id`: the request the frame carries (0: none).
  inline std::error_code enqueue(protocol::bytes_view frame, bool internal = false, std::uint64_t request_id = 0,
                                 room r = room::bounded);

  // Under mu, while not up: keeps `frame` for the restored session.
  // Publishes count against reconnect.buffer_bytes (errc::buffer_full past
  // it); a request's frame is bounded by its own timeout.
  inline std::error_code hold_locked(protocol::bytes_view frame, std::uint64_t request_id) SWITCHYARD_REQUIRES(mu);

  // Loop thread: writes whatever is queued, then again until empty. A
  // write of an earlier connection that completes late only restarts the
  // writer (its buffer is not shared with the next connection's: the
  // writer stays active until that completion).
  inline void start_write();

  // ------------------------------------------------------------- requests
  // (client_impl_inline.hpp; complete: client_connection.cpp)

  // Registers `done` under a fresh request id, encodes with `encode(id)` and
  // sends (past max_pending_bytes as `r` says). `done` runs on the loop
  // thread (or here, at once, on a send error).
  // While the session is down or being restored, the request is held and
  // sent once it is restored (`internal`: restore()'s own, sent while
  // restoring, refused with not_connected while down).
  template <class Encode>
  void request(Encode encode, completion done, bool internal = false, room r = room::bounded);

  // Any thread: runs request `id`'s completion with `ec` and `answer`
  // (borrowed for the call) and forgets it; nothing if it already ran.
  void complete(std::uint64_t id, std::error_code ec, const wire::Frame* answer = nullptr);

  // request() with a deadline: `done` gets errc::timeout when the broker
  // has not answered within opts.request_timeout (a late answer is then
  // ignored). Any thread; `done` runs on the loop thread, or here at once
  // on a send error. A timer per call: for occasional requests (the
  // gateway helper's), not for the hot path.
  template <class Encode>
  void timed_request(Encode encode, completion done);

  // Blocking request (not on the loop thread): waits up to request_timeout
  // and turns the answer frame into T with `parse`.
  template <class T, class Encode, class Parse>
  std::expected<T, std::error_code> call(Encode encode, Parse parse);

  // Non-blocking request: `done` gets the parsed answer on the loop thread.
  template <class T, class Encode, class Parse>
  void call_async(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done);
  // The same with request_timeout (timed_request).
  template <class T, class Encode, class Parse>
  void call_timed(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done);
  // A completion that hands `done` the answer turned into T by `parse`.
  template <class T, class Parse>
  static completion parsed(Parse parse, std::function<void(std::expected<T, std::error_code>)> done);

  // A blocking request whose success answer carries nothing (Ok, Pong).
  template <class Encode>
  std::error_code request_sync(Encode encode);

  // ------------------------------------------------------------ lifecycle
  // (client_connection.cpp; drop_held_locked: client_reconnect.cpp)

  // Loop thread. Ends the connection once. Requests in flight fail with
  // errc::connection_lost (not_connected after close()). With reconnect on
  // and a session established before (not close()), the client goes
  // `down`, calls on_disconnect and starts reconnecting; requests and
  // publishes held for the restored session stay. Otherwise it is closed
  // for good (on_disconnect, then on_closed).
  void fail(std::error_code ec, std::string_view what);

  // Under mu: forgets everything held for a restored session.
  void drop_held_locked() SWITCHYARD_REQUIRES(mu);

  // Loop thread: the client is done for good while down (close() or giving
  // up). Every request fails with `request_error`, held frames are
  // dropped; on_closed(reason) when `reason` is set.
  void close_down(std::error_code request_error, std::error_code reason);

  // Loop thread: close(). Stops reconnecting too.
  void close_now();

  // Loop thread, one per session: pings every heartbeat interval and
  // fails the session (heartbeat_timeout) when nothing arrived for 2.5
  // intervals. Ends with the session.
  asio::awaitable<void> heartbeat_loop(std::shared_ptr<impl> keep_alive);

  // --------------------------------------------------------------- reader
  // (client_connection.cpp)

  protocol::read_buffer rbuf;  // loop thread

  // Reads until at least one complete frame is buffered; returns it, or an
  // error (socket or protocol).
  asio::awaitable<std::expected<protocol::frame_view, std::error_code>> read_frame();

  // Handles one frame after the welcome. Returns false to stop reading.
  bool dispatch(const wire::Frame& f, const sub_list& subscriptions, const inbox_list& inboxes);

  // Loop thread, one per session (started with its heartbeat_loop): reads
  // and dispatches frames until the session fails or a later one starts.
  asio::awaitable<void> read_loop(std::shared_ptr<impl> self);

  // Connect + hello + welcome to `to` within opts.connect_timeout, on the
  // loop thread. On success the new session's welcome data is in place,
  // `generation` moved on and `open` is set (the caller starts the read
  // loop). A refused hello returns the server's code, and its
  // retry_after_ms in `retry_after`.
  asio::awaitable<std::error_code> handshake(std::shared_ptr<impl> self, const detail::broker_address& to,
                                             std::chrono::milliseconds& retry_after);

  // The first connect: each address once, in the shuffled order, until one
  // answers. Calls `ready_fn` once with the outcome (on the loop thread) and
  // destroys it right after (what it holds, such as the event_loop, is not
  // kept for the session's life), then keeps reading. Not retried:
  // connect() fails fast when no broker answers.
  asio::awaitable<void> run(std::shared_ptr<impl> self, std::function<void(std::error_code)> ready_fn);

  // ------------------------------------------------------------ reconnect
  // (client_reconnect.cpp; on the loop thread unless said otherwise)

  // After a loss: schedules the attempts (reconnect_loop).
  void start_reconnect();
  asio::awaitable<void> reconnect_loop(std::shared_ptr<impl> self, std::uint64_t instance_before);
  // A new session is up: subscriptions, leases, inboxes and registry
  // entries go back, then held frames, then on_reconnect.
  void restore(std::uint64_t gen, reconnect_info info);
  // Reopens `box` under its lease (or the lease's replacement) and calls
  // `answered` (if set) with the first answer; inbox_taken is retried in
  // the background (max_inbox_retries, inbox_retry_delay apart) while this
  // session lasts. `tries` 0: part of restore() (sent while restoring).
  void reopen_inbox(std::uint64_t gen, std::shared_ptr<const inbox_entry> box, int tries,
                    std::function<void()> answered);
  static constexpr int max_inbox_retries = 30;
  static constexpr std::chrono::milliseconds inbox_retry_delay{500};
  // Puts registry entry `key` again (under `put`'s lease) and calls
  // `answered` (if set) with the first answer. In cluster mode a put the
  // broker answers `unavailable` (its partition's owner is out of reach
  // for now: a node just died, or this one is cut off from etcd) is retried
  // in the background, put_retry_delay doubling up to put_retry_max_delay
  // apart (with jitter), while this session lasts and the entry is still
  // this client's, under that lease. `tries` 0: part of restore().
  void reput(std::uint64_t gen, std::string key, detail::owned_put put, int tries, std::function<void()> answered);
  static constexpr std::chrono::milliseconds put_retry_delay{200};
  static constexpr std::chrono::milliseconds put_retry_max_delay{2000};
  // Any thread: `box` is still in the inbox list (not closed or replaced).
  bool inbox_installed(const inbox_entry* box);
  // The last phase of restore(): the session is up for everyone.
  void restored(std::uint64_t gen, reconnect_info info);

  // Any thread: a lost session is being re-established (neither up nor
  // closed for good).
  bool reconnecting();

  // ------------------------------------------------------ session records
  // (client_reconnect.cpp; any thread; they lock mu)

  // The id that replaced `id` after a reconnect (itself if none).
  lease_id resolve_lease(lease_id id);
  // A lease granted (or kept alive) through this client: restored after a
  // reconnect.
  void track_lease(lease_id id, std::chrono::milliseconds ttl);
  // Revoked, or given up by its owner: neither it nor its entries come back.
  void forget_lease(lease_id id);
  // `fresh` replaced `old` (a re-grant): calls with `old` go to `fresh`,
  // and the entries under `old` are restored under `fresh`.
  void move_lease(lease_id old, lease_id fresh, std::chrono::milliseconds ttl);
  // A registry entry put through this client (under `lease`, 0 for none):
  // restored after a reconnect.
  void track_put(std::string_view key, std::string_view value, lease_id lease);
  // Deleted, or put again with a TTL of its own: not restored.
  void forget_put(std::string_view key);
  // Any thread, before a put or delete of `key` by the user goes out: a
  // background retry of a restored put of it (reput) is dropped, so it
  // cannot overwrite what the user writes now.
  void cancel_put_retry(std::string_view key);
  // Restored puts being retried: key -> the retry's token (reput).
  std::map<std::string, std::uint64_t, std::less<>> put_retries SWITCHYARD_GUARDED_BY(mu);
  std::uint64_t next_put_retry SWITCHYARD_GUARDED_BY(mu) = 0;
};

namespace detail {

// Adds a subscription (plain, or durable with `durable` set) and asks the
// broker for it unless the pattern is already subscribed and the
// subscription is plain (a durable one always asks: its Subscribe is where
// it starts). `done` runs on the loop thread, or at once on a local error
// or a known pattern.
void add_subscription(const std::shared_ptr<client_state>& self, std::string_view pattern, message_handler handler,
                      std::shared_ptr<durable_state> durable,
                      std::function<void(std::expected<subscription_id, std::error_code>)> done);

// open_inbox / open_inbox_durable (with `durable` set) without blocking,
// for the gateway helper: the handler is installed at once (a delivery may
// follow the Ok immediately) and removed again if the broker refuses.
// `owner` tags the entry (see remove_inboxes_of). `done` runs on the loop
// thread, or at once on a local error (not_supported, invalid_position,
// not_connected); errc::timeout after request_timeout. Any thread.
void open_inbox_async(const std::shared_ptr<client_state>& self, std::string_view id, lease_id lease,
                      inbox_handler handler, std::optional<durable_options> durable, const void* owner,
                      std::function<void(std::error_code)> done);

// Removes, on this side only, the inboxes `owner` opened (the broker is not
// told). Called on the loop thread, their handlers are not called again;
// from another thread, a delivery being dispatched may still reach one.
void remove_inboxes_of(client_state& p, const void* owner);

}  // namespace detail

}  // namespace switchyard

#pragma once
// One device's socket: with --tls-cert a TLS handshake first (wss://), then
// the HTTP upgrade at /ws, then WebSocket text frames
// (device_protocol.hpp). It reads, rate-limits and parses what the device
// sends and hands each message to its session_host (the gateway_server);
// it writes what the host queues, within --max-pending-bytes (the slow
// consumer policy), and closes with a code from device_errc.
//
// Threads: everything runs on the gateway's io thread, the one that runs
// the io_context the socket belongs to. The host holds sessions by
// shared_ptr while they live; a session calls host.closed() once, when
// its socket is done.

#include "gateway/device_errc.hpp"
#include "gateway/device_protocol.hpp"
#include "gateway/tls_socket.hpp"
#include "gateway/liveness.hpp"

#include "common/asio.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace switchyard::edge {

class device_session;

// What a session asks of the gateway (implemented by gateway_server). Each
// call is made on the io thread; `s` is borrowed for the call only.
class session_host {
 public:
  // Whether a new socket may upgrade (the socket cap, a drain): false
  // answers HTTP 503 with a Retry-After.
  virtual bool admit() = 0;
  // The hello: the host verifies the token and, later or at once, calls
  // s.welcome() or s.close().
  virtual void hello(device_session& s, hello_message m) = 0;
  virtual void subscribe(device_session& s, const subscribe_message& m) = 0;
  virtual void unsubscribe(device_session& s, const unsubscribe_message& m) = 0;
  virtual void ack(device_session& s, const ack_message& m) = 0;
  // The socket is done: forget `s` (it stays valid until this returns).
  virtual void closed(device_session& s) = 0;

 protected:
  ~session_host() = default;
};

struct session_limits {
  std::size_t max_message_bytes = 16 * 1024;
  std::uint32_t max_messages_per_s = 50;
  std::uint32_t message_burst = 100;
  std::size_t max_pending_bytes = 1 << 20;
  bool disconnect_slow = false;  // true: close a slow consumer; false: drop and count
};

class device_session : public std::enable_shared_from_this<device_session> {
 public:
  using text = std::shared_ptr<const std::string>;

  // Takes the accepted socket; with `tls` (shared: the socket keeps the
  // context it started with) the device speaks TLS (tls_socket). Nothing
  // happens before start().
  device_session(asio::ip::tcp::socket socket, std::shared_ptr<device_tls> tls, session_host& host,
                 const session_limits& limits, std::uint64_t id, steady_time now);
  ~device_session();
  device_session(const device_session&) = delete;
  device_session& operator=(const device_session&) = delete;

  // Reads the upgrade, then messages, until the socket is done.
  void start();

  // Queues a text frame, or, past --max-pending-bytes, drops it (counted
  // and told with a "dropped" message once the queue drains) or closes the
  // socket as a slow consumer (--slow-consumer disconnect, and always for a
  // frame that `must_arrive`: a durable message dropped would leave a hole
  // the device's position skips). Nothing once closing.
  void send(text frame, bool must_arrive = false);
  void send(std::string frame) { send(std::make_shared<const std::string>(std::move(frame))); }
  // Live frames held while a stream is read back count against the same
  // bound: false (and the socket closed as a slow consumer) past it.
  bool hold(std::size_t bytes);
  // Calls `fn` (once, on the io thread) when at most `bytes` wait to be
  // written: at once if so already, else after the write that gets there.
  // Dropped if the socket closes first. One at a time (a later one
  // replaces it).
  void when_drained_to(std::size_t bytes, std::function<void()> fn);
  void release_held(std::size_t bytes) { held_bytes_ -= std::min(held_bytes_, bytes); }
  // The hello was accepted: the welcome goes out; later messages are
  // handed to the host.
  void welcome(std::string user, std::string welcome_frame, std::optional<steady_time> token_expiry);
  // Closes with `code` (its close code and reason from device_errc; a
  // socket not upgraded yet is just closed). Idempotent.
  void close(device_errc code, std::string_view detail = {});
  // Closes the TCP socket at once, under TLS too (a close that did not
  // finish in time, a socket not upgraded yet, the end).
  void abort();
  // A WebSocket ping (at most one in flight).
  void ping(steady_time now);

  std::uint64_t id() const noexcept { return id_; }
  const std::string& user() const noexcept { return user_; }  // empty before welcome()
  bool welcomed() const noexcept { return !user_.empty(); }
  bool closing() const noexcept { return timers_.closing_since.has_value(); }
  // Not closing and not done: what is queued now may still be written.
  bool active() const noexcept { return !finished_ && !closing(); }
  const liveness& timers() const noexcept { return timers_; }
  std::uint64_t dropped() const noexcept { return dropped_total_; }
  // The TLS handshake failed (or the socket closed during it).
  bool tls_failed() const noexcept { return tls_failed_; }
  // Why the gateway closed it (nullopt: the device closed, or the
  // connection was lost).
  std::optional<device_errc> closed_for() const noexcept { return closed_for_; }
  std::size_t pending_bytes() const noexcept { return pending_bytes_; }

  // Per-socket state the host keeps here (its subscriptions, the offers
  // it may ack, what the device declared).
  std::vector<std::string> subscriptions;
  std::vector<std::uint64_t> offers_held;     // oldest first, at most --max-offers-held
  std::vector<std::string> caps;              // granted
  std::vector<std::string> channels_allowed;  // the token's "channels"
  bool offers_on = false;                     // the device gets offers as "offer" (cap and flag)
  // The hello's resume points, until the welcome; then, per stream being
  // read back, the live durable frames held meanwhile (seq, frame).
  std::map<std::string, resume_point, std::less<>> resume_request;
  std::map<std::string, std::vector<std::pair<std::uint64_t, text>>, std::less<>> resuming;
  // Per durable stream, the last (epoch, seq) written to this device: a
  // record at or before it is not written again (the gateway's inbox may
  // read back what a resume already gave).
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>, std::less<>> last_sent;
  // Whether (stream, epoch, seq) is new to this device; notes it if so.
  // At most max_tracked_streams are tracked (then an arbitrary one is
  // forgotten: only its repeats could get through).
  static constexpr std::size_t max_tracked_streams = 256;
  bool first_time(std::string_view stream, std::uint64_t epoch, std::uint64_t seq) {
    if (last_sent.size() >= max_tracked_streams && !last_sent.contains(stream)) last_sent.erase(last_sent.begin());
    auto [it, fresh] = last_sent.try_emplace(std::string(stream), epoch, seq);
    if (fresh) return true;
    if (it->second.first == epoch && seq <= it->second.second) return false;
    it->second = {epoch, seq};
    return true;
  }

 private:
  asio::awaitable<void> run();
  asio::awaitable<void> writer();
  void handle(std::string_view frame);
  bool take_token(steady_time now);  // the rate limit: false = over it
  void finish();                     // closes the TCP socket, tells the host (once)

  // The stream's operations on either kind of socket.
  template <class F>
  decltype(auto) on_ws(F&& f) {
    return std::visit(std::forward<F>(f), ws_);
  }

  using plain_ws = boost::beast::websocket::stream<asio::ip::tcp::socket>;
  using tls_ws = boost::beast::websocket::stream<tls_socket>;
  std::variant<plain_ws, tls_ws> ws_;
  session_host& host_;
  const session_limits& limits_;
  const std::uint64_t id_;
  std::string user_;
  std::optional<device_errc> closed_for_;
  liveness timers_;
  boost::beast::flat_buffer in_;
  std::deque<text> out_;
  std::size_t pending_bytes_ = 0;
  std::size_t held_bytes_ = 0;
  std::size_t drained_to_ = 0;
  std::function<void()> on_drained_;
  std::uint64_t dropped_ = 0;  // since the last "dropped" message
  std::uint64_t dropped_total_ = 0;
  asio::steady_timer wake_;  // the writer waits on it while out_ is empty
  bool writer_started_ = false;
  bool ping_in_flight_ = false;
  bool finished_ = false;
  bool tls_failed_ = false;
  double tokens_;  // the rate limit's bucket
  steady_time tokens_at_;
};

}  // namespace switchyard::edge

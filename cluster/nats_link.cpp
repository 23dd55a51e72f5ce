#include "cluster/nats_link.hpp"

#include <nats/nats.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <stdexcept>
#include <utility>

namespace switchyard::cluster {

namespace {

// The one translation of cnats's status codes into errc.
std::error_code to_error_code(natsStatus s) noexcept {
  switch (s) {
    case NATS_OK:
      return {};
    case NATS_NO_SERVER:
    case NATS_IO_ERROR:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_NOT_YET_CONNECTED:
      return errc::unreachable;
    case NATS_TIMEOUT:
      return errc::timeout;
    case NATS_CONNECTION_CLOSED:
    case NATS_DRAINING:
    case NATS_FAILED_TO_INITIALIZE:
    case NATS_NOT_INITIALIZED:
      return errc::closed;
    case NATS_MAX_PAYLOAD:
      return errc::payload_too_large;
    case NATS_INSUFFICIENT_BUFFER:
    case NATS_SLOW_CONSUMER:
      return errc::queue_full;
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_ARG:
    case NATS_ADDRESS_MISSING:
    case NATS_INVALID_TIMEOUT:
    case NATS_INVALID_SUBSCRIPTION:
    case NATS_INVALID_QUEUE_NAME:
      return errc::invalid_argument;
    default:  // protocol errors, auth refused, TLS wanted, no server support, ...
      return errc::bad_response;
  }
}

// What cnats dropped for a full pending buffer of `sub` (0 once closed).
std::uint64_t cnats_dropped(natsSubscription* sub) noexcept {
  int64_t dropped = 0;
  return natsSubscription_GetDropped(sub, &dropped) == NATS_OK && dropped > 0 ? static_cast<std::uint64_t>(dropped) : 0;
}

int clamp_int(std::size_t v) noexcept { return static_cast<int>(std::min<std::size_t>(v, INT_MAX)); }

// A subject or reply as the NATS protocol can carry it: no white space or
// control characters (they would split the PUB/SUB line).
bool valid_token(std::string_view s) noexcept {
  return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; });
}

// Releases a buffer that grew past the link's keep bound, or once the
// slots already keep `budget` bytes; adds what it keeps to `kept`.
template <class Buffer>
void trim(Buffer& b, std::size_t& kept, std::size_t budget) {
  if (b.capacity() > nats_link::keep_slot_capacity || kept + b.capacity() > budget) {
    Buffer().swap(b);
  } else {
    b.clear();
  }
  kept += b.capacity();
}

}  // namespace

std::string_view to_string(link_state s) noexcept {
  switch (s) {
    case link_state::idle:
      return "idle";
    case link_state::connected:
      return "connected";
    case link_state::reconnecting:
      return "reconnecting";
    case link_state::closed:
      return "closed";
  }
  return "unknown";
}

// A cnats subscription as its callbacks see it. The link and cnats's
// delivery thread share it: the message callback reaches the link only
// under mu while `link` is set; whichever of detach() (the link lets go)
// and the completion callback (cnats will not call again) comes second
// deletes it.
struct nats_link::sub_record {
  switchyard::mutex mu;
  nats_link* link SWITCHYARD_GUARDED_BY(mu) = nullptr;
  bool completed SWITCHYARD_GUARDED_BY(mu) = false;
  subscription_id id = 0;
  natsSubscription* sub = nullptr;
};

struct nats_callbacks {
  // cnats's delivery thread of the subscription.
  static void on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* r = static_cast<nats_link::sub_record*>(closure);
    {
      switchyard::lock_guard lock(r->mu);
      if (r->link != nullptr) r->link->enqueue_in(r->id, msg);
    }
    natsMsg_Destroy(msg);
  }
  // cnats's delivery thread, after its last message callback.
  static void on_sub_complete(void* closure) {
    auto* r = static_cast<nats_link::sub_record*>(closure);
    bool orphan = false;
    {
      switchyard::lock_guard lock(r->mu);
      r->completed = true;
      orphan = r->link == nullptr;
    }
    if (orphan) delete r;
  }
  // cnats's callback thread (one per process, in order).
  static void on_disconnected(natsConnection*, void* closure) {
    static_cast<nats_link*>(closure)->set_state(link_state::reconnecting);  // ignored once closed
  }
  static void on_reconnected(natsConnection* nc, void* closure) {
    auto* link = static_cast<nats_link*>(closure);
    link->reconnects_.fetch_add(1, std::memory_order_relaxed);
    link->refresh_server_info(nc);
    link->set_state(link_state::connected);
  }
  static void on_closed(natsConnection*, void* closure) {
    auto* link = static_cast<nats_link*>(closure);
    link->set_state(link_state::closed);
    switchyard::lock_guard lock(link->closed_mu_);
    link->closed_seen_ = true;
    link->closed_cv_.notify_all();  // under the lock: stop() cannot return (and free it) before we let go
  }
  static void on_error(natsConnection*, natsSubscription*, natsStatus err, void* closure) {
    auto* link = static_cast<nats_link*>(closure);
    if (err == NATS_SLOW_CONSUMER) link->slow_consumer_events_.fetch_add(1, std::memory_order_relaxed);
  }
};

nats_link::nats_link(asio::any_io_executor loop, nats_link_options options)
    : loop_(std::move(loop)), options_(std::move(options)) {
  if (options_.servers.empty()) throw std::invalid_argument("nats_link: no NATS server URL");
  if (options_.mailbox_max_messages == 0 || options_.mailbox_max_bytes == 0 || options_.queue_max_messages == 0 ||
      options_.queue_max_bytes == 0)
    throw std::invalid_argument("nats_link: the mailbox and queue bounds must be positive");
  if (options_.reconnect_wait.count() < 0 || options_.connect_timeout.count() <= 0 ||
      options_.write_deadline.count() <= 0 || options_.ping_interval.count() <= 0 || options_.max_pings_out <= 0)
    throw std::invalid_argument("nats_link: the timeouts and intervals must be positive");
}

nats_link::~nats_link() { stop(); }

void nats_link::set_status_handler(status_handler handler) { status_handler_ = std::move(handler); }

std::expected<void, std::error_code> nats_link::start() {
  if (started_ || stopped_) return std::unexpected(make_error_code(errc::closed));
  started_ = true;
  const auto fail = [this](natsStatus s) {
    state_.store(link_state::closed, std::memory_order_release);  // unusable from here on
    return std::unexpected(to_error_code(s));
  };
  if (natsStatus s = nats_Open(-1); s != NATS_OK) return fail(s);

  natsOptions* raw = nullptr;
  if (natsStatus s = natsOptions_Create(&raw); s != NATS_OK) return fail(s);
  const std::unique_ptr<natsOptions, decltype(&natsOptions_Destroy)> opts(raw, &natsOptions_Destroy);
  std::vector<const char*> urls;
  for (const auto& u : options_.servers) urls.push_back(u.c_str());
  const auto ms = [](std::chrono::milliseconds d) { return static_cast<int64_t>(d.count()); };
  natsStatus s = natsOptions_SetServers(raw, urls.data(), static_cast<int>(urls.size()));
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(raw, options_.no_randomize);
  if (s == NATS_OK && !options_.name.empty()) s = natsOptions_SetName(raw, options_.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(raw, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(raw, options_.max_reconnects);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(raw, ms(options_.reconnect_wait));
  if (s == NATS_OK) s = natsOptions_SetTimeout(raw, ms(options_.connect_timeout));
  if (s == NATS_OK) s = natsOptions_SetWriteDeadline(raw, ms(options_.write_deadline));
  if (s == NATS_OK) s = natsOptions_SetPingInterval(raw, ms(options_.ping_interval));
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(raw, options_.max_pings_out);
  if (s == NATS_OK) s = natsOptions_SetSendAsap(raw, !options_.coalesce_writes);
  if (s == NATS_OK)
    s = natsOptions_SetMaxPendingMsgs(raw,
                                      clamp_int(std::max(options_.mailbox_max_messages, cnats_pending_floor_messages)));
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(raw, clamp_int(options_.queue_max_bytes));
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(raw, &nats_callbacks::on_error, this);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(raw, &nats_callbacks::on_disconnected, this);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(raw, &nats_callbacks::on_reconnected, this);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(raw, &nats_callbacks::on_closed, this);
  if (s != NATS_OK) return fail(s);

  natsConnection* nc = nullptr;
  // A failed connect invokes none of our callbacks and keeps no connection.
  if (s = natsConnection_Connect(&nc, raw); s != NATS_OK) return fail(s);
  conn_ = nc;
  refresh_server_info(nc);
  set_state(link_state::connected);
  {
    switchyard::lock_guard lock(queue_mu_);
    queue_open_ = true;
  }
  sender_ = std::thread([this] { sender_main(); });
  return {};
}

void nats_link::refresh_server_info(natsConnection* nc) {
  char url[256] = {};
  const bool got = natsConnection_GetConnectedUrl(nc, url, sizeof url) == NATS_OK && url[0] != '\0';
  max_payload_.store(natsConnection_GetMaxPayload(nc), std::memory_order_relaxed);
  if (got) {
    switchyard::lock_guard lock(info_mu_);
    server_url_ = url;
  }
}

void nats_link::set_state(link_state s) {
  // closed is final: a late disconnected/reconnected callback cannot undo it.
  link_state old = state_.load(std::memory_order_acquire);
  do {
    if (old == s || old == link_state::closed) return;
  } while (!state_.compare_exchange_weak(old, s, std::memory_order_acq_rel));
  asio::post(loop_, [this, alive = std::weak_ptr<int>(alive_), s] {
    if (alive.expired() || !status_handler_) return;
    status_handler_(s);
  });
}

std::expected<nats_link::subscription_id, std::error_code> nats_link::subscribe(std::string_view subject,
                                                                                message_handler handler,
                                                                                ready_handler ready) {
  if (subject.empty() || !valid_token(subject) || !handler)
    return std::unexpected(make_error_code(errc::invalid_argument));
  if (!started_ || stopped_) return std::unexpected(make_error_code(errc::closed));
  const subscription_id id = next_id_++;
  if (!enqueue_control(op::subscribe, id, subject, std::move(ready)))
    return std::unexpected(make_error_code(errc::closed));
  handlers_.emplace(id, handler_entry{std::move(handler), true});
  return id;
}

void nats_link::unsubscribe(subscription_id id) {
  const auto it = handlers_.find(id);
  if (it == handlers_.end() || !it->second.active) return;
  if (draining_now_) {
    it->second.active = false;  // its std::function may be running: erased after the drain
    erase_after_drain_.push_back(id);
  } else {
    handlers_.erase(it);
  }
  enqueue_control(op::unsubscribe, id, {}, {});
}

bool nats_link::enqueue_control(op kind, subscription_id id, std::string_view subject, ready_handler ready) {
  bool was_empty = false;
  {
    switchyard::lock_guard lock(queue_mu_);
    if (!queue_open_) return false;
    was_empty = queue_count_ == 0;
    if (queue_count_ == queue_.size()) queue_.emplace_back();
    out_slot& s = queue_[queue_count_++];
    s.kind = kind;
    s.id = id;
    s.subject.assign(subject);
    s.reply.clear();
    s.payload.clear();
    s.ready = std::move(ready);
  }
  if (was_empty) queue_cv_.notify_one();
  return true;
}

std::expected<void, std::error_code> nats_link::publish(std::string_view subject, std::span<const std::byte> payload,
                                                        std::string_view reply) {
  if (subject.empty() || !valid_token(subject) || !valid_token(reply))
    return std::unexpected(make_error_code(errc::invalid_argument));
  const std::int64_t max_payload = max_payload_.load(std::memory_order_relaxed);
  if (max_payload > 0 && payload.size() > static_cast<std::uint64_t>(max_payload))
    return std::unexpected(make_error_code(errc::payload_too_large));
  const std::size_t size = subject.size() + reply.size() + payload.size();
  bool was_empty = false;
  {
    switchyard::lock_guard lock(queue_mu_);
    if (!queue_open_ || state() == link_state::closed) return std::unexpected(make_error_code(errc::closed));
    if (queue_publishes_ >= options_.queue_max_messages || queue_bytes_ + size > options_.queue_max_bytes) {
      dropped_out_.fetch_add(1, std::memory_order_relaxed);
      return std::unexpected(make_error_code(errc::queue_full));
    }
    was_empty = queue_count_ == 0;
    if (queue_count_ == queue_.size()) queue_.emplace_back();
    out_slot& s = queue_[queue_count_++];
    s.kind = op::publish;
    s.subject.assign(subject);
    s.reply.assign(reply);
    s.payload.assign(payload.begin(), payload.end());
    ++queue_publishes_;
    queue_bytes_ += size;
    pending_bytes_.fetch_add(size, std::memory_order_relaxed);
  }
  if (was_empty) queue_cv_.notify_one();
  return {};
}

void nats_link::sender_main() {
  for (;;) {
    std::size_t n = 0;
    {
      switchyard::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock.native(), [&]() SWITCHYARD_REQUIRES(queue_mu_) { return queue_count_ > 0 || sender_stop_; });
      if (queue_count_ == 0) return;  // stopping, nothing left
      queue_.swap(sending_);          // both keep their slots and buffers
      n = queue_count_;
      queue_count_ = 0;
      queue_publishes_ = 0;
      queue_bytes_ = 0;
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      out_slot& s = sending_[i];
      send_one(s);
      if (s.kind == op::publish)
        pending_bytes_.fetch_sub(s.subject.size() + s.reply.size() + s.payload.size(), std::memory_order_relaxed);
      trim(s.subject, kept, options_.queue_max_bytes);
      trim(s.reply, kept, options_.queue_max_bytes);
      trim(s.payload, kept, options_.queue_max_bytes);
      s.ready = nullptr;
    }
  }
}

void nats_link::send_one(out_slot& s) {
  switch (s.kind) {
    case op::publish: {
      const int len = static_cast<int>(s.payload.size());
      const natsStatus st = s.reply.empty() ? natsConnection_Publish(conn_, s.subject.c_str(), s.payload.data(), len)
                                            : natsConnection_PublishRequest(conn_, s.subject.c_str(), s.reply.c_str(),
                                                                            s.payload.data(), len);
      if (st == NATS_OK) {
        messages_out_.fetch_add(1, std::memory_order_relaxed);
        bytes_out_.fetch_add(s.payload.size(), std::memory_order_relaxed);
      } else {
        send_failures_.fetch_add(1, std::memory_order_relaxed);
      }
      return;
    }
    case op::subscribe: {
      auto* r = new sub_record;
      r->id = s.id;
      {
        switchyard::lock_guard lock(r->mu);
        r->link = this;
      }
      natsStatus st = natsConnection_Subscribe(&r->sub, conn_, s.subject.c_str(), &nats_callbacks::on_message, r);
      if (st != NATS_OK) {
        delete r;  // no subscription: no callback can hold it
      } else {
        (void)natsSubscription_SetPendingLimits(
            r->sub, clamp_int(std::max(options_.mailbox_max_messages, nats_link::cnats_pending_floor_messages)),
            clamp_int(std::max(options_.mailbox_max_bytes, nats_link::cnats_pending_floor_bytes)));
        // Fails only when cnats closed the subscription already (the
        // connection gave up in between): then the record is never
        // completed and detach() leaves it allocated (a few bytes).
        (void)natsSubscription_SetOnCompleteCB(r->sub, &nats_callbacks::on_sub_complete, r);
        {
          switchyard::lock_guard lock(records_mu_);
          records_.emplace(s.id, r);
        }
        if (s.ready) st = natsConnection_FlushTimeout(conn_, options_.connect_timeout.count());
      }
      if (s.ready) {
        asio::post(loop_, [alive = std::weak_ptr<int>(alive_), ready = std::move(s.ready), ec = to_error_code(st)] {
          if (!alive.expired()) ready(ec);
        });
      }
      return;
    }
    case op::unsubscribe: {
      sub_record* r = nullptr;
      {
        switchyard::lock_guard lock(records_mu_);
        const auto it = records_.find(s.id);
        if (it == records_.end()) return;
        r = it->second;
        records_.erase(it);
        cnats_dropped_.fetch_add(cnats_dropped(r->sub), std::memory_order_relaxed);
      }
      (void)natsSubscription_Unsubscribe(r->sub);
      natsSubscription_Destroy(r->sub);
      detach(r);
      return;
    }
  }
}

void nats_link::detach(sub_record* r) {
  bool completed = false;
  {
    switchyard::lock_guard lock(r->mu);  // waits for a message callback in progress
    r->link = nullptr;
    completed = r->completed;
  }
  if (completed) delete r;  // else the completion callback deletes it
}

void nats_link::enqueue_in(subscription_id id, natsMsg* msg) {
  const char* subject = natsMsg_GetSubject(msg);
  const char* reply = natsMsg_GetReply(msg);
  const char* data = natsMsg_GetData(msg);
  const std::string_view subject_view = subject != nullptr ? subject : "";
  const std::string_view reply_view = reply != nullptr ? reply : "";
  const auto len = static_cast<std::size_t>(std::max(natsMsg_GetDataLength(msg), 0));
  const std::size_t size = subject_view.size() + reply_view.size() + len;
  bool was_empty = false;
  {
    switchyard::lock_guard lock(mailbox_mu_);
    if (mailbox_count_ >= options_.mailbox_max_messages || mailbox_bytes_ + size > options_.mailbox_max_bytes) {
      dropped_in_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    was_empty = mailbox_count_ == 0;
    if (mailbox_count_ == mailbox_.size()) mailbox_.emplace_back();
    in_slot& s = mailbox_[mailbox_count_++];
    s.id = id;
    s.subject.assign(subject_view);
    s.reply.assign(reply_view);
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    s.payload.assign(bytes, bytes + len);
    mailbox_bytes_ += size;
  }
  messages_in_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(len, std::memory_order_relaxed);
  if (was_empty) {
    asio::post(loop_, [this, alive = std::weak_ptr<int>(alive_)] {
      if (!alive.expired()) drain();
    });
  }
}

void nats_link::drain() {
  std::size_t n = 0;
  {
    switchyard::lock_guard lock(mailbox_mu_);
    mailbox_.swap(draining_);  // both keep their slots and buffers
    n = mailbox_count_;
    mailbox_count_ = 0;
    mailbox_bytes_ = 0;
  }
  draining_now_ = true;
  for (std::size_t i = 0; i < n && !stopped_; ++i) {
    const in_slot& s = draining_[i];
    const auto it = handlers_.find(s.id);
    if (it == handlers_.end() || !it->second.active) continue;  // unsubscribed meanwhile
    it->second.fn(inbound_message{s.subject, s.reply, s.payload});
  }
  draining_now_ = false;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    in_slot& s = draining_[i];
    trim(s.subject, kept, options_.mailbox_max_bytes);
    trim(s.reply, kept, options_.mailbox_max_bytes);
    trim(s.payload, kept, options_.mailbox_max_bytes);
  }
  if (stopped_) {
    handlers_.clear();
  } else {
    for (const subscription_id id : erase_after_drain_) handlers_.erase(id);
  }
  erase_after_drain_.clear();
}

link_stats nats_link::stats() const {
  link_stats st;
  st.state = state();
  {
    switchyard::lock_guard lock(info_mu_);
    st.server_url = server_url_;
  }
  st.max_payload = max_payload();
  st.messages_in = messages_in_.load(std::memory_order_relaxed);
  st.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  st.messages_out = messages_out_.load(std::memory_order_relaxed);
  st.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  st.dropped_in = dropped_in_.load(std::memory_order_relaxed);
  {
    switchyard::lock_guard lock(records_mu_);
    st.dropped_in += cnats_dropped_.load(std::memory_order_relaxed);
    for (const auto& [id, r] : records_) st.dropped_in += cnats_dropped(r->sub);
  }
  st.dropped_out = dropped_out_.load(std::memory_order_relaxed);
  st.send_failures = send_failures_.load(std::memory_order_relaxed);
  st.reconnects = reconnects_.load(std::memory_order_relaxed);
  st.slow_consumer_events = slow_consumer_events_.load(std::memory_order_relaxed);
  return st;
}

void nats_link::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& [id, entry] : handlers_) entry.active = false;
  if (!draining_now_) handlers_.clear();  // else drain() clears them once the running handler returns
  if (conn_ == nullptr) {                 // never started, or start() failed
    state_.store(link_state::closed, std::memory_order_release);
    return;
  }
  // 1. No more publishes; the sender thread sends what is queued, exits.
  {
    switchyard::lock_guard lock(queue_mu_);
    queue_open_ = false;
    sender_stop_ = true;
  }
  queue_cv_.notify_one();
  if (sender_.joinable()) sender_.join();
  // 2. Closed from here on: the disconnected callback that Close() posts
  // is not reported as reconnecting.
  set_state(link_state::closed);
  // 3. Close: cnats flushes (connected: up to 500 ms), closes every
  // subscription (their delivery threads finish the callback in progress,
  // then complete) and joins its reader and reconnect threads.
  {
    switchyard::lock_guard lock(records_mu_);
    for (auto& [id, r] : records_) cnats_dropped_.fetch_add(cnats_dropped(r->sub), std::memory_order_relaxed);
  }
  natsConnection_Close(conn_);
  {
    switchyard::lock_guard lock(records_mu_);
    for (auto& [id, r] : records_) {
      natsSubscription_Destroy(r->sub);
      detach(r);  // after it, no message callback reaches this link
    }
    records_.clear();
  }
  // 4. cnats's last callback for this connection is the closed one.
  {
    switchyard::unique_lock lock(closed_mu_);
    closed_cv_.wait(lock.native(), [&]() SWITCHYARD_REQUIRES(closed_mu_) { return closed_seen_; });
  }
  natsConnection_Destroy(conn_);
  conn_ = nullptr;
  {
    switchyard::lock_guard lock(mailbox_mu_);
    mailbox_count_ = 0;  // undelivered messages are discarded
    mailbox_bytes_ = 0;
  }
}

}  // namespace switchyard::cluster

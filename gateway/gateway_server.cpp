#include "gateway/gateway_server.hpp"

#include "gateway/gateway_settings.hpp"

#include "protocol/channel_name.hpp"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <future>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <unistd.h>

namespace switchyard::edge {

namespace {

using namespace std::chrono_literals;
using asio::use_awaitable;

constexpr std::size_t max_resume_jobs = 10'000;  // resumes waiting for the reader; past it: unavailable

std::shared_ptr<spdlog::logger> logger() {
  static const auto l = [] {
    if (auto existing = spdlog::get("gateway")) return existing;
    auto made = spdlog::default_logger()->clone("gateway");
    spdlog::register_logger(made);
    return made;
  }();
  return l;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string(what) + ": cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

token_keys keys_of(const gateway_config& c) {
  token_keys k;
  if (!c.jwt_secret_file.empty()) k.hmac_secret = trimmed(read_file(c.jwt_secret_file, "jwt-secret-file"));
  if (!c.jwt_public_key.empty()) k.public_key_pem = read_file(c.jwt_public_key, "jwt-public-key");
  if (k.hmac_secret.empty() && k.public_key_pem.empty())
    throw std::runtime_error("no token key: give --jwt-secret-file or --jwt-public-key");
  k.issuer = c.jwt_issuer;
  k.audience = c.jwt_audience;
  k.leeway = c.jwt_leeway;
  return k;
}

// A device may subscribe to `wanted` when a claim names it exactly, or when
// `wanted` is one channel (no wildcard) that a claim's pattern matches.
bool allowed(const std::vector<std::string>& claims, std::string_view wanted) {
  const bool concrete = protocol::is_valid_channel(wanted);
  for (const auto& c : claims)
    if (c == wanted || (concrete && protocol::pattern_matches(c, wanted))) return true;
  return false;
}

}  // namespace

// A user with sockets here: its route's state on the broker and the sockets
// welcomed or waiting for the route.
struct gateway_server::user_entry {
  enum class route { absent, adding, held, removing };
  route state = route::absent;
  std::vector<device_session*> sockets;  // welcomed
  // Hello accepted, route being added: the socket, its welcome, its token's expiry.
  struct waiting_socket {
    std::weak_ptr<device_session> socket;
    std::string welcome;
    std::optional<steady_time> expiry;
  };
  std::vector<waiting_socket> waiting;
};

// A channel some sockets subscribed to: one broker subscription.
struct gateway_server::channel_entry {
  subscription_id id = 0;  // 0 while the broker's answer is awaited
  std::vector<device_session*> members;
  std::vector<std::pair<std::weak_ptr<device_session>, std::uint64_t>> waiting;  // socket, request id
};

gateway_server::gateway_server(gateway_config config, std::function<std::chrono::system_clock::time_point()> wall)
    : config_(std::move(config)),
      wall_clock_(wall ? std::move(wall) : [] { return std::chrono::system_clock::now(); }),
      tokens_(keys_of(config_)),
      acceptor_(io_),
      sweep_timer_(io_),
      drain_timer_(io_),
      jitter_(static_cast<unsigned>(::getpid())) {
  logger()->set_level(spdlog::level::from_str(config_.log_level));
  if (config_.inbox_id.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    config_.inbox_id = std::string("gw-") + host;
  }
  limits_ = {.max_message_bytes = config_.max_message_bytes,
             .max_messages_per_s = config_.max_messages_per_s,
             .message_burst = config_.message_burst,
             .max_pending_bytes = config_.max_pending_bytes,
             .disconnect_slow = config_.slow_consumer == slow_consumer_policy::disconnect};
  // The certificate first: a file that cannot be used fails the start
  // before any broker is contacted.
  if (!config_.tls_cert.empty()) {
    auto loaded = device_tls::load(config_.tls_cert, config_.tls_key);
    if (!loaded) throw std::runtime_error(loaded.error());
    tls_ = std::move(*loaded);
  }
  timing_ = {.hello_timeout = config_.hello_timeout,
             .ping_interval = config_.ping_interval,
             .dead_after = config_.dead_after,
             .close_grace = 2s};

  // The broker: a client with reconnect (it restores the lease, inbox and
  // routes by itself), and the gateway helper on it.
  client_options o;
  o.client_name = "switchyard-gateway " + config_.inbox_id;
  o.addresses = config_.brokers;
  if (!config_.broker_token_file.empty()) o.token = trimmed(read_file(config_.broker_token_file, "broker-token-file"));
  o.tls = {.enabled = config_.broker_tls || !config_.broker_tls_ca.empty(),
           .ca_file = config_.broker_tls_ca,
           .cert_file = config_.broker_tls_cert,
           .key_file = config_.broker_tls_key,
           .server_name = config_.broker_tls_server_name};
  // Routes restored after a lost broker connection (or a lost lease): what
  // was stored meanwhile for a connected user reached no gateway; every
  // device's streams are read back from where it stands.
  o.on_reconnect = [this](const reconnect_info&) { asio::post(io_, [this] { resume_all(); }); };
  // The I/O thread never waits for room in the broker connection's send
  // buffer: with max_pending_bytes (8 MiB) unsent, an ack or a subscribe
  // fails at once (buffer_full) instead of stalling every socket (an
  // unsubscribe never waits: it goes past the limit).
  o.wait_for_space = false;
  o.on_withdrawn = [this](const withdrawn_notice& n) { asio::post(io_, [this, n] { withdrawn(n); }); };
  auto conn = client::connect(std::move(o));
  if (!conn)
    throw std::runtime_error("cannot reach the broker (" + (config_.brokers.empty() ? "" : config_.brokers.front()) +
                             "): " + conn.error().message());
  broker_ = std::move(*conn);
  switchyard::gateway_options g{
      .inbox_id = config_.inbox_id,
      .lease_ttl = config_.lease_ttl,
      .on_message =
          [this](const inbox_message& m) {
            // On the client's loop thread: encode once, hand over.
            delivery_fields d{.payload = m.payload,
                              .stream = m.stream,
                              .seq = m.seq,
                              .epoch = m.epoch,
                              .replayed = m.replayed,
                              .ttl_ms = static_cast<std::uint64_t>(m.time_left.count())};
            inbound in{.keys = {m.route_keys.begin(), m.route_keys.end()},
                       .plain = std::make_shared<const std::string>(delivery_text(d)),
                       .offer_id = m.offer_id,
                       .stream = std::string(m.stream),
                       .seq = m.seq,
                       .epoch = m.epoch};
            if (m.offer_id) {
              d.offer = m.offer_id;
              in.offer = std::make_shared<const std::string>(delivery_text(d));
            }
            asio::post(io_, [this, in = std::move(in)] { deliver(in); });
          },
      .on_lease_renewed = [this](lease_id, lease_id) { asio::post(io_, [this] { resume_all(); }); },
      .on_error = [](std::error_code ec) { logger()->warn("broker: {}", ec.message()); }};
  if (!config_.plain_inbox) g.durable = durable_options{};
  auto helper = switchyard::gateway::start(*broker_, g);
  // The inbox still held by the lease of a run that died (kill -9): it
  // goes with that lease's TTL.
  const auto give_up = std::chrono::steady_clock::now() + config_.lease_ttl + 2s;
  if (!helper && helper.error() == errc::inbox_taken)
    logger()->warn("inbox {} is held by a live lease (an earlier run that died?): waiting up to {} ms for it to expire",
                   config_.inbox_id, (config_.lease_ttl + 2s).count());
  while (!helper && helper.error() == errc::inbox_taken && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(200ms);
    helper = switchyard::gateway::start(*broker_, g);
  }
  if (!helper && helper.error() == errc::not_supported && g.durable) {
    logger()->warn(
        "the broker has no sequence log: a plain inbox (durable sends are not recovered after a lost "
        "broker connection, and devices cannot resume)");
    g.durable.reset();
    helper = switchyard::gateway::start(*broker_, g);
  }
  if (!helper) throw std::runtime_error("cannot start the gateway on the broker: " + helper.error().message());
  helper_ = std::move(*helper);
  resumes_ = std::make_unique<resume_reader>(*broker_, max_resume_jobs, config_.resume_max_scan);

  const asio::ip::tcp::endpoint at(asio::ip::make_address(config_.listen_host), config_.listen_port);
  acceptor_.open(at.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  asio_error_code ec;
  acceptor_.bind(at, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + config_.listen_host + ":" + std::to_string(config_.listen_port) +
                             ": " + ec.message());
  acceptor_.listen(asio::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
  if (!config_.port_file.empty()) {
    std::ofstream out(config_.port_file, std::ios::trunc);
    out << port_ << "\n";
    if (!out) throw std::runtime_error("cannot write port-file " + config_.port_file);
  }
  if (!config_.http_host.empty()) {
    http_ = std::make_unique<http::http_endpoint>(
        io_, [this](std::string_view target) { return gateway_status_answer(target, gather(), health()); }, logger(),
        "switchyard-gateway", "monitoring (--http)");
    http_->start(config_.http_host, config_.http_port);
    logger()->info("monitoring on {}:{}", config_.http_host, http_->port());
  }
  logger()->info("listening on {}:{} ({} at /ws{}), inbox {}, lease {}", config_.listen_host, port_,
                 tls_ ? "wss://" : "ws://", tls_ ? ", certificate " + tls_->subject() : "", config_.inbox_id,
                 helper_->lease());
}

gateway_server::~gateway_server() {
  resumes_.reset();  // before the client it reads with
  helper_.reset();   // revokes the lease: the routes go at once
  broker_.reset();
  sessions_.clear();
}

void gateway_server::run() {
  asio::co_spawn(io_, accept_loop(), asio::detached);
  sweep();
  io_.run();
}

void gateway_server::stop() {
  asio::post(io_, [this] {
    stopping_ = true;
    asio_error_code ignored;
    acceptor_.close(ignored);
    if (http_) http_->stop();
    for (auto& [id, s] : sessions_) s->close(device_errc::going_away, "shutting down");
    if (sessions_.empty()) io_.stop();
  });
}

void gateway_server::drain() {
  asio::post(io_, [this] {
    if (draining_ || stopping_) return;
    draining_ = true;
    drain_started_ = std::chrono::steady_clock::now();
    drain_total_ = sessions_.size();
    drain_closed_ = 0;
    logger()->info("draining {} sockets over {} ms", drain_total_, config_.drain_window.count());
    drain_step();
  });
}

void gateway_server::drain_step() {
  // Due by now: the share of the window passed (all of them at its end).
  const auto passed = std::chrono::steady_clock::now() - drain_started_;
  const double share = config_.drain_window.count() <= 0
                           ? 1.0
                           : std::min(1.0, std::chrono::duration<double>(passed).count() * 1000.0 /
                                               static_cast<double>(config_.drain_window.count()));
  const auto due = static_cast<std::size_t>(std::ceil(share * static_cast<double>(drain_total_)));
  for (auto it = sessions_.begin(); it != sessions_.end() && drain_closed_ < due; ++it) {
    if (it->second->closing()) continue;
    const auto hint = std::uniform_int_distribution<std::int64_t>(
        0, std::max<std::int64_t>(0, config_.drain_jitter.count()))(jitter_);
    it->second->close(device_errc::going_away, "retry_after_ms=" + std::to_string(hint));
    ++drain_closed_;
  }
  if (share >= 1.0 || drain_closed_ >= drain_total_) {
    // All closed (or the window is over): the stragglers now, then the
    // loop ends with the last socket.
    for (auto& [id, s] : sessions_) s->close(device_errc::going_away, "retry_after_ms=0");
    stopping_ = true;
    if (sessions_.empty()) io_.stop();
    return;
  }
  drain_timer_.expires_after(std::max<std::chrono::milliseconds>(config_.drain_window / 100, 10ms));
  drain_timer_.async_wait([this](asio_error_code ec) {
    if (!ec) drain_step();
  });
}

void gateway_server::reload(const gateway_config& given) {
  asio::post(io_, [this, fresh = given]() mutable {
    // The certificate files are read again even when their names did not
    // change (a renewed certificate is written over the old one). TLS on
    // or off takes a restart: the listening port's scheme stays.
    if (fresh.tls_cert.empty() != config_.tls_cert.empty()) {
      logger()->warn("reload: TLS on or off takes effect only at a restart");
      fresh.tls_cert = config_.tls_cert;
      fresh.tls_key = config_.tls_key;
    } else if (tls_) {
      if (auto loaded = device_tls::load(fresh.tls_cert, fresh.tls_key)) {
        tls_ = std::move(*loaded);
        logger()->info("reload: TLS certificate read from {} ({}); new sockets use it", fresh.tls_cert,
                       tls_->subject());
      } else {
        logger()->error("reload: TLS certificate not reloaded, new sockets keep the old one: {}", loaded.error());
        fresh.tls_cert = config_.tls_cert;
        fresh.tls_key = config_.tls_key;
      }
    }
    std::string restart;
    for (const auto& row : gateway_settings()) {
      if (row.show(fresh) == row.show(config_)) continue;
      if (row.effect == settings::takes_effect::at_reload)
        row.assign(config_, fresh);
      else
        restart += (restart.empty() ? "" : ", ") + std::string(row.name);
    }
    logger()->set_level(spdlog::level::from_str(config_.log_level));
    if (!restart.empty()) logger()->warn("reload: {} take effect only at a restart", restart);
    // The ramp now, for the sockets open as well: a rollback is one signal.
    std::size_t changed = 0;
    for (auto& [id, s] : sessions_) {
      if (!s->welcomed()) continue;
      const bool on = !s->caps.empty() && flag_on("offers", s->user());
      changed += on != s->offers_on;
      s->offers_on = on;
    }
    logger()->info("reloaded: offers switched for {} open sockets", changed);
  });
}

gateway_counters gateway_server::gather() const {
  auto c = counters_;
  c.sockets = sessions_.size();
  for (const auto& [id, s] : sessions_) c.pending_bytes += s->pending_bytes();
  c.users = static_cast<std::uint64_t>(std::count_if(
      users_.begin(), users_.end(), [](const auto& u) { return u.second.state == user_entry::route::held; }));
  return c;
}

gateway_health gateway_server::health() const {
  return {
      .broker_connected = broker_->connected(),
      .draining = draining_ || stopping_,
      .inbox = config_.inbox_id,
      .uptime_ms = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count())};
}

gateway_counters gateway_server::counters() {
  // Shared: a gather that comes after the wait gave up writes to it safely.
  auto p = std::make_shared<std::promise<gateway_counters>>();
  auto f = p->get_future();
  asio::post(io_, [this, p] { p->set_value(gather()); });
  if (f.wait_for(10s) != std::future_status::ready) return {};
  return f.get();
}

asio::awaitable<void> gateway_server::accept_loop() {
  for (;;) {
    asio_error_code ec;
    auto socket = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      // Out of descriptors, mostly: wait a little rather than spin.
      logger()->warn("accept: {}", ec.message());
      asio::steady_timer pause(io_, 100ms);
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    // Sockets not upgraded yet are answered 503 at their upgrade past
    // --max-sockets; far past it they are not even read.
    if (sessions_.size() >= std::size_t{config_.max_sockets} + config_.max_sockets / 10 + 100) {
      ++counters_.refused;
      socket.close(ec);
      continue;
    }
    socket.set_option(asio::ip::tcp::no_delay(true), ec);
    ++counters_.accepted;
    const auto id = next_session_++;
    auto s = std::make_shared<device_session>(std::move(socket), tls_, static_cast<session_host&>(*this), limits_, id,
                                              std::chrono::steady_clock::now());
    sessions_.emplace(id, s);
    s->start();
  }
}

void gateway_server::sweep() {
  const auto now = std::chrono::steady_clock::now();
  // Actions first, then apply: a close may end a session.
  std::vector<std::pair<std::shared_ptr<device_session>, liveness_action>> todo;
  for (auto& [id, s] : sessions_)
    if (const auto a = due(s->timers(), timing_, now); a != liveness_action::none) todo.emplace_back(s, a);
  for (auto& [s, a] : todo) {
    switch (a) {
      case liveness_action::ping:
        s->ping(now);
        break;
      case liveness_action::hello_timeout:
        s->close(device_errc::hello_timeout);
        break;
      case liveness_action::dead:
        s->close(device_errc::heartbeat_timeout);
        break;
      case liveness_action::token_expired:
        s->close(device_errc::token_expired);
        break;
      case liveness_action::abort:
        s->abort();
        break;
      case liveness_action::none:
        break;
    }
  }
  const auto shortest = std::min({timing_.hello_timeout, timing_.ping_interval, timing_.dead_after});
  sweep_timer_.expires_after(std::clamp<std::chrono::milliseconds>(shortest / 4, 10ms, 1s));
  sweep_timer_.async_wait([this](asio_error_code ec) {
    if (!ec) sweep();
  });
}

// ---------------------------------------------------------------- session_host

bool gateway_server::admit() {
  if (draining_ || stopping_ || sessions_.size() > config_.max_sockets) {
    ++counters_.refused;
    return false;
  }
  return true;
}

void gateway_server::hello(device_session& s, hello_message m) {
  auto claims = tokens_.verify(m.token, wall_clock_());
  if (!claims) {
    ++counters_.unauthorized;
    return s.close(static_cast<device_errc>(claims.error().value()));
  }
  std::optional<steady_time> expiry;
  if (claims->exp) {
    // exp is a wall-clock time: the time left now, on the monotonic clock.
    // Clamped to a year ahead: an exp centuries away must not overflow the
    // clock (the socket is closed then anyway, for a new token).
    const auto wall = wall_clock_().time_since_epoch();
    const std::int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(wall).count();
    const std::int64_t exp_s = std::min<std::int64_t>(*claims->exp, now_s + 365LL * 24 * 3600);
    const auto left = std::chrono::seconds(exp_s) + config_.jwt_leeway - wall;
    expiry = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
  }
  for (const auto& c : m.caps)
    if (c == "offers") s.caps.push_back(c);
  s.offers_on = !s.caps.empty() && flag_on("offers", claims->user);
  s.channels_allowed = std::move(claims->channels);
  s.resume_request = std::move(m.resume);
  const std::pair<std::string, bool> flags[] = {{"offers", s.offers_on}};
  const std::string session = config_.inbox_id + "-" + std::to_string(s.id());
  std::string frame = welcome_text({.user = claims->user,
                                    .session = session,
                                    .ping_ms = static_cast<std::uint64_t>(config_.ping_interval.count()),
                                    .dead_ms = static_cast<std::uint64_t>(config_.dead_after.count()),
                                    .caps = s.caps,
                                    .flags = flags});
  if (!m.app.empty()) logger()->debug("session {}: user {} app {}", session, claims->user, m.app);
  auto& u = users_[claims->user];
  if (u.state == user_entry::route::held) {
    u.sockets.push_back(&s);
    ++counters_.welcomed;
    s.welcome(claims->user, std::move(frame), expiry);
    return start_resume(s);
  }
  u.waiting.push_back({sessions_.at(s.id()), std::move(frame), expiry});
  reconcile_route(claims->user);
}

void gateway_server::reconcile_route(const std::string& user) {
  auto it = users_.find(user);
  if (it == users_.end()) return;
  auto& u = it->second;
  const bool wanted = !u.sockets.empty() || !u.waiting.empty();
  const std::string key = config_.route_prefix + user;
  if (wanted && u.state == user_entry::route::absent) {
    u.state = user_entry::route::adding;
    helper_->async_add_route(key, [this, user](std::error_code ec) {
      asio::post(io_, [this, user, ec] { route_changed(user, true, ec); });
    });
  } else if (!wanted && u.state == user_entry::route::held && !draining_ && !stopping_) {
    // (Draining or stopping: the lease's revoke at exit removes what is
    // still this gateway's; a removal queued behind thousands would only
    // race the user's put on the gateway it moved to.)
    u.state = user_entry::route::removing;
    helper_->async_remove_route(key, [this, user](std::error_code ec) {
      asio::post(io_, [this, user, ec] { route_changed(user, false, ec); });
    });
  } else if (!wanted && u.state == user_entry::route::absent) {
    users_.erase(it);
  }
}

void gateway_server::route_changed(const std::string& user, bool added, std::error_code ec) {
  auto it = users_.find(user);
  if (it == users_.end()) return;
  auto& u = it->second;
  if (added) {
    u.state = ec ? user_entry::route::absent : user_entry::route::held;
    auto waiting = std::move(u.waiting);
    u.waiting.clear();
    for (auto& w : waiting) {
      const auto s = w.socket.lock();
      if (!s || !s->active()) continue;
      if (ec) {
        logger()->warn("route for {}: {}", user, ec.message());
        s->close(device_errc::unavailable, ec.message());
        continue;
      }
      u.sockets.push_back(s.get());
      ++counters_.welcomed;
      s->welcome(user, std::move(w.welcome), w.expiry);
      start_resume(*s);
    }
  } else {
    // Removed (or already gone: not_found counts as removed).
    u.state = user_entry::route::absent;
    if (ec && ec != errc::not_found) logger()->warn("removing the route of {}: {}", user, ec.message());
  }
  reconcile_route(user);
}

void gateway_server::subscribe(device_session& s, const subscribe_message& m) {
  if (!protocol::is_valid_pattern(m.channel))
    return s.send(error_text(m.id, device_errc::bad_message, "not a valid channel or pattern"));
  if (!allowed(s.channels_allowed, m.channel))
    return s.send(error_text(m.id, device_errc::forbidden, "the token does not allow this channel"));
  if (std::find(s.subscriptions.begin(), s.subscriptions.end(), m.channel) != s.subscriptions.end())
    return s.send(ok_text(m.id));
  if (s.subscriptions.size() >= config_.max_subscriptions)
    return s.send(error_text(m.id, device_errc::bad_message, "too many subscriptions on this socket"));
  s.subscriptions.push_back(m.channel);
  auto [it, fresh] = channels_.try_emplace(m.channel);
  auto& c = it->second;
  if (!fresh && c.id != 0) {
    c.members.push_back(&s);
    return s.send(ok_text(m.id));
  }
  c.waiting.emplace_back(sessions_.at(s.id()), m.id);
  if (!fresh) return;  // the broker's answer is awaited already
  broker_->async_subscribe(
      m.channel,
      [this, channel = m.channel](const message& msg) {
        auto frame = std::make_shared<const std::string>(publication_text(msg.channel, msg.payload));
        asio::post(io_, [this, channel, frame = std::move(frame)] {
          const auto it = channels_.find(channel);
          if (it == channels_.end()) return;
          for (auto* member : it->second.members) {
            member->send(frame);
            ++counters_.delivered;
          }
        });
      },
      [this, channel = m.channel](std::expected<subscription_id, std::error_code> r) {
        asio::post(io_, [this, channel, r] { channel_ready(channel, r); });
      });
}

void gateway_server::channel_ready(const std::string& channel, std::expected<subscription_id, std::error_code> r) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) {
    if (r) (void)broker_->unsubscribe(*r);
    return;
  }
  auto& c = it->second;
  auto waiting = std::move(c.waiting);
  c.waiting.clear();
  for (auto& [weak, request] : waiting) {
    const auto s = weak.lock();
    if (!s || !s->active()) continue;
    if (!r) {
      std::erase(s->subscriptions, channel);
      s->send(error_text(request, device_errc::unavailable, r.error().message()));
      continue;
    }
    c.members.push_back(s.get());
    s->send(ok_text(request));
  }
  if (r) c.id = *r;
  if (c.members.empty()) {
    if (r) (void)broker_->unsubscribe(*r);
    channels_.erase(it);
  }
}

void gateway_server::unsubscribe(device_session& s, const unsubscribe_message& m) {
  if (std::find(s.subscriptions.begin(), s.subscriptions.end(), m.channel) == s.subscriptions.end())
    return s.send(error_text(m.id, device_errc::not_found, "not subscribed"));
  std::erase(s.subscriptions, m.channel);
  leave_channel(s, m.channel);
  s.send(ok_text(m.id));
}

void gateway_server::leave_channel(device_session& s, const std::string& channel) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  auto& c = it->second;
  std::erase(c.members, &s);
  std::erase_if(c.waiting, [&s](const auto& w) {
    const auto p = w.first.lock();
    return !p || p.get() == &s;
  });
  if (c.members.empty() && c.waiting.empty() && c.id != 0) {
    (void)broker_->unsubscribe(c.id);
    channels_.erase(it);
  }
}

void gateway_server::ack(device_session& s, const ack_message& m) {
  const auto held = std::find(s.offers_held.begin(), s.offers_held.end(), m.offer);
  if (held == s.offers_held.end()) return s.send(error_text(0, device_errc::not_found, "no such offer here"));
  s.offers_held.erase(held);
  if (const auto ec = broker_->ack(m.offer, config_.route_prefix + s.user()))
    logger()->warn("ack of offer {} for {}: {}", m.offer, s.user(), ec.message());
  else
    ++counters_.offers_acked;
}

void gateway_server::closed(device_session& s) {
  ++counters_.closed;
  counters_.tls_failed += s.tls_failed();
  counters_.dropped += s.dropped();
  if (const auto why = s.closed_for()) ++counters_.closes[static_cast<std::size_t>(*why)];
  for (const auto& channel : s.subscriptions) leave_channel(s, channel);
  if (s.welcomed()) {
    if (auto it = users_.find(s.user()); it != users_.end()) {
      std::erase(it->second.sockets, &s);
      reconcile_route(s.user());
    }
  }
  sessions_.erase(s.id());  // last: `s` may go with it
  if (stopping_ && sessions_.empty()) io_.stop();
}

// ---------------------------------------------------------------- deliveries

void gateway_server::deliver(const inbound& in) {
  for (const auto& key : in.keys) {
    const auto it = users_.find(user_of(key));
    if (it == users_.end()) continue;
    for (auto* s : it->second.sockets) {
      if (!in.stream.empty()) {
        // Held while the stream is read back for this device.
        if (const auto r = s->resuming.find(in.stream); r != s->resuming.end()) {
          if (s->hold(in.plain->size())) r->second.emplace_back(in.seq, in.plain);
          continue;
        }
        if (!s->first_time(in.stream, in.epoch, in.seq)) continue;  // a resume gave it already
      }
      const bool durable = !in.stream.empty();
      if (in.offer && s->offers_on) {
        s->send(in.offer, durable);
        s->offers_held.push_back(in.offer_id);
        if (s->offers_held.size() > config_.max_offers_held) s->offers_held.erase(s->offers_held.begin());
      } else {
        s->send(in.plain, durable);
      }
      ++counters_.delivered;
    }
  }
}

void gateway_server::start_resume(device_session& s) {
  auto points = std::move(s.resume_request);
  s.resume_request.clear();
  for (auto& [stream, from] : points) {
    s.resuming[stream];                                               // live frames of this stream wait from now on
    if (from.seq != 0) s.last_sent[stream] = {from.epoch, from.seq};  // the device has these
    if (!submit_resume(s, stream, from)) return s.close(device_errc::unavailable, "too many resumes under way");
  }
}

bool gateway_server::submit_resume(device_session& s, const std::string& stream, resume_point from) {
  const std::weak_ptr<device_session> weak = sessions_.at(s.id());
  return resumes_->submit(
      {.stream = stream,
       .from = from,
       .route_key = config_.route_prefix + s.user(),
       .done =
           [this, weak](resume_result r) {
             asio::post(io_, [this, weak, r = std::move(r)]() mutable { resume_done(weak, std::move(r)); });
           },
       // A socket gone meanwhile: its job is dropped.
       .wanted = [weak] { return !weak.expired(); },
       .max_bytes = config_.max_pending_bytes / 4});
}

void gateway_server::resume_all() {
  std::size_t jobs = 0;
  for (auto& [id, s] : sessions_) {
    if (!s->welcomed() || !s->active()) continue;
    for (const auto& [stream, at] : s->last_sent)
      if (!s->resuming.contains(stream)) s->resume_request[stream] = {.seq = at.second, .epoch = at.first};
    jobs += s->resume_request.size();
    start_resume(*s);
  }
  if (jobs) logger()->info("routes restored on the broker: reading back {} device streams", jobs);
}

void gateway_server::resume_done(const std::weak_ptr<device_session>& weak, resume_result r) {
  const auto s = weak.lock();
  if (!s || !s->active()) return;
  if (r.error) return s->close(device_errc::unavailable, "resume: " + r.error.message());
  static constexpr std::string_view reasons[] = {"", "trimmed", "epoch_changed", "stream_gone", "limit", "damaged"};
  if (r.gap != resume_gap::none)
    s->send(trimmed_text(r.stream, reasons[static_cast<std::size_t>(r.gap)], r.first_seq, r.epoch));
  std::uint64_t last = 0;
  for (auto& [seq, frame] : r.frames) {
    last = std::max(last, seq);
    if (!s->first_time(r.stream, r.epoch, seq)) continue;
    s->send(std::move(frame), /*must_arrive=*/true);
    ++counters_.replayed;
  }
  if (!s->active()) return;
  if (r.more) {
    // More to read: on from the last record gathered (the live frames
    // still held), once the socket's queue is down to a quarter, so that
    // the next part fits beside it.
    s->when_drained_to(config_.max_pending_bytes / 4, [this, weak, stream = r.stream, last, epoch = r.epoch] {
      const auto s = weak.lock();
      if (s && s->active() && !submit_resume(*s, stream, {.seq = last, .epoch = epoch}))
        s->close(device_errc::unavailable, "too many resumes under way");
    });
    return;
  }
  // What came live meanwhile: what the read did not cover, in order.
  const auto held = s->resuming.find(r.stream);
  if (held == s->resuming.end()) return;
  auto frames = std::move(held->second);
  s->resuming.erase(held);
  const std::uint64_t covered = r.gap == resume_gap::limit ? 0 : std::max(last + 1, r.read_to);
  for (auto& [seq, frame] : frames) {
    s->release_held(frame->size());
    if (seq < covered || !s->first_time(r.stream, r.epoch, seq)) continue;
    s->send(std::move(frame), /*must_arrive=*/true);
    ++counters_.delivered;
  }
}

void gateway_server::withdrawn(const withdrawn_notice& n) {
  const auto frame = std::make_shared<const std::string>(withdrawn_text(n.offer_id));
  for (const auto& key : n.route_keys) {
    const auto it = users_.find(user_of(key));
    if (it == users_.end()) continue;
    for (auto* s : it->second.sockets) {
      const auto held = std::find(s->offers_held.begin(), s->offers_held.end(), n.offer_id);
      if (held == s->offers_held.end()) continue;
      s->offers_held.erase(held);
      s->send(frame);
    }
  }
}

bool gateway_server::flag_on(std::string_view flag, std::string_view user) const {
  for (const auto& [name, percent] : config_.flags) {
    if (name != flag) continue;
    return XXH64(user.data(), user.size(), 0) % 100 < percent;
  }
  return true;  // a flag not configured is on for everyone
}

std::string gateway_server::user_of(std::string_view route_key) const {
  if (route_key.substr(0, config_.route_prefix.size()) != config_.route_prefix) return {};
  return std::string(route_key.substr(config_.route_prefix.size()));
}

}  // namespace switchyard::edge

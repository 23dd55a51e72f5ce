#include "broker/monitor/http_monitor.hpp"

#include "broker/monitor/metrics_exposition.hpp"
#include "broker/config/server_config.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <utility>

namespace switchyard::broker {

namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;

struct http_monitor::client {
  explicit client(asio::ip::tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
};

namespace {

constexpr const char* text_plain = "text/plain; charset=utf-8";
constexpr const char* json_type = "application/json";

http_monitor::response plain(unsigned status, std::string body) {
  return {status, std::string(text_plain), std::move(body)};
}

// A JSON error body: {"error":"..."}.
http_monitor::response json_error(unsigned status, std::string_view message) {
  std::string body = R"({"error":")";
  for (const char c : message) body += (c == '"' || c == '\\') ? '\'' : c;  // our own texts: no controls
  body += "\"}\n";
  return {status, std::string(json_type), std::move(body)};
}

std::optional<std::uint64_t> whole_number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint8_t> sort_of(std::string_view name) {
  static constexpr std::pair<std::string_view, std::uint8_t> orders[]{
      {"id", 0}, {"idle", 1}, {"pending", 2}, {"dropped", 3}, {"subs", 4}, {"bytes-in", 5}, {"bytes-out", 6}};
  for (const auto& [n, v] : orders)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace

http_monitor::http_monitor(asio::io_context& io, sources s, std::shared_ptr<spdlog::logger> logger)
    : io_(io), sources_(std::move(s)), logger_(std::move(logger)), acceptor_(io) {}

http_monitor::~http_monitor() { stop(); }

void http_monitor::start(const std::string& host, std::uint16_t port) {
  const auto address = asio::ip::make_address(listen_address(host));
  const asio::ip::tcp::endpoint endpoint(address, port);
  asio_error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot serve monitoring (--http) on " + host + ":" + std::to_string(port) + ": " +
                             ec.message());
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_loop(), asio::detached);
}

void http_monitor::stop() {
  if (stopped_) return;
  stopped_ = true;
  asio_error_code ignored;
  acceptor_.close(ignored);
  for (auto& w : clients_)
    if (auto c = w.lock()) c->stream.socket().close(ignored);
  clients_.clear();
}

asio::awaitable<void> http_monitor::accept_loop() {
  while (!stopped_) {
    asio_error_code ec;
    auto socket = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
    if (stopped_) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of descriptors and the like: wait a little rather than spin.
      logger_->warn("monitoring port: accept failed: {}", ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    std::erase_if(clients_, [](const std::weak_ptr<client>& w) { return w.expired(); });
    if (clients_.size() >= max_clients) {
      socket.close(ec);  // bounded: the monitoring port never holds more than max_clients
      continue;
    }
    auto c = std::make_shared<client>(std::move(socket));
    clients_.push_back(c);
    asio::co_spawn(io_, serve(std::move(c)), asio::detached);
  }
}

asio::awaitable<void> http_monitor::serve(std::shared_ptr<client> c) {
  beast::flat_buffer buffer(max_header_bytes);
  // A bounded number of requests per connection; then the client reconnects.
  for (int served = 0; served < 10'000 && !stopped_; ++served) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(max_header_bytes);
    parser.body_limit(0);
    c->stream.expires_after(idle_timeout);
    beast::error_code ec;
    co_await http::async_read(c->stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::operation_aborted &&
          ec != asio::error::connection_reset && ec != asio::error::eof && !stopped_) {
        // A malformed request: say so and close.
        http::response<http::string_body> bad{http::status::bad_request, 11};
        bad.set(http::field::content_type, text_plain);
        bad.set(http::field::connection, "close");
        bad.body() = "bad request: " + ec.message() + "\n";
        bad.prepare_payload();
        c->stream.expires_after(std::chrono::seconds(5));
        co_await http::async_write(c->stream, bad, asio::redirect_error(use_awaitable, ec));
      }
      break;
    }
    if (stopped_) break;
    const auto& req = parser.get();
    response r;
    const bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) {
      r = plain(405, "method not allowed: the monitoring port answers GET and HEAD\n");
    } else {
      r = answer(std::string_view(req.target().data(), req.target().size()));
    }
    http::response<http::string_body> res{static_cast<http::status>(r.status), req.version()};
    res.set(http::field::server, "switchyard");
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-store");
    if (r.status == 405) res.set(http::field::allow, "GET, HEAD");
    res.keep_alive(req.keep_alive());
    const auto length = r.body.size();
    if (!head) res.body() = std::move(r.body);
    res.prepare_payload();
    if (head) res.content_length(length);
    c->stream.expires_after(idle_timeout);
    if (head) {
      http::response_serializer<http::string_body> sr{res};
      sr.split(true);
      co_await http::async_write_header(c->stream, sr, asio::redirect_error(use_awaitable, ec));
    } else {
      co_await http::async_write(c->stream, res, asio::redirect_error(use_awaitable, ec));
    }
    if (ec || !res.keep_alive()) break;
  }
  beast::error_code ignored;
  c->stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  c->stream.close();
}

http_monitor::response http_monitor::answer(std::string_view target) {
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  if (path == "/healthz") return plain(200, "ok\n");
  if (path == "/readyz") {
    const auto r = sources_.ready();
    return r.ready ? plain(200, "ready\n") : plain(503, "not ready: " + r.reason + "\n");
  }
  if (path == "/metrics") {
    const auto m = sources_.metrics();
    const auto st = sources_.stats(m);
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            prometheus_text(m, {st.version, st.instance_id, st.uptime_ms})};
  }
  if (path == "/stats") {
    const auto m = sources_.metrics();
    return {200, std::string(json_type), stats_json(sources_.stats(m), m) + "\n"};
  }
  if (path == "/connz") return connz(query);
  if (path == "/" || path == "/index.html") return status_page();
  return plain(404, "not found: try /, /metrics, /healthz, /readyz, /stats or /connz\n");
}

http_monitor::response http_monitor::connz(std::string_view query) {
  std::uint8_t sort = 0;
  std::size_t limit = server_admin_handler::default_conn_limit;
  std::uint64_t cursor = 0;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (key == "sort") {
      const auto s = sort_of(value);
      if (!s) return json_error(400, "sort must be one of id, idle, pending, dropped, subs, bytes-in, bytes-out");
      sort = *s;
    } else if (key == "limit") {
      const auto n = whole_number(value);
      if (!n || *n < 1 || *n > server_admin_handler::max_conn_limit)
        return json_error(400,
                          fmt::format("limit must be a number from 1 to {}", server_admin_handler::max_conn_limit));
      limit = static_cast<std::size_t>(*n);
    } else if (key == "cursor") {
      const auto n = whole_number(value);
      if (!n) return json_error(400, "cursor must be a whole number (the next_cursor of the page before)");
      cursor = *n;
    } else {
      return json_error(
          400, fmt::format("unknown parameter '{}': use sort, limit and cursor", std::string(key.substr(0, 64))));
    }
  }
  auto keys = sources_.conn_keys();
  const std::uint64_t total = keys.size();
  const auto page = page_connections(std::move(keys), sort, limit, cursor);
  const auto conns = sources_.conn_info(page.ids);
  return {200, std::string(json_type), connz_json(conns, total, page.next_cursor) + "\n"};
}

http_monitor::response http_monitor::status_page() {
  const auto m = sources_.metrics();
  const auto st = sources_.stats(m);
  const auto now = std::chrono::steady_clock::now();
  // Rates against the snapshot of an earlier view at least a second old;
  // views in between show the rates computed last.
  if (rate_base_at_ == std::chrono::steady_clock::time_point{}) {
    rate_base_ = m;
    rate_base_at_ = now;
  } else if (const std::chrono::duration<double> since = now - rate_base_at_; since.count() >= 1.0) {
    last_rates_ = rates_between(rate_base_, m, since.count());
    rate_base_ = m;
    rate_base_at_ = now;
  }
  auto keys = sources_.conn_keys();
  const std::uint64_t total = keys.size();
  const auto page = page_connections(std::move(keys), 2 /* pending bytes */, 50, 0);
  const auto conns = sources_.conn_info(page.ids);
  stream_page streams;
  if (sources_.streams) streams = sources_.streams(50);
  status_view v;
  v.stats = &st;
  v.metrics = &m;
  v.rates = last_rates_;
  v.ready = sources_.ready();
  v.conns = conns;
  v.conns_total = total;
  v.streams = streams.streams;
  v.streams_more = streams.more;
  v.refresh_seconds = page_refresh_seconds;
  return {200, "text/html; charset=utf-8", status_html(v)};
}

}  // namespace switchyard::broker

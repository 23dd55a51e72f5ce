#include "cluster/etcd_client.hpp"

#include "common/asio.hpp"
#include "cluster/errc.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <sodium.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace switchyard::cluster {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

// TCP keep-alive on every connection: a member that vanished without closing
// (host down, partition) is noticed after about idle + interval × count.
constexpr int keepalive_idle_s = 10;
constexpr int keepalive_interval_s = 5;
constexpr int keepalive_count = 3;

std::unexpected<std::error_code> fail(errc e) { return std::unexpected(make_error_code(e)); }

struct endpoint {
  std::string text;  // as configured
  std::string host;
  std::string port;
};

endpoint parse_endpoint(const std::string& text) {
  auto bad = [&](const char* why) {
    return std::system_error(make_error_code(errc::invalid_argument), "etcd endpoint '" + text + "': " + why);
  };
  std::string_view rest = text;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    throw bad("only http:// is supported");
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  endpoint e{text, {}, {}};
  std::string_view port;
  if (rest.starts_with('[')) {  // [v6 address]:port
    const auto close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      throw bad("expected [address]:port");
    }
    e.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) throw bad("expected host:port");
    e.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  unsigned number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (e.host.empty() || port.empty() || ec != std::errc{} || end != port.data() + port.size() || number == 0 ||
      number > 65535) {
    throw bad("expected host:port with a port in 1..65535");
  }
  e.port = std::string(port);
  return e;
}

std::string to_base64(std::string_view bytes) {
  constexpr int variant = sodium_base64_VARIANT_ORIGINAL;
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), variant), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    variant);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

std::optional<std::string> from_base64(std::string_view text) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  std::size_t length = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr,
                        &length, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return std::nullopt;
  }
  out.resize(length);
  return out;
}

// The first key after every key starting with `prefix`; "\0" (meaning "no
// end") when there is none (an empty prefix, or only 0xff bytes).
std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last != 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// proto3 JSON: 64-bit integers come as strings (numbers are accepted too); a
// field with its default value (0) is left out. False on anything else.
template <class Int>
bool read_int(const json& object, const char* name, Int& out) {
  out = 0;
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return true;
  if (it->is_number_integer()) {
    out = it->get<Int>();
    return true;
  }
  if (!it->is_string()) return false;
  const auto& text = it->get_ref<const std::string&>();
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size();
}

// The first of two spellings present (the gateway writes some messages'
// fields in camelCase, the headers' in snake_case).
template <class Int>
bool read_int(const json& object, const char* name, const char* other_name, Int& out) {
  return object.contains(name) ? read_int(object, name, out) : read_int(object, other_name, out);
}

bool read_bytes(const json& object, const char* name, std::string& out) {
  out.clear();
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  auto decoded = from_base64(it->get_ref<const std::string&>());
  if (!decoded) return false;
  out = std::move(*decoded);
  return true;
}

bool read_kv(const json& object, kv& out) {
  return object.is_object() && read_bytes(object, "key", out.key) && read_bytes(object, "value", out.value) &&
         read_int(object, "create_revision", out.create_revision) &&
         read_int(object, "mod_revision", out.mod_revision) && read_int(object, "version", out.version) &&
         read_int(object, "lease", out.lease);
}

bool read_kvs(const json& object, std::vector<kv>& out) {
  out.clear();
  const auto it = object.find("kvs");
  if (it == object.end() || it->is_null()) return true;
  if (!it->is_array()) return false;
  out.reserve(it->size());
  for (const auto& item : *it) {
    if (!read_kv(item, out.emplace_back())) return false;
  }
  return true;
}

bool read_header_revision(const json& object, std::int64_t& out) {
  out = 0;
  const auto it = object.find("header");
  return it != object.end() && it->is_object() && read_int(*it, "revision", out);
}

std::optional<endpoint_status> read_status(const json& object) {
  endpoint_status s;
  const auto header = object.find("header");
  if (header == object.end() || !header->is_object() || !read_int(*header, "member_id", s.member_id) ||
      !read_int(*header, "revision", s.revision) || !read_int(object, "leader", s.leader) ||
      !read_int(object, "raftTerm", "raft_term", s.raft_term) || !read_int(object, "dbSize", "db_size", s.db_size)) {
    return std::nullopt;
  }
  const auto version = object.find("version");
  if (version == object.end() || !version->is_string()) return std::nullopt;
  s.version = version->get<std::string>();
  return s;
}

// How one attempt on one endpoint failed.
struct attempt_error {
  errc code = errc::bad_response;
  bool next_endpoint = false;  // the endpoint failed: the call may try the next one
  bool stale = false;          // nothing came back on the connection (it may have been closed while idle)
};

attempt_error transport_error(const asio_error_code& ec, bool nothing_received) {
  if (ec == beast::error::timeout) return {errc::timeout, true, false};
  if (ec == http::error::body_limit || ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return {errc::bad_response, false, false};
  }
  if (ec.category() == make_error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream &&
      ec != http::error::partial_message) {
    return {errc::bad_response, false, false};
  }
  return {errc::unreachable, true, nothing_received};
}

// etcd's gRPC status (the gateway's {"error", "message", "code"} body, or a
// stream's {"error": {"grpc_code", "message"}}) as an attempt_error.
attempt_error grpc_error(const json& body) {
  int code = -1;
  std::string message;
  if (body.contains("code") && body["code"].is_number_integer()) code = body["code"].get<int>();
  if (body.contains("message") && body["message"].is_string()) message = body["message"].get<std::string>();
  if (const auto it = body.find("error"); it != body.end() && it->is_object()) {
    if (it->contains("grpc_code") && (*it)["grpc_code"].is_number_integer()) code = (*it)["grpc_code"].get<int>();
    if (it->contains("message") && (*it)["message"].is_string()) message = (*it)["message"].get<std::string>();
  }
  switch (code) {
    case 3:  // InvalidArgument: "key is not provided", "too many operations in txn request", ...
      return {errc::invalid_argument, false, false};
    case 4:  // DeadlineExceeded: "etcdserver: request timed out"
      return {errc::timeout, true, false};
    case 5:  // NotFound
      if (message.find("lease not found") != std::string::npos) return {errc::lease_not_found, false, false};
      return {errc::bad_response, false, false};
    case 11:  // OutOfRange
      if (message.find("compacted") != std::string::npos) return {errc::compacted, false, false};
      return {errc::invalid_argument, false, false};  // "required revision is a future revision"
    case 14:                                          // Unavailable: "no leader", "leader changed", "not capable", ...
      return {errc::unreachable, true, false};
    default:
      return {errc::bad_response, false, false};
  }
}

// An answer of the gateway as the JSON object it carries. A stream's single
// message ({"result": {...}}, as /v3/lease/keepalive answers) is unwrapped.
std::expected<json, attempt_error> interpret(unsigned status, std::string_view body) {
  json parsed = json::parse(body, nullptr, false);
  if (status != 200) {
    if (parsed.is_object() && (parsed.contains("code") || parsed.contains("error"))) {
      return std::unexpected(grpc_error(parsed));
    }
    if (status == 502 || status == 503 || status == 504) return std::unexpected(attempt_error{errc::unreachable, true});
    return std::unexpected(attempt_error{errc::bad_response, false});
  }
  if (!parsed.is_object()) return std::unexpected(attempt_error{errc::bad_response, false});
  if (const auto it = parsed.find("error"); it != parsed.end() && it->is_object()) {
    return std::unexpected(grpc_error(parsed));
  }
  if (const auto it = parsed.find("result"); it != parsed.end()) {
    if (!it->is_object()) return std::unexpected(attempt_error{errc::bad_response, false});
    json inner = std::move(*it);
    return inner;
  }
  return parsed;
}

http::request<http::string_body> make_request(const endpoint& ep, std::string_view path, std::string body) {
  http::request<http::string_body> req{http::verb::post, std::string(path), 11};
  req.set(http::field::host, ep.host + ":" + ep.port);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

std::string int_text(std::int64_t value) { return std::to_string(value); }

json range_body(std::string_view key, bool prefix) {
  if (!prefix) return json{{"key", to_base64(key)}};
  // etcd needs a key: the empty prefix starts at "\0", the smallest key.
  return json{{"key", to_base64(key.empty() ? std::string_view("\0", 1) : key)},
              {"range_end", to_base64(prefix_end(key))}};
}

json op_json(const txn_op& op) {
  switch (op.type) {
    case txn_op::kind::put: {
      json put{{"key", to_base64(op.key)}, {"value", to_base64(op.value)}};
      if (op.lease != 0) put["lease"] = int_text(op.lease);
      return json{{"request_put", std::move(put)}};
    }
    case txn_op::kind::remove:
      return json{{"request_delete_range", range_body(op.key, op.prefix)}};
    case txn_op::kind::range:
      break;
  }
  return json{{"request_range", range_body(op.key, op.prefix)}};
}

json compare_json(const txn_compare& c) {
  static constexpr const char* results[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json out{{"key", to_base64(c.key)}, {"result", results[static_cast<int>(c.result)]}};
  switch (c.what) {
    case txn_compare::target::version:
      out["target"] = "VERSION";
      out["version"] = int_text(c.number);
      break;
    case txn_compare::target::create_revision:
      out["target"] = "CREATE";
      out["create_revision"] = int_text(c.number);
      break;
    case txn_compare::target::mod_revision:
      out["target"] = "MOD";
      out["mod_revision"] = int_text(c.number);
      break;
    case txn_compare::target::value:
      out["target"] = "VALUE";
      out["value"] = to_base64(c.value);
      break;
  }
  return out;
}

bool op_valid(const txn_op& op) {
  if (op.prefix) return op.type == txn_op::kind::range || !op.key.empty();
  return !op.key.empty();
}

}  // namespace

// ---------------------------------------------------------------- txn parts

txn_compare txn_compare::absent(std::string key) { return {std::move(key), target::create_revision, op::equal, 0, {}}; }
txn_compare txn_compare::mod_revision_is(std::string key, std::int64_t revision) {
  return {std::move(key), target::mod_revision, op::equal, revision, {}};
}
txn_compare txn_compare::value_is(std::string key, std::string value) {
  return {std::move(key), target::value, op::equal, 0, std::move(value)};
}

txn_op txn_op::put(std::string key, std::string value, std::int64_t lease) {
  return {kind::put, std::move(key), std::move(value), lease, false};
}
txn_op txn_op::remove(std::string key) { return {kind::remove, std::move(key), {}, 0, false}; }
txn_op txn_op::remove_prefix(std::string prefix) { return {kind::remove, std::move(prefix), {}, 0, true}; }
txn_op txn_op::range(std::string key) { return {kind::range, std::move(key), {}, 0, false}; }
txn_op txn_op::range_prefix(std::string prefix) { return {kind::range, std::move(prefix), {}, 0, true}; }

// ---------------------------------------------------------------- state

struct etcd_client::state {
  state(std::vector<endpoint> eps, std::chrono::milliseconds t) : endpoints(std::move(eps)), timeout(t) {}

  const std::vector<endpoint> endpoints;
  const std::chrono::milliseconds timeout;
  std::size_t current = 0;           // index into endpoints
  std::atomic<bool> stopped{false};  // set by stop(), from any thread
  std::int64_t compact_revision = 0;
  // Declared before every stream, so destroyed after them.
  asio::io_context io;
  // The kept-alive connection of calls, to endpoints[conn_index].
  std::optional<beast::tcp_stream> conn;
  std::size_t conn_index = 0;
  beast::flat_buffer conn_buffer;

  // Runs handlers until `done()`; errc::closed once stop() was called. After
  // closed, io is never run again: handlers still queued (they refer to the
  // stack of the call that gave up) are destroyed with io, never invoked.
  template <class Pred>
  std::error_code run_until(Pred done) {
    while (!done()) {
      if (io.stopped()) io.restart();
      // After restart(): a stop() from now on stops io again, so run_one
      // cannot block past it.
      if (stopped.load(std::memory_order_acquire)) return errc::closed;
      if (io.run_one() == 0 && !stopped.load(std::memory_order_acquire)) {
        return errc::bad_response;  // no work left and not done: a bug, not a hang
      }
    }
    return {};
  }

  // Resolves and connects to endpoints[index] before `deadline`.
  std::expected<beast::tcp_stream, attempt_error> open(std::size_t index, clock_type::time_point deadline) {
    const auto& ep = endpoints[index];
    tcp::resolver resolver(io);
    tcp::resolver::results_type results;
    asio_error_code resolve_ec;
    bool resolved = false;
    bool timer_done = false;
    asio::steady_timer timer(io, deadline);
    resolver.async_resolve(ep.host, ep.port, [&](const asio_error_code& ec, tcp::resolver::results_type r) {
      resolve_ec = ec;
      results = std::move(r);
      resolved = true;
    });
    timer.async_wait([&](const asio_error_code& ec) {
      timer_done = true;
      if (!ec) resolver.cancel();
    });
    if (run_until([&] { return resolved; })) return std::unexpected(attempt_error{errc::closed});
    timer.cancel();
    if (run_until([&] { return timer_done; })) return std::unexpected(attempt_error{errc::closed});
    if (resolve_ec == asio::error::operation_aborted) return std::unexpected(attempt_error{errc::timeout, true});
    if (resolve_ec) return std::unexpected(attempt_error{errc::unreachable, true});

    beast::tcp_stream stream(io);
    stream.expires_at(deadline);
    asio_error_code connect_ec;
    bool connected = false;
    stream.async_connect(results, [&](const asio_error_code& ec, const tcp::endpoint&) {
      connect_ec = ec;
      connected = true;
    });
    if (run_until([&] { return connected; })) return std::unexpected(attempt_error{errc::closed});
    if (connect_ec) return std::unexpected(transport_error(connect_ec, false));
    stream.expires_never();
    auto& socket = stream.socket();
    asio_error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    socket.set_option(asio::socket_base::keep_alive(true), ignored);
    const int fd = socket.native_handle();
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &keepalive_idle_s, sizeof keepalive_idle_s);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &keepalive_interval_s, sizeof keepalive_interval_s);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &keepalive_count, sizeof keepalive_count);
    return stream;
  }

  // Writes `req` to `stream` and reads the whole answer, before `deadline`.
  std::expected<http::response<http::string_body>, attempt_error> exchange(beast::tcp_stream& stream,
                                                                           beast::flat_buffer& buffer,
                                                                           const http::request<http::string_body>& req,
                                                                           clock_type::time_point deadline) {
    stream.expires_at(deadline);
    asio_error_code write_ec;
    bool written = false;
    http::async_write(stream, req, [&](const asio_error_code& ec, std::size_t) {
      write_ec = ec;
      written = true;
    });
    if (run_until([&] { return written; })) return std::unexpected(attempt_error{errc::closed});
    if (write_ec) return std::unexpected(transport_error(write_ec, true));
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_response_bytes);
    asio_error_code read_ec;
    bool read = false;
    http::async_read(stream, buffer, parser, [&](const asio_error_code& ec, std::size_t) {
      read_ec = ec;
      read = true;
    });
    if (run_until([&] { return read; })) return std::unexpected(attempt_error{errc::closed});
    stream.expires_never();
    if (read_ec) return std::unexpected(transport_error(read_ec, !parser.got_some()));
    return parser.release();
  }

  // One POST to endpoints[index] over the kept-alive connection (opened if
  // needed; opened again once if a reused one turns out closed).
  std::expected<json, attempt_error> attempt(std::size_t index, std::string_view path, const std::string& body,
                                             clock_type::time_point deadline) {
    const auto req = make_request(endpoints[index], path, body);
    for (int round = 0; round < 2; ++round) {
      const bool reused = conn.has_value() && conn_index == index;
      if (!reused) {
        conn.reset();
        auto opened = open(index, deadline);
        if (!opened) return std::unexpected(opened.error());
        conn.emplace(std::move(*opened));
        conn_index = index;
        conn_buffer.consume(conn_buffer.size());
      }
      auto res = exchange(*conn, conn_buffer, req, deadline);
      if (!res) {
        conn.reset();
        if (reused && res.error().stale) continue;
        return std::unexpected(res.error());
      }
      if (!res->keep_alive()) conn.reset();
      return interpret(res->result_int(), res->body());
    }
    return std::unexpected(attempt_error{errc::unreachable, true});
  }

  // A unary call: POST `body` to `path`, rotating through the endpoints.
  std::expected<json, std::error_code> call(std::string_view path, const json& body) {
    if (stopped.load(std::memory_order_acquire)) return fail(errc::closed);
    const auto deadline = clock_type::now() + timeout;
    const std::string text = body.dump();
    const std::size_t n = endpoints.size();
    bool timed_out = false;
    for (std::size_t tried = 0; tried < n; ++tried) {
      const auto now = clock_type::now();
      if (now >= deadline) {
        timed_out = true;
        break;
      }
      // An equal share of what is left for each endpoint still to try.
      const auto attempt_deadline = now + (deadline - now) / static_cast<long>(n - tried);
      auto result = attempt(current, path, text, attempt_deadline);
      if (result) return std::move(*result);
      if (!result.error().next_endpoint) return fail(result.error().code);
      if (result.error().code == errc::timeout) timed_out = true;
      conn.reset();
      current = (current + 1) % n;
    }
    return fail(timed_out ? errc::timeout : errc::unreachable);
  }

  // One POST to endpoints[index] on a connection of its own, closed after.
  std::expected<json, attempt_error> one_off(std::size_t index, std::string_view path, const json& body,
                                             clock_type::time_point deadline) {
    auto stream = open(index, deadline);
    if (!stream) return std::unexpected(stream.error());
    beast::flat_buffer buffer;
    auto res = exchange(*stream, buffer, make_request(endpoints[index], path, body.dump()), deadline);
    if (!res) return std::unexpected(res.error());
    return interpret(res->result_int(), res->body());
  }
};

// ---------------------------------------------------------------- client

etcd_client::etcd_client(std::vector<std::string> endpoints, std::chrono::milliseconds call_timeout) {
  if (endpoints.empty()) {
    throw std::system_error(make_error_code(errc::invalid_argument), "etcd_client: no endpoints");
  }
  if (call_timeout <= std::chrono::milliseconds::zero()) {
    throw std::system_error(make_error_code(errc::invalid_argument), "etcd_client: the call timeout must be positive");
  }
  if (sodium_init() < 0) throw std::runtime_error("etcd_client: libsodium failed to initialize");
  std::vector<endpoint> parsed;
  parsed.reserve(endpoints.size());
  for (const auto& text : endpoints) parsed.push_back(parse_endpoint(text));
  s_ = std::make_unique<state>(std::move(parsed), call_timeout);
}

etcd_client::~etcd_client() = default;

void etcd_client::stop() noexcept {
  s_->stopped.store(true, std::memory_order_release);
  s_->io.stop();
}

const std::string& etcd_client::current_endpoint() const noexcept { return s_->endpoints[s_->current].text; }

std::int64_t etcd_client::last_compact_revision() const noexcept { return s_->compact_revision; }

std::expected<std::int64_t, std::error_code> etcd_client::grant_lease(std::chrono::seconds ttl) {
  if (ttl < std::chrono::seconds(1)) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/lease/grant", json{{"TTL", int_text(ttl.count())}});
  if (!answer) return std::unexpected(answer.error());
  std::int64_t id = 0;
  if (!read_int(*answer, "ID", id) || id == 0) return fail(errc::bad_response);
  return id;
}

std::expected<std::int64_t, std::error_code> etcd_client::keep_alive(std::int64_t lease) {
  if (lease == 0) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/lease/keepalive", json{{"ID", int_text(lease)}});
  if (!answer) return std::unexpected(answer.error());
  std::int64_t ttl = 0;
  if (!read_int(*answer, "TTL", ttl)) return fail(errc::bad_response);
  // A lease that is gone answers without a TTL (proto3's 0), not an error.
  if (ttl <= 0) return fail(errc::lease_not_found);
  return ttl;
}

std::expected<void, std::error_code> etcd_client::revoke_lease(std::int64_t lease) {
  if (lease == 0) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/lease/revoke", json{{"ID", int_text(lease)}});
  if (!answer) return std::unexpected(answer.error());
  return {};
}

std::expected<std::int64_t, std::error_code> etcd_client::put(std::string_view key, std::string_view value,
                                                              std::int64_t lease) {
  if (key.empty()) return fail(errc::invalid_argument);
  json body{{"key", to_base64(key)}, {"value", to_base64(value)}};
  if (lease != 0) body["lease"] = int_text(lease);
  auto answer = s_->call("/v3/kv/put", body);
  if (!answer) return std::unexpected(answer.error());
  std::int64_t revision = 0;
  if (!read_header_revision(*answer, revision) || revision == 0) return fail(errc::bad_response);
  return revision;
}

std::expected<std::optional<kv>, std::error_code> etcd_client::get(std::string_view key) {
  if (key.empty()) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/kv/range", range_body(key, false));
  if (!answer) return std::unexpected(answer.error());
  std::vector<kv> kvs;
  if (!read_kvs(*answer, kvs) || kvs.size() > 1) return fail(errc::bad_response);
  if (kvs.empty()) return std::optional<kv>{};
  return std::optional<kv>{std::move(kvs.front())};
}

std::expected<range_result, std::error_code> etcd_client::range_prefix(std::string_view prefix) {
  auto answer = s_->call("/v3/kv/range", range_body(prefix, true));
  if (!answer) return std::unexpected(answer.error());
  range_result r;
  if (!read_kvs(*answer, r.kvs) || !read_header_revision(*answer, r.revision)) return fail(errc::bad_response);
  return r;
}

std::expected<std::int64_t, std::error_code> etcd_client::delete_key(std::string_view key) {
  if (key.empty()) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/kv/deleterange", range_body(key, false));
  if (!answer) return std::unexpected(answer.error());
  std::int64_t deleted = 0;
  if (!read_int(*answer, "deleted", deleted)) return fail(errc::bad_response);
  return deleted;
}

std::expected<std::int64_t, std::error_code> etcd_client::delete_prefix(std::string_view prefix) {
  if (prefix.empty()) return fail(errc::invalid_argument);
  auto answer = s_->call("/v3/kv/deleterange", range_body(prefix, true));
  if (!answer) return std::unexpected(answer.error());
  std::int64_t deleted = 0;
  if (!read_int(*answer, "deleted", deleted)) return fail(errc::bad_response);
  return deleted;
}

std::expected<txn_result, std::error_code> etcd_client::txn(std::span<const txn_compare> compares,
                                                            std::span<const txn_op> success,
                                                            std::span<const txn_op> failure) {
  json body{{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compares) {
    if (c.key.empty()) return fail(errc::invalid_argument);
    body["compare"].push_back(compare_json(c));
  }
  for (const auto& op : success) {
    if (!op_valid(op)) return fail(errc::invalid_argument);
    body["success"].push_back(op_json(op));
  }
  for (const auto& op : failure) {
    if (!op_valid(op)) return fail(errc::invalid_argument);
    body["failure"].push_back(op_json(op));
  }
  auto answer = s_->call("/v3/kv/txn", body);
  if (!answer) return std::unexpected(answer.error());
  txn_result r;
  if (!read_header_revision(*answer, r.revision)) return fail(errc::bad_response);
  if (const auto it = answer->find("succeeded"); it != answer->end()) {
    if (!it->is_boolean()) return fail(errc::bad_response);
    r.succeeded = it->get<bool>();
  }
  const auto& ops = r.succeeded ? success : failure;
  const auto responses = answer->find("responses");
  const bool has_responses = responses != answer->end() && responses->is_array();
  if (!has_responses && !ops.empty()) return fail(errc::bad_response);
  if (has_responses && responses->size() != ops.size()) return fail(errc::bad_response);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].type != txn_op::kind::range) continue;
    const auto& item = (*responses)[i];
    const auto range = item.find("response_range");
    if (range == item.end() || !range->is_object()) return fail(errc::bad_response);
    if (!read_kvs(*range, r.ranges.emplace_back())) return fail(errc::bad_response);
  }
  return r;
}

namespace {

// A single-key compare-and-put as a cas_result.
std::expected<cas_result, std::error_code> cas(etcd_client& client, const txn_compare& compare, std::string_view key,
                                               std::string_view value, std::int64_t lease) {
  const txn_op success[] = {txn_op::put(std::string(key), std::string(value), lease)};
  const txn_op failure[] = {txn_op::range(std::string(key))};
  auto r = client.txn(std::span(&compare, 1), success, failure);
  if (!r) return std::unexpected(r.error());
  cas_result out{r->succeeded, r->revision, std::nullopt};
  if (!r->succeeded) {
    if (r->ranges.size() != 1 || r->ranges.front().size() > 1) return fail(errc::bad_response);
    if (!r->ranges.front().empty()) out.current = std::move(r->ranges.front().front());
  }
  return out;
}

}  // namespace

std::expected<cas_result, std::error_code> etcd_client::create_if_absent(std::string_view key, std::string_view value,
                                                                         std::int64_t lease) {
  if (key.empty()) return fail(errc::invalid_argument);
  return cas(*this, txn_compare::absent(std::string(key)), key, value, lease);
}

std::expected<cas_result, std::error_code> etcd_client::put_if_mod_revision(std::string_view key,
                                                                            std::string_view value, std::int64_t lease,
                                                                            std::int64_t expected_mod_revision) {
  if (key.empty()) return fail(errc::invalid_argument);
  return cas(*this, txn_compare::mod_revision_is(std::string(key), expected_mod_revision), key, value, lease);
}

std::expected<endpoint_status, std::error_code> etcd_client::status() {
  auto answer = s_->call("/v3/maintenance/status", json::object());
  if (!answer) return std::unexpected(answer.error());
  auto s = read_status(*answer);
  if (!s) return fail(errc::bad_response);
  s->endpoint = s_->endpoints[s_->current].text;
  return std::move(*s);
}

std::vector<member_health> etcd_client::cluster_health(std::chrono::milliseconds timeout) {
  std::vector<member_health> out;
  out.reserve(s_->endpoints.size());
  for (std::size_t i = 0; i < s_->endpoints.size(); ++i) {
    auto& health = out.emplace_back(member_health{s_->endpoints[i].text, fail(errc::closed)});
    if (s_->stopped.load(std::memory_order_acquire)) continue;
    auto answer = s_->one_off(i, "/v3/maintenance/status", json::object(), clock_type::now() + timeout);
    if (!answer) {
      health.status = fail(answer.error().code);
      continue;
    }
    auto s = read_status(*answer);
    if (!s) {
      health.status = fail(errc::bad_response);
      continue;
    }
    s->endpoint = s_->endpoints[i].text;
    health.status = std::move(*s);
  }
  return out;
}

// ---------------------------------------------------------------- watch

std::expected<void, std::error_code> etcd_client::watch_prefix(std::string_view prefix, std::int64_t start_revision,
                                                               const watch_callback& callback, watch_options options) {
  auto& s = *s_;
  if (s.stopped.load(std::memory_order_acquire)) return fail(errc::closed);
  if (start_revision < 0) return fail(errc::invalid_argument);
  json create = range_body(prefix, true);
  if (start_revision > 0) create["start_revision"] = int_text(start_revision);
  const std::string request_body = json{{"create_request", std::move(create)}}.dump();

  // The stream's bytes not yet cut into messages (one per line), bounded.
  std::string pending;
  auto on_chunk = [&](std::uint64_t, beast::string_view body, asio_error_code& ec) -> std::size_t {
    if (pending.size() + body.size() > max_response_bytes) {
      ec = http::error::body_limit;
      return 0;
    }
    pending.append(body.data(), body.size());
    return body.size();
  };
  std::optional<beast::tcp_stream> stream;
  std::optional<http::response_parser<http::string_body>> parser;
  beast::flat_buffer buffer;
  std::size_t connected_index = 0;  // the endpoint the watch's stream went to

  // Connect: like a call, rotating through the endpoints within the call
  // timeout, until one answers the watch's header with 200.
  {
    const auto deadline = clock_type::now() + s.timeout;
    const std::size_t n = s.endpoints.size();
    bool timed_out = false;
    bool connected = false;
    for (std::size_t tried = 0; tried < n && !connected; ++tried) {
      const auto now = clock_type::now();
      if (now >= deadline) {
        timed_out = true;
        break;
      }
      const auto attempt_deadline = now + (deadline - now) / static_cast<long>(n - tried);
      auto failed = [&](attempt_error e) -> std::optional<std::error_code> {
        stream.reset();
        if (!e.next_endpoint) return make_error_code(e.code);
        if (e.code == errc::timeout) timed_out = true;
        s.current = (s.current + 1) % n;
        return std::nullopt;
      };
      auto opened = s.open(s.current, attempt_deadline);
      if (!opened) {
        if (auto e = failed(opened.error())) return std::unexpected(*e);
        continue;
      }
      stream.emplace(std::move(*opened));
      buffer.consume(buffer.size());
      pending.clear();
      parser.emplace();
      parser->body_limit(max_response_bytes);
      parser->on_chunk_body(on_chunk);
      stream->expires_at(attempt_deadline);
      auto req = make_request(s.endpoints[s.current], "/v3/watch", request_body);
      // gRPC metadata through etcd's gateway: etcd cancels the watch when its
      // member loses the leader (a member cut off from the others would
      // otherwise keep the stream open and send nothing).
      req.set("Grpc-Metadata-Hasleader", "true");
      asio_error_code ec;
      bool done = false;
      http::async_write(*stream, req, [&](const asio_error_code& e, std::size_t) {
        ec = e;
        done = true;
      });
      if (s.run_until([&] { return done; })) return fail(errc::closed);
      if (!ec) {
        done = false;
        http::async_read_header(*stream, buffer, *parser, [&](const asio_error_code& e, std::size_t) {
          ec = e;
          done = true;
        });
        if (s.run_until([&] { return done; })) return fail(errc::closed);
      }
      if (ec) {
        if (auto e = failed(transport_error(ec, false))) return std::unexpected(*e);
        continue;
      }
      if (parser->get().result_int() != 200) {  // an error answer: read it whole
        done = false;
        http::async_read(*stream, buffer, *parser, [&](const asio_error_code& e, std::size_t) {
          ec = e;
          done = true;
        });
        if (s.run_until([&] { return done; })) return fail(errc::closed);
        if (ec) {
          if (auto e = failed(transport_error(ec, false))) return std::unexpected(*e);
          continue;
        }
        const auto status = parser->get().result_int();
        auto answer = interpret(status, parser->chunked() ? std::string_view(pending) : parser->get().body());
        if (auto e = failed(answer ? attempt_error{errc::bad_response} : answer.error())) return std::unexpected(*e);
        continue;
      }
      connected = true;
      connected_index = s.current;
    }
    if (!connected) return fail(timed_out ? errc::timeout : errc::unreachable);
  }
  // The stream has no end: its total size is not limited, each message is
  // (on_chunk). A body that is not chunked is limited as a whole.
  if (parser->chunked()) parser->body_limit(boost::none);
  // The watch exists once etcd says it was created: until then the call
  // timeout runs again from the header. (A stream answered but never
  // created, or held open by something between us and etcd, would
  // otherwise stay open and silent for good: the node's view would stop
  // changing.) Then the stream waits without a timeout.
  stream->expires_after(s.timeout);
  bool created_seen = false;

  asio::steady_timer tick_timer(s.io);
  bool tick_pending = false;
  bool tick_fired = false;
  bool read_pending = false;
  asio_error_code read_ec;
  auto start_read = [&] {
    read_pending = true;
    http::async_read_some(*stream, buffer, *parser, [&](const asio_error_code& ec, std::size_t) {
      read_ec = ec;
      read_pending = false;
    });
  };
  auto start_tick = [&] {
    if (options.tick <= std::chrono::milliseconds::zero() || tick_pending) return;
    tick_pending = true;
    tick_fired = false;
    tick_timer.expires_after(options.tick);
    tick_timer.async_wait([&](const asio_error_code& ec) {
      tick_pending = false;
      tick_fired = !ec;
    });
  };
  // Every way out but stop(): no handler may outlive this frame. A watch
  // that failed before etcd created it sends the next one to the next
  // endpoint (unless a call moved on from this one meanwhile).
  auto finish = [&](std::expected<void, std::error_code> result) -> std::expected<void, std::error_code> {
    if (!result && !created_seen && s.current == connected_index)
      s.current = (connected_index + 1) % s.endpoints.size();
    tick_timer.cancel();
    asio_error_code ignored;
    stream->socket().close(ignored);
    if (s.run_until([&] { return !tick_pending && !read_pending; })) return fail(errc::closed);
    return result;
  };

  std::int64_t revision = start_revision > 0 ? start_revision - 1 : 0;
  std::vector<watch_event> events;
  start_read();
  start_tick();
  for (;;) {
    if (s.run_until([&] { return !read_pending || tick_fired; })) return fail(errc::closed);
    if (!read_pending) {
      if (read_ec) {
        return finish(
            fail(read_ec == http::error::body_limit ? errc::bad_response : transport_error(read_ec, false).code));
      }
      std::size_t from = 0;
      for (std::size_t end; (end = pending.find('\n', from)) != std::string::npos; from = end + 1) {
        const std::string_view line = std::string_view(pending).substr(from, end - from);
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        auto message = interpret(200, line);
        if (!message) return finish(fail(message.error().code));
        std::int64_t compact = 0;
        if (!read_int(*message, "compact_revision", compact)) return finish(fail(errc::bad_response));
        const auto canceled = message->find("canceled");
        if (canceled != message->end() && canceled->is_boolean() && canceled->get<bool>()) {
          if (compact > 0) {
            s.compact_revision = compact;
            return finish(fail(errc::compacted));
          }
          return finish(fail(errc::bad_response));  // canceled by etcd for another reason
        }
        std::int64_t header_revision = 0;
        if (!read_header_revision(*message, header_revision)) return finish(fail(errc::bad_response));
        const auto list = message->find("events");
        if (list == message->end() || list->is_null() || (list->is_array() && list->empty())) {
          // A progress notice: every event up to its revision was sent. (The
          // created message's revision is the store's, with older events
          // still to come.)
          const auto created = message->find("created");
          if (created == message->end() || !created->is_boolean() || !created->get<bool>()) {
            revision = std::max(revision, header_revision);
          } else if (!created_seen) {
            created_seen = true;
            stream->expires_never();  // no read is pending here
          }
          continue;
        }
        if (!list->is_array()) return finish(fail(errc::bad_response));
        events.clear();
        events.reserve(list->size());
        for (const auto& item : *list) {
          auto& event = events.emplace_back();
          if (!item.is_object()) return finish(fail(errc::bad_response));
          const auto type = item.find("type");
          if (type != item.end() && *type == "DELETE") event.type = event_type::remove;
          const auto kv_it = item.find("kv");
          if (kv_it == item.end() || !read_kv(*kv_it, event.kv)) return finish(fail(errc::bad_response));
        }
        revision = std::max(revision, events.back().kv.mod_revision);
        const bool go_on = callback(events, revision);
        if (s.stopped.load(std::memory_order_acquire)) return fail(errc::closed);
        if (!go_on) return finish({});
      }
      pending.erase(0, from);
      if (parser->is_done()) return finish(fail(errc::unreachable));  // etcd ended the stream
      start_read();
    }
    if (tick_fired) {
      tick_fired = false;
      const bool go_on = callback({}, revision);
      if (s.stopped.load(std::memory_order_acquire)) return fail(errc::closed);
      if (!go_on) return finish({});
      start_tick();
    }
  }
}

}  // namespace switchyard::cluster

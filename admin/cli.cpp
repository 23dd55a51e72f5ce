#include "admin/cli.hpp"

#include "admin/cli_context.hpp"
#include "admin/command.hpp"
#include "admin/credentials_tool.hpp"
#include "admin/format.hpp"
#include "common/mutex.hpp"

#include <switchyard/client.hpp>
#include <switchyard/log.hpp>

#include <CLI/CLI.hpp>

#include <sodium.h>

#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <istream>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace switchyard::admin {

namespace {

using namespace std::chrono_literals;

// What the client library logged (warn and above) while connecting: the
// reason behind tls_failed, or a key file that does not load. Filled on
// the client's loop thread, read on the caller's.
class connect_log {
 public:
  void add(std::string_view message) {
    switchyard::lock_guard lock(mu_);
    last_ = std::string(message);
  }
  // The last line, without the library's "switchyard: " prefix and with
  // line breaks as spaces (errors are one line); empty if none.
  std::string last() const {
    switchyard::lock_guard lock(mu_);
    std::string line = last_.starts_with("switchyard: ") ? last_.substr(12) : last_;
    for (char& c : line)
      if (c == '\n' || c == '\r') c = ' ';
    return line;
  }

 private:
  mutable switchyard::mutex mu_;
  std::string last_ SWITCHYARD_GUARDED_BY(mu_);
};

// Overwrites a string holding a secret (the optimiser may not skip it).
void wipe(std::string& secret) {
  if (!secret.empty()) sodium_memzero(secret.data(), secret.size());
  secret.clear();
}

// A conns --sort name; nullopt for an unknown one.
std::optional<connection_order> parse_order(std::string_view name) {
  static constexpr std::pair<std::string_view, connection_order> orders[]{{"id", connection_order::id},
                                                                          {"idle", connection_order::idle},
                                                                          {"pending", connection_order::pending_bytes},
                                                                          {"dropped", connection_order::dropped},
                                                                          {"subs", connection_order::subscriptions},
                                                                          {"bytes-in", connection_order::bytes_in},
                                                                          {"bytes-out", connection_order::bytes_out}};
  for (const auto& [n, o] : orders)
    if (n == name) return o;
  return std::nullopt;
}

// A drain window: a number with a unit (ms, s, m, h). nullopt if malformed
// or above 24 h (the broker's limit).
std::optional<std::chrono::milliseconds> parse_window(std::string_view text) {
  std::size_t digits = 0;
  std::uint64_t value = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    value = value * 10 + static_cast<std::uint64_t>(text[digits] - '0');
    if (value > 86'400'000) return std::nullopt;
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::uint64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else
    return std::nullopt;
  if (value * scale > 86'400'000) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(value * scale));
}

// A refusal of the credentials or of the operation, the other
// server-reported codes (and a missing capability) are the broker's answer;
// everything else means the connection did not work out.
int exit_code_of(std::error_code ec) {
  if (ec == errc::unauthorized || ec == errc::forbidden) return exit_refused;
  // Found wrong by the library before anything was sent.
  if (ec == errc::invalid_channel || ec == errc::invalid_pattern || ec == errc::payload_too_large) return exit_usage;
  if (ec.category() == client_category() && ((ec.value() > 0 && ec.value() < 100) || ec == errc::not_supported))
    return exit_server_error;
  return exit_connection;
}

// "host:port" or "[v6]:port".
bool parse_address(std::string_view address, std::string& host, std::uint16_t& port) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) return false;
  host = std::string(address.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned long value = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned long>(c - '0');
    if (value > 65535) return false;
  }
  if (value == 0) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace

rendered_payload render_payload(std::string_view bytes) {
  if (is_printable_utf8(bytes)) return {true, std::string(bytes)};
  return {false, base64(bytes)};
}

int command::run() {
  // Local commands: no broker.
  if (s_.command == "keygen") return keygen();
  if (s_.command == "hash-token") return hash_token();
  client_options o;
  if (!parse_address(s_.address, o.host, o.port))
    return fail(exit_usage, "usage", "--address must be host:port (port 1..65535), got '" + s_.address + "'");
  o.client_name = std::string(cli_name);
  o.token = s_.token;
  o.key_file = s_.key_file;
  if (s_.tls) {
    o.tls.enabled = true;
    o.tls.ca_file = s_.tls_ca;
    o.tls.cert_file = s_.tls_cert;
    o.tls.key_file = s_.tls_key;
    o.tls.server_name = s_.tls_server_name;
    o.tls.verify_server = !s_.tls_insecure;
  }
  // The broker keeps --admin-slots connections for this at its cap, and
  // does not rate-limit it: an operator is not locked out by a storm.
  o.admin = true;
  o.connect_timeout = o.request_timeout = std::chrono::milliseconds(s_.timeout_ms);
  // One command, one session: a lost connection ends the command with an
  // error instead of waiting for a restarted broker.
  o.reconnect.enabled = false;
  // Reported to a command that waits (sub).
  o.on_closed = [events = events_](std::error_code ec) {
    {
      switchyard::lock_guard lock(events->mu);
      events->closed = true;
      events->why = ec;
    }
    events->cv.notify_all();
  };
  o.on_receipt = [events = events_](const receipt& r) {
    {
      switchyard::lock_guard lock(events->mu);
      events->receipts.push_back(r);
    }
    events->cv.notify_all();
  };
  o.on_dropped = [events = events_](std::uint64_t n) {
    {
      switchyard::lock_guard lock(events->mu);
      events->dropped += n;
    }
    events->cv.notify_all();
  };
  // The library says why TLS or a key file failed only in its log.
  auto log = std::make_shared<connect_log>();
  set_log_sink([log](log_level, std::string_view message) { log->add(message); }, log_level::warn);
  auto c = client::connect(o);
  set_log_sink(nullptr);
  if (!c) return connect_failed(c.error(), log->last());
  client_ = std::move(*c);
  static constexpr std::pair<std::string_view, int (command::*)()> commands[]{
      {"ping", &command::ping},
      {"pub", &command::pub},
      {"sub", &command::sub},
      {"send", &command::send},
      {"streams list", &command::streams_list},
      {"streams info", &command::streams_info},
      {"streams retention", &command::streams_retention},
      {"streams read", &command::streams_read},
      {"streams tail", &command::streams_tail},
      {"streams delete", &command::streams_delete},
      {"routes get", &command::routes_get},
      {"routes list", &command::routes_list},
      {"routes delete", &command::routes_delete},
      {"leases list", &command::leases_list},
      {"leases revoke", &command::leases_revoke},
      {"inboxes list", &command::inboxes_list},
      {"pending", &command::pending},
      {"flags list", &command::flags_list},
      {"flags set", &command::flags_set},
      {"drain", &command::drain},
      {"stats", &command::stats},
      {"conns", &command::conns},
      {"cluster status", &command::cluster_status},
      {"cluster takeover", &command::cluster_takeover}};
  for (const auto& [name, fn] : commands)
    if (name == s_.command) return (this->*fn)();
  return fail(exit_usage, "usage", "unknown command '" + s_.command + "'");
}

int command::fail(int code, std::string_view kind, const std::string& message) {
  err_ << cli_name << ": " << message << "\n";
  if (s_.json) {
    json_writer j;
    j.begin_object().key("error").begin_object();
    j.string("code", kind).string("message", message).number("exit_code", static_cast<std::uint64_t>(code));
    j.end_object().end_object();
    out_ << j.str() << "\n";
  }
  return code;
}

// A failed connect: refused credentials exit 4, bad key files 1, the
// rest (no broker, TLS, timeout, the broker's other refusals) 2. `why`:
// what the library logged.
int command::connect_failed(std::error_code ec, const std::string& why) {
  const std::string at = "cannot connect to " + s_.address;
  if (ec == errc::unauthorized) {
    const std::string hint =
        !s_.token.empty()      ? "its auth file has no principal with this token (token_sha256 = the token's hash)"
        : !s_.key_file.empty() ? "its auth file has no principal with this key (ed25519_public_keys)"
                               : "it requires credentials: set SWITCHYARD_TOKEN or SWITCHYARD_KEY_FILE (or give "
                                 "--token or --key-file)";
    return fail(exit_refused, error_code_name(ec), at + ": the broker refused the credentials (unauthorized): " + hint);
  }
  if (ec == errc::forbidden)
    return fail(exit_refused, error_code_name(ec),
                at + ": the broker refused the connection (forbidden): its auth file does not allow this principal "
                     "to do that");
  if (ec == errc::tls_failed)
    return fail(exit_connection, error_code_name(ec),
                at + ": TLS failed: " + (why.empty() ? ec.message() : why) +
                    (s_.tls_ca.empty() && !s_.tls_insecure ? " (the broker's certificate was checked against the "
                                                             "system's CAs: give its CA with --tls-ca)"
                                                           : ""));
  if (ec == errc::bad_request && !s_.tls)
    return fail(exit_connection, error_code_name(ec),
                at + ": the broker refused the hello (bad_request); a broker with TLS refuses plain connections: "
                     "add --tls (and --tls-ca)");
  if (ec == std::errc::invalid_argument && !s_.key_file.empty())
    return fail(exit_usage, "usage", "--key-file " + s_.key_file + " cannot be used" + (why.empty() ? "" : ": " + why));
  // Whatever else (refused, timeout, the broker's other refusals): exit 2.
  return fail(exit_connection, error_code_name(ec), at + ": " + ec.message());
}

// keygen: a fresh key pair; the secret into --out (or stdout).
int command::keygen() {
  auto keys = generate_key_pair();
  if (!keys)
    return fail(exit_local, "no_randomness", "keygen: libsodium cannot be initialised: " + keys.error().message());
  std::string text = key_file_text(*keys);
  int code = exit_ok;
  if (s_.out_file.empty()) {
    if (::isatty(STDOUT_FILENO))
      err_ << cli_name
           << ": the secret key is shown on this terminal only; keep it secret (keygen --out FILE "
              "writes it to a new file of mode 0600)\n";
    if (s_.json) {
      json_writer j;
      j.begin_object().string("public_key", keys->public_key).string("secret_key", keys->seed).end_object();
      std::string line = j.str();
      out_ << line << "\n";
      wipe(line);
    } else {
      out_ << text;
    }
  } else if (auto ec = write_secret_file(s_.out_file, text)) {
    code = ec == std::errc::file_exists
               ? fail(exit_local, "file_exists",
                      "keygen: " + s_.out_file + " exists; keygen never replaces a file (choose another --out)")
               : fail(exit_local, "write_failed", "keygen: cannot write " + s_.out_file + ": " + ec.message());
  } else if (s_.json) {
    json_writer j;
    j.begin_object().string("public_key", keys->public_key).string("file", s_.out_file).end_object();
    out_ << j.str() << "\n";
  } else {
    out_ << keys->public_key << "\n";
    err_ << cli_name << ": wrote the secret key to " << s_.out_file
         << " (mode 0600); the public key above goes into the broker's auth file (ed25519_public_keys)\n";
  }
  out_.flush();
  wipe(keys->seed);
  wipe(text);
  return code;
}

// hash-token: the SHA-256 of a token from --token or stdin, or of a new one.
int command::hash_token() {
  std::string token;
  if (s_.generate) {
    if (!s_.token.empty())
      return fail(exit_usage, "usage", "hash-token --generate makes the token: no --token with it");
    auto made = generate_token();
    if (!made)
      return fail(exit_local, "no_randomness",
                  "hash-token: libsodium cannot be initialised: " + made.error().message());
    token = std::move(*made);
  } else if (!s_.token.empty()) {
    token = s_.token;
  } else if (!read_token(token)) {
    return fail(exit_usage, "usage", "hash-token: no token on stdin (give one line, or --token, or --generate)");
  }
  if (token.empty()) return fail(exit_usage, "usage", "hash-token: the token is empty");
  const std::string hash = token_sha256_hex(token);
  if (s_.json) {
    json_writer j;
    j.begin_object();
    if (s_.generate) j.string("token", token);
    j.string("token_sha256", hash).end_object();
    std::string line = j.str();
    out_ << line << "\n";
    wipe(line);
  } else if (s_.generate) {
    out_ << "token         " << token << "\ntoken_sha256  " << hash << "\n";
  } else {
    out_ << hash << "\n";
  }
  out_.flush();
  wipe(token);
  return exit_ok;
}

// One line from `in_`, without its line break ("\n", or "\r\n"). From a
// terminal: prompted on stderr, not echoed. False at end of input.
bool command::read_token(std::string& token) {
  termios saved{};
  const bool hide = ::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &saved) == 0;
  if (hide) {
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    err_ << "token: " << std::flush;
  }
  const bool got = static_cast<bool>(std::getline(in_, token));
  if (hide) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    err_ << "\n";
  }
  if (got && token.ends_with('\r')) token.pop_back();
  return got;
}

// `what`: the command and its argument ("streams info orders"), which also
// says what capability it needed; `missing` names what not_found means.
int command::fail(std::error_code ec, const std::string& what, std::string_view missing) {
  const bool streams = what.starts_with("streams");
  const bool admin = what.starts_with("drain") || what.starts_with("stats") || what.starts_with("conns") ||
                     what.starts_with("inboxes") || what.starts_with("flags") || what.starts_with("cluster");
  // Offers: pending, and send with an expiry (a plain send's "routing" otherwise).
  const bool offers = what.starts_with("pending") || (what.starts_with("send") && s_.expires_ms != 0);
  std::string message = what + ": " + ec.message();
  if (ec == errc::not_found)
    message = what + ": " + std::string(missing);
  else if (ec == errc::not_supported && admin)
    message = what + ": the broker does not grant \"admin\" (" +
              (s_.token.empty() && s_.key_file.empty()
                   ? "an older broker without this command, or one with an auth file: connect as a principal with "
                     "admin = true"
                   : "the principal of these credentials is not an admin: admin = true in the broker's auth file") +
              ")";
  else if (ec == errc::not_supported && offers)
    message = what + ": the broker does not offer expiring sends and offers (\"offers\"; an older broker)";
  else if (ec == errc::not_supported && streams)
    message = what + ": the broker does not offer the sequence log (\"log\"; it runs without a data dir)";
  else if (ec == errc::not_supported)
    message = what + ": the broker does not offer routing (\"routing\")";
  else if (ec == errc::internal)
    message += " (is the broker running without a data dir?)";
  else if (ec == errc::corrupted)
    message = what +
              ": the broker's sequence log is damaged (corrupted); check it with switchyard-server "
              "--verify-log --data-dir <its data dir> on the broker's host";
  else if (ec == errc::bad_request && streams)
    message += " (stream names are 1..255 bytes, retention limits at most 9007199254740991)";
  else if (ec == errc::forbidden)
    message = what + ": forbidden: the broker's auth file does not allow this principal to do that";
  return fail(exit_code_of(ec), error_code_name(ec), message);
}

std::string command::message_payload() {
  if (s_.message != "-") return s_.message;
  return std::string(std::istreambuf_iterator<char>(in_), std::istreambuf_iterator<char>());
}

int command::ping() {
  const auto start = std::chrono::steady_clock::now();
  if (auto ec = client_->flush()) return fail(ec, "ping");
  const double rtt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto caps = client_->capabilities();
  if (s_.json) {
    json_writer j;
    j.begin_object().string("address", s_.address).key("rtt_ms").decimal(rtt_ms, 3);
    j.number("session_id", client_->session_id()).number("max_frame", client_->server_max_frame());
    // As a string, like lease ids: a JSON reader may keep only 53 bits of a number.
    j.string("server_instance", std::to_string(client_->server_instance()))
        .string("server_version", client_->server_version());
    j.key("capabilities").begin_array();
    for (const auto& cap : caps) j.string(cap);
    j.end_array().end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  std::string cap_list;
  for (const auto& cap : caps) cap_list += (cap_list.empty() ? "" : " ") + cap;
  char rtt[32];
  std::snprintf(rtt, sizeof rtt, "%.3f ms", rtt_ms);
  out_ << format_table({{"address", s_.address},
                        {"round trip", rtt},
                        {"session", std::to_string(client_->session_id())},
                        {"server instance", std::to_string(client_->server_instance())},
                        {"server version", client_->server_version()},
                        {"max frame", std::to_string(client_->server_max_frame())},
                        {"capabilities", cap_list.empty() ? "(none)" : cap_list}},
                       {});
  return exit_ok;
}

int command::stats() {
  auto st = client_->stats();
  if (!st) return fail(st.error(), "stats");
  if (s_.json) {
    json_writer j;
    j.begin_object().string("address", s_.address).string("version", st->version);
    j.string("server_instance", std::to_string(st->instance_id));
    j.number("uptime_ms", static_cast<std::uint64_t>(st->uptime.count()));
    j.key("settings").begin_object();
    for (const auto& [name, value] : st->settings) j.string(name, value);
    j.end_object().key("counters").begin_object();
    for (const auto& v : st->values)
      if (v.counter) j.number(v.name, v.value);
    j.end_object().key("gauges").begin_object();
    for (const auto& v : st->values)
      if (!v.counter) j.number(v.name, v.value);
    j.end_object().end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows{
      {"address", s_.address},
      {"version", st->version},
      {"server instance", std::to_string(st->instance_id)},
      {"uptime", format_elapsed(static_cast<std::uint64_t>(st->uptime.count()))}};
  for (const auto& [name, value] : st->settings) rows.push_back({name, value});
  out_ << format_table(rows, {false, false}) << "\n";
  std::vector<std::vector<std::string>> counters{{"COUNTER", "TOTAL"}}, gauges{{"GAUGE", "NOW"}};
  for (const auto& v : st->values) (v.counter ? counters : gauges).push_back({v.name, std::to_string(v.value)});
  out_ << format_table(counters, {false, true}) << "\n" << format_table(gauges, {false, true});
  return exit_ok;
}

int command::conns() {
  auto page = client_->connections(*parse_order(s_.sort), s_.limit, s_.cursor);
  if (!page) return fail(page.error(), "conns");
  const auto& list = page->connections;
  const auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& x : items) out += (out.empty() ? "" : ",") + x;
    return out;
  };
  if (s_.json) {
    json_writer j;
    j.begin_object().number("total", page->total).number("next_cursor", page->next_cursor);
    j.key("conns").begin_array();
    for (const auto& c : list) {
      j.begin_object().number("id", c.id).string("name", c.name).string("client_id", c.client_id);
      j.string("principal", c.principal).string("address", c.address);
      j.number("age_ms", static_cast<std::uint64_t>(c.age.count()));
      j.number("idle_ms", static_cast<std::uint64_t>(c.idle.count()));
      j.key("capabilities").begin_array();
      for (const auto& cap : c.capabilities) j.string(cap);
      j.end_array().number("subscriptions", c.subscriptions).key("inboxes").begin_array();
      for (std::size_t i = 0; i < c.inboxes.size(); ++i) {
        j.begin_object().string("id", c.inboxes[i]);
        j.string("lease", std::to_string(i < c.inbox_leases.size() ? c.inbox_leases[i] : 0)).end_object();
      }
      j.end_array().number("pending_bytes", c.pending_bytes).number("dropped", c.dropped);
      j.number("bytes_in", c.bytes_in).number("bytes_out", c.bytes_out).boolean("tls", c.tls).end_object();
    }
    j.end_array().end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  if (list.empty()) {
    out_ << "no connections" << (s_.cursor ? " after this cursor" : "") << "\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"ID", "NAME", "PRINCIPAL", "ADDRESS", "AGE", "IDLE", "SUBS", "INBOXES",
                                              "PENDING B", "DROPPED", "IN B", "OUT B", "CAPABILITIES"}};
  for (const auto& c : list)
    rows.push_back({std::to_string(c.id), c.name.empty() ? "-" : c.name, c.principal.empty() ? "-" : c.principal,
                    c.address + (c.tls ? " (tls)" : ""), format_elapsed(static_cast<std::uint64_t>(c.age.count())),
                    format_elapsed(static_cast<std::uint64_t>(c.idle.count())), std::to_string(c.subscriptions),
                    c.inboxes.empty() ? "-" : join(c.inboxes), std::to_string(c.pending_bytes),
                    std::to_string(c.dropped), std::to_string(c.bytes_in), std::to_string(c.bytes_out),
                    join(c.capabilities)});
  out_ << format_table(rows, {true, false, false, false, true, true, true, false, true, true, true, true, false});
  out_ << list.size() << " of " << page->total << " connections";
  if (page->next_cursor != 0) out_ << "; next page: --cursor " << page->next_cursor;
  out_ << "\n";
  return exit_ok;
}

int command::drain() {
  std::chrono::milliseconds window{0};
  if (!s_.window.empty()) window = *parse_window(s_.window);  // checked before connecting
  if (auto ec = client_->drain(window)) return fail(ec, "drain");
  const std::string over = window.count() > 0 ? format_duration_ms(static_cast<std::uint64_t>(window.count()))
                                              : std::string("its --drain-window-ms");
  if (s_.json) {
    json_writer j;
    j.begin_object().string("address", s_.address).boolean("draining", true);
    j.number("window_ms", static_cast<std::uint64_t>(window.count()));  // 0 = the broker's default
    j.string("server_instance", std::to_string(client_->server_instance())).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "draining " << s_.address << " over " << over
       << ": new connections are refused (draining), open ones are closed in batches spread over the window, "
          "then the broker exits\n";
  return exit_ok;
}

namespace {

// The parser's own settings and the global options (before the commands:
// --help lists them first). Returns the check of what they set (the TLS
// options, credentials from the environment), which run() adds after the
// commands' own checks.
cli_context::check register_global_options(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  app.require_subcommand(1, 1);
  app.fallthrough();  // global flags may also follow the command
  app.set_version_flag("--version,-V", std::string(cli_name) + " " + SWITCHYARD_VERSION);
  app.add_option("--address", s.address, "broker host:port (also SWITCHYARD_ADDRESS)")
      ->envname("SWITCHYARD_ADDRESS")
      ->capture_default_str();
  app.add_option("--timeout-ms", s.timeout_ms, "connect and request timeout, ms")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_flag("--json", s.json,
               "print one JSON object on stdout (errors too: {\"error\":{...}}); sub and streams tail: one a "
               "message or record, a line each");
  auto* tls = app.add_flag("--tls", s.tls, "connect with TLS (a broker started with --tls-cert)");
  auto* tls_ca = app.add_option("--tls-ca", s.tls_ca,
                                "CA file (PEM) the broker's certificate must chain to (default: the system's CAs); "
                                "implies --tls");
  auto* tls_cert = app.add_option("--tls-cert", s.tls_cert,
                                  "this client's certificate chain (PEM), for a broker with --tls-verify-client; "
                                  "with --tls-key; implies --tls");
  auto* tls_key =
      app.add_option("--tls-key", s.tls_key, "the private key of --tls-cert (PEM, unencrypted); implies --tls");
  auto* tls_name = app.add_option("--tls-server-name", s.tls_server_name,
                                  "the name (DNS or IP) the broker's certificate must carry (default: the host of "
                                  "--address); implies --tls");
  auto* tls_insecure =
      app.add_flag("--tls-insecure", s.tls_insecure,
                   "FOR TESTS ONLY: do not verify the broker's certificate (encrypted, but anyone in the path can "
                   "read and change the traffic); implies --tls")
          ->excludes(tls_ca)
          ->excludes(tls_name);
  auto* token = app.add_option("--token", s.token,
                               "bearer token, for a broker with an auth file; prefer the environment variable "
                               "SWITCHYARD_TOKEN (command lines are visible to every user in ps)");
  app.add_option("--key-file", s.key_file,
                 "Ed25519 secret key file (made by keygen), for a broker with an auth file; also "
                 "SWITCHYARD_KEY_FILE")
      ->excludes(token);
  app.footer(
      "Global options may also follow the command. Credentials: --token or --key-file, else SWITCHYARD_TOKEN or "
      "SWITCHYARD_KEY_FILE from the environment (at most one of them). Exit codes: 0 ok, 1 usage error, 2 "
      "connection failed (or lost, or timed out, or TLS failed), 3 the broker answered an error (not_found, "
      "bad_request, ...), 4 the broker refused the credentials (unauthorized) or the operation (forbidden), 5 "
      "keygen / hash-token failed here (the file exists, cannot write), 6 send found no route.");
  return [&s, tls, tls_ca, tls_cert, tls_key, tls_name, tls_insecure]() -> std::string {
    s.tls = tls->count() + tls_ca->count() + tls_cert->count() + tls_key->count() + tls_name->count() +
                tls_insecure->count() >
            0;
    if (s.tls_cert.empty() != s.tls_key.empty()) return "--tls-cert and --tls-key go together (mTLS)";
    const bool local = s.command == "keygen" || s.command == "hash-token";
    if (!local && s.token.empty() && s.key_file.empty()) {
      // The environment, when no flag gave credentials.
      const char* env_token = std::getenv("SWITCHYARD_TOKEN");
      const char* env_key = std::getenv("SWITCHYARD_KEY_FILE");
      if (env_token && *env_token) s.token = env_token;
      if (env_key && *env_key) s.key_file = env_key;
      if (!s.token.empty() && !s.key_file.empty())
        return "SWITCHYARD_TOKEN and SWITCHYARD_KEY_FILE are both set: unset one, or give --token or --key-file";
    }
    return {};
  };
}

// ping (the first command --help lists).
void register_ping_command(CLI::App& app) {
  app.add_subcommand("ping", "round trip to the broker, its version, and the capabilities it grants");
}

// drain, stats, conns (the broker's administration).
void register_server_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* drain = app.add_subcommand(
      "drain",
      "drain the broker: refuse new connections, close the open ones in batches spread over the window (each "
      "told to reconnect elsewhere), then exit");
  drain->add_option("--window", s.window, "e.g. 30s, 500ms, 5m (default: the broker's --drain-window-ms)");

  app.add_subcommand("stats", "the broker's version, uptime, settings, and every counter and gauge");
  auto* conns = app.add_subcommand("conns", "the broker's open connections, a page at a time");
  conns
      ->add_option("--sort", s.sort,
                   "id (oldest first), idle, pending, dropped, subs, bytes-in or bytes-out (largest first)")
      ->capture_default_str();
  conns->add_option("--limit", s.limit, "at most this many (0 = the broker's default, 100; at most 1000)")
      ->check(whole_number)
      ->capture_default_str();
  conns->add_option("--cursor", s.cursor, "the next page: the cursor the page before printed (0 = the first page)")
      ->check(whole_number)
      ->capture_default_str();
  // Checked here so that nothing is sent.
  cli.add_check([&s]() -> std::string {
    if (!parse_order(s.sort))
      return "--sort must be id, idle, pending, dropped, subs, bytes-in or bytes-out; got '" + s.sort + "'";
    if (!s.window.empty() && !parse_window(s.window))
      return "--window must be a duration with a unit up to 24h, e.g. 30s, 500ms, 5m; got '" + s.window + "'";
    return {};
  });
}

// keygen, hash-token (made here: no broker).
void register_credentials_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* keygen = app.add_subcommand(
      "keygen",
      "make an Ed25519 key pair for a broker's auth file (no broker involved): the secret key goes to --out (or "
      "stdout), the public key (for ed25519_public_keys) is printed");
  keygen->add_option("--out", s.out_file,
                     "write the secret key file here: a new file of mode 0600 (an existing file is an error, never "
                     "replaced)");
  auto* hash = app.add_subcommand(
      "hash-token",
      "print the SHA-256 of a bearer token (an auth file's token_sha256): the token is one line on stdin (not "
      "echoed from a terminal) or --token (no broker involved)");
  hash->add_flag("--generate", s.generate, "make a random token (32 bytes, base64url) and print it with its hash");
}

// The message of a parse error. "A subcommand is required" when the word
// given is not a command: says which word, and what the commands are. A
// command that has no subcommands of its own lacks an argument instead:
// CLI11's message names it.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  std::string message = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    const CLI::App* level = &deepest_parsed(app);
    const auto rest = app.remaining(true);
    std::string known;
    for (const auto* c : level->get_subcommands({})) known += (known.empty() ? "" : ", ") + c->get_name();
    const std::string where = level == &app ? "" : level->get_name() + " ";
    if (known.empty()) {  // a command without its required argument: CLI11 names it
      message = command_path(app, *level) + ": " + message;
    } else {
      message = rest.empty() || rest.front().starts_with("-")
                    ? "a command is required: " + where + "{" + known + "}"
                    : "unknown command '" + where + rest.front() + "' (commands: " + known + ")";
    }
  }
  return message;
}

}  // namespace

int run(int argc, const char* const* argv, std::istream& in, std::ostream& out, std::ostream& err) {
  settings s;
  CLI::App app{"switchyard-cli: inspect and administer a Switchyard broker", std::string(cli_name)};
  cli_context cli(s);
  cli_context::check check_global = register_global_options(app, cli);
  // The commands, in the order --help lists them.
  register_ping_command(app);
  register_pubsub_commands(app, cli);
  register_send_command(app, cli);
  register_stream_commands(app, cli);
  register_routing_commands(app, cli);
  register_offer_commands(app, cli);
  register_server_commands(app, cli);
  register_cluster_commands(app, cli);
  register_credentials_commands(app, cli);
  cli.add_check(std::move(check_global));  // after the commands' own checks

  // --json decides the error format even when parsing fails.
  for (int i = 1; i < argc; ++i) s.json |= std::string_view(argv[i]) == "--json";
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help, --version
    return command(s, in, out, err).fail(exit_usage, "usage", parse_error_message(app, e) + " (see --help)");
  }
  if (const std::string problem = cli.finish(app); !problem.empty())
    return command(s, in, out, err).fail(exit_usage, "usage", problem);
  return command(s, in, out, err).run();
}

}  // namespace switchyard::admin

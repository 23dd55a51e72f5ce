#pragma once
// Shared pieces of switchyard-bench's workloads: settings, time, JSON output.

#include "switchyard/client.hpp"

#include <fmt/format.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <expected>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace switchyard::bench {

inline std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

inline void sleep_until_ns(std::uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000ull), static_cast<long>(t % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// A sender at a fixed rate: send i is due at start + i / rate. take(i)
// sleeps until it is due (never a busy wait) and returns the time it goes;
// late_max() is how late the latest one went.
class pacer {
 public:
  pacer(std::uint64_t start_ns, double rate) : start_(start_ns), interval_ns_(1e9 / rate) {}
  std::uint64_t take(std::uint64_t i) {
    const std::uint64_t due = start_ + static_cast<std::uint64_t>(static_cast<double>(i) * interval_ns_);
    std::uint64_t now = now_ns();
    if (now < due) {
      sleep_until_ns(due);
      now = now_ns();
    }
    late_max_ = std::max(late_max_, now - due);
    return now;
  }
  std::uint64_t late_max() const noexcept { return late_max_; }

 private:
  std::uint64_t start_;
  double interval_ns_;
  std::uint64_t late_max_ = 0;
};

// Progress on stderr, redrawn in place ('\r') and erased when done, only
// while stderr is a terminal. Redirected to a file or a pipe, stderr gets
// no progress at all: only the summary (with --json) and errors.
inline bool progress_shown() {
  static const bool shown = ::isatty(STDERR_FILENO) != 0;
  return shown;
}
template <class... Args>
void progress(fmt::format_string<Args...> format, Args&&... args) {
  if (!progress_shown()) return;
  const std::string line = fmt::format(format, std::forward<Args>(args)...);
  std::fprintf(stderr, "\r%s   ", line.c_str());
}
// Erases the progress line (nothing when progress is not shown).
inline void progress_done() {
  if (progress_shown()) std::fputs("\r\033[K", stderr);
}

inline std::uint64_t get_u64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void put_u64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }

// The p-th percentile (nearest rank) of `sorted` nanoseconds, in
// microseconds; NaN if empty.
inline double pct_us(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return NAN;
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

struct settings {
  std::string workload;
  std::string address;  // host:port; empty = start a server
  // fanout / latency: the subscribers connect here instead (another node
  // of a cluster: docs/cluster.md); empty = --address.
  std::string sub_address;
  std::string server_binary;
  int subs = 1;
  long count = 1'000'000;
  int size = 128;
  double rate = 20'000;
  double seconds = 5;
  int window = 256;
  int sub_threads = 0;  // 0 = one per subscriber, like the peers' subscriber threads
  double idle = 2.0;
  double timeout = 170;
  bool json = false;
  // TLS to the broker: a started broker gets a certificate made with the
  // openssl tool; with --address, tls_ca names the CA to trust.
  bool tls = false;
  std::string tls_ca;
  // Credentials for every client (client_options::token / key_file): from
  // --token / --key-file, or with --auth a token the bench makes and puts
  // into the auth file of the broker it starts (see auth_file.hpp).
  std::string token;
  std::string key_file;
  bool auth = false;
  // route / leases
  long users = 100'000;
  int gateways = 200;
  double route_rate = 0;  // route: sends per second, paced (0 = as fast as the client queues)
  long leases = 100'000;
  // durable
  std::string durability = "sync";
  double fsync_probe = 1.0;  // seconds of the data folder's disk probe (0 = none)
  // connections
  long connections = 1000;
  long declare = 0;  // bytes each connection's incomplete frame declares (0 = idle connections)
  // reconnect
  long clients = 5000;
  long rc_gateways = 500;
  int routes_per_gateway = 10;
  double max_hellos_per_s = 250;
  std::string rc_mode = "both";  // kill, drain or both
  double drain_window = 10;      // seconds
  double phase_timeout = 120;    // seconds per phase until every client is back
  int rc_loops = 2;              // client I/O threads
  // handshakes
  int hs_clients = 4;  // client threads connecting in a loop
  // offers
  long offer_count = 200'000;  // plain sends, then offers, per round
  long pending = 50'000;       // offers nobody acks, for the memory figure
  int rounds = 3;
};

// Minimal JSON object writer: keys are ours, strings are escaped.
class json_line {
 public:
  json_line& str(std::string_view k, std::string_view v) {
    key(k);
    out_ += '"';
    for (char c : v) {
      if (c == '"' || c == '\\')
        out_ += '\\', out_ += c;
      else if (static_cast<unsigned char>(c) < 0x20)
        out_ += fmt::format("\\u{:04x}", c);
      else
        out_ += c;
    }
    out_ += '"';
    return *this;
  }
  json_line& num(std::string_view k, double v) {
    key(k);
    if (!std::isfinite(v))
      out_ += "null";
    else if (std::fabs(v) >= 1000)
      out_ += fmt::format("{:.0f}", v);
    else
      out_ += fmt::format("{:.4g}", v);
    return *this;
  }
  json_line& integer(std::string_view k, long long v) {
    key(k);
    out_ += std::to_string(v);
    return *this;
  }
  json_line& raw(std::string_view k, std::string_view v) {
    key(k);
    out_ += v;
    return *this;
  }
  std::string done() const { return out_ + "}"; }

 private:
  void key(std::string_view k) {
    out_ += out_.size() > 1 ? ",\"" : "\"";
    out_ += k;
    out_ += "\":";
  }
  std::string out_ = "{";
};

// Resident set size of a process in bytes (0 if unknown).
inline std::uint64_t rss_bytes(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

class server_process;

struct target {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string tls_ca;    // non-empty: TLS, trusting this CA file
  std::string token;     // non-empty: every client's bearer token
  std::string key_file;  // non-empty: every client's Ed25519 key file
  // For a client asking for "admin" (the reconnect workload's drain): the
  // token of the admin principal of the bench's auth file (--auth); empty:
  // the same credentials as every client.
  std::string admin_token;
  // The arguments a broker the bench started got for TLS and its auth file:
  // a restarted broker (reconnect workload) gets them again.
  std::vector<std::string> server_security_args;
  // A broker of --address: not started by the bench, perhaps shared. The
  // workloads then give what they create (route keys, inboxes, streams) a
  // name under `prefix`, "bench.<8 hex digits>." unique to the run, so
  // they never touch anyone else's, and remove it at the end (leases
  // revoked, which removes their routes and inboxes; streams emptied: see
  // cleanup.cpp). Without --address the prefix is empty and nothing is
  // removed: the broker goes with its data folder.
  bool remote = false;
  // Where the subscribers of fanout / latency and the gateways of route
  // connect (--sub-address; 0: host and port above).
  std::string sub_host;
  std::uint16_t sub_port = 0;
  std::string prefix;
  // "host:port" as given (--address), for messages.
  std::string address;
  // The broker the bench started (nullptr with --address): its CPU time
  // (cpu_usage.hpp) and its data folder.
  const server_process* server = nullptr;
};

// A name the bench creates: `local` for a broker it started, under the
// run's prefix on a broker of --address.
inline std::string name_for(const target& t, std::string_view local) { return t.prefix + std::string(local); }

// The stream of the durable ("durable") and replay ("replay") workloads:
// "bench:<what>" on a broker the bench started (the name its auth file
// allows), "<prefix><what>" on a broker of --address.
inline std::string stream_for(const target& t, std::string_view what) {
  return t.remote ? t.prefix + std::string(what) : "bench:" + std::string(what);
}

// "none", "token" or "key": the credentials the clients present.
inline const char* auth_mode(const settings& s) {
  return !s.key_file.empty() ? "key" : (!s.token.empty() || s.auth) ? "token" : "none";
}

// Prints the summary and, with --json, the JSON line; both say whether TLS
// and authentication were on ("tls", "auth", and "auth_file": the bench
// started its broker with its own auth file, so every message's permission
// was checked).
inline void emit(const settings& s, const std::string& summary, json_line j) {
  j.raw("tls", s.tls ? "true" : "false").str("auth", auth_mode(s)).raw("auth_file", s.auth ? "true" : "false");
  const std::string security =
      fmt::format("  security: TLS {}, auth {}{}\n", s.tls ? "on" : "off", auth_mode(s),
                  s.auth ? " (the bench's auth file: permissions checked on every operation)" : "");
  std::fputs((summary + security).c_str(), s.json ? stderr : stdout);
  if (s.json) std::printf("%s\n", j.done().c_str());
  std::fflush(stdout);
}

inline int fail_line(const settings& s, std::string_view error, int code = 1) {
  json_line j;
  j.str("broker", "switchyard").str("workload", s.workload).str("error", error);
  emit(s, fmt::format("switchyard-bench {}: {}\n", s.workload, error), j);
  return code;
}

inline client_options options_for(const target& t, std::string name) {
  client_options o;
  o.host = t.host;
  o.port = t.port;
  o.client_name = std::move(name);
  o.max_pending_bytes = 4u << 20;
  o.token = t.token;
  o.key_file = t.key_file;
  if (!t.tls_ca.empty()) {
    o.tls.enabled = true;
    o.tls.ca_file = t.tls_ca;
  }
  return o;
}

// The broker's settings and figures (a Stats request, which needs the
// admin capability: with --auth the bench's admin principal asks), or
// unexpected(why not).
inline std::expected<server_stats, std::string> broker_stats(const target& t) {
  auto o = options_for(t, "bench-settings");
  o.admin = true;  // Stats is an admin request
  if (!t.admin_token.empty()) o.token = t.admin_token;
  auto c = client::connect(o);
  if (!c) return std::unexpected("connect: " + c.error().message());
  auto st = (*c)->stats();
  (*c)->close();
  if (!st) {
    if (st.error() == errc::not_supported || st.error() == errc::forbidden)
      return std::unexpected(
          std::string("reading the broker's settings needs the admin capability, not granted to "
                      "these credentials"));
    return std::unexpected("stats: " + st.error().message());
  }
  return std::move(*st);
}

inline std::optional<std::string> setting_of(const server_stats& st, std::string_view name) {
  for (const auto& [key, value] : st.settings)
    if (key == name) return value;
  return std::nullopt;
}

inline std::optional<std::uint64_t> value_of(const server_stats& st, std::string_view name) {
  for (const auto& v : st.values)
    if (v.name == name) return v.value;
  return std::nullopt;
}

// Workloads beside fanout/latency (their own files).
// Runs `count` requests on `c` with at most `window` unanswered, all issued
// from c's loop thread: the first `window` at once, then one more from each
// answer, like the peers' single-threaded pipelining clients (no thread
// hand-off between an answer and the next request). issue(i, answered)
// sends request i; its completion calls answered(ok) once (on the loop
// thread; `answered` is cheap to copy into it). Stops issuing after a
// failure or at `deadline_ns`. Returns once every issued request was
// answered or the connection is gone (then it closes `c`), calling
// progress(answered) about every 50 ms on the calling thread; `issue` is
// not called after it returns.
struct pipeline_state;
class answer_fn {
 public:
  explicit answer_fn(std::shared_ptr<pipeline_state> s) : s_(std::move(s)) {}
  void operator()(bool ok) const;

 private:
  std::shared_ptr<pipeline_state> s_;
};
using issue_fn = std::function<void(std::uint64_t i, answer_fn answered)>;
struct pipeline_result {
  std::uint64_t issued = 0, answered = 0, failed = 0;
  std::uint64_t t0_ns = 0, last_answer_ns = 0;
};
pipeline_result run_pipeline(client& c, std::uint64_t count, int window, std::uint64_t deadline_ns,
                             const issue_fn& issue, const std::function<void(std::uint64_t answered)>& progress);

// Runs `f` when the scope ends, however it ends.
class scope_exit {
 public:
  explicit scope_exit(std::function<void()> f) : f_(std::move(f)) {}
  scope_exit(const scope_exit&) = delete;
  scope_exit& operator=(const scope_exit&) = delete;
  ~scope_exit() {
    if (f_) f_();
  }

 private:
  std::function<void()> f_;
};

// Clean-up on a broker of --address (cleanup.cpp). Each returns summary
// lines ("  cleanup: ..." / "  left on the broker: ..."), never fails the run.
// Revokes each lease (id 0 = none, skipped) on the client that granted it,
// several requests in flight; a revoked lease takes its routes and inboxes
// with it. `ttl_text` says when those it could not revoke expire ("within
// 60 s").
std::string revoke_leases(const std::vector<std::pair<client*, lease_id>>& leases, std::string_view ttl_text);
// Empties `stream` (which the run created) by giving it a retention of its
// own (max age 1 ms; the broker trims in the background within about a
// second). No request deletes a stream: the empty stream stays, and the
// lines say so. Where the broker refuses (with an auth file, setting a
// retention is for admin principals), they give the switchyard-cli
// command that does it.
std::string empty_stream(client& c, const target& t, std::string_view stream);

int run_route(const settings& s, const target& t);
int run_leases(const settings& s, const target& t, int server_pid);
int run_durable(const settings& s, const target& t);
int run_replay(const settings& s, const target& t);
int run_connections(const settings& s, const target& t, int server_pid);
int run_handshakes(const settings& s, const target& t);
int run_offers(const settings& s, const target& t);
// `t`: its credentials, TLS and security arguments (host and port are the server's).
int run_reconnect(const settings& s, const target& t, server_process& server);

}  // namespace switchyard::bench

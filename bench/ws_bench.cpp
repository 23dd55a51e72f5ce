// switchyard-ws-bench: many WebSocket devices against switchyard-gateway
// (docs/benchmarks.md, "The WebSocket gateway").
//
//   load   N devices connect (at most --in-flight at once): connects per
//          second; the gateway's resident memory per idle socket (its
//          /proc/PID/status VmRSS before and after, --gateway-pid); then a
//          service sends to random users at --rate per second for
//          --seconds, each payload carrying its send time: send-to-device
//          latency p50/p99/p99.9 (one machine: one monotonic clock).
//   storm  N devices on gateway A (the first --gateway), then A is killed
//          (SIGKILL to --gateway-pid): each device reconnects with the
//          JavaScript client's policy (full jitter, base 500 ms, cap 30 s;
//          the same URL once, then the next one) to the gateways listed;
//          time from the kill until 99% are welcomed again (the welcome
//          comes once the user's route is held: routable), and the
//          attempts each took.
//
// Output: a summary on stdout, or one JSON object with --json (the storm's
// histograms for bench/plot-ws-storm.sh). Tokens are HS256 with --secret.
// A wss:// URL connects with TLS (the certificate checked against --ca if
// given, else not checked).

#include "common/asio.hpp"

#include "switchyard/client.hpp"

#include <CLI/CLI.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <fmt/format.h>
#include <sodium.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string base64url(std::string_view bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  out.resize(out.size() - 1);
  return out;
}

std::string hs256(const std::string& secret, const std::string& user) {
  const std::string input = base64url(R"({"alg":"HS256","typ":"JWT"})") + "." + base64url(R"({"sub":")" + user + "\"}");
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(input.data()), input.size());
  crypto_auth_hmacsha256_final(&st, mac);
  return input + "." + base64url({reinterpret_cast<const char*>(mac), sizeof mac});
}

struct endpoint {
  std::string host;
  std::string port;
  bool tls = false;
};

endpoint parse_url(const std::string& url) {  // ws://host:port/ws or wss://
  const auto start = url.find("://");
  const auto rest = url.substr(start == std::string::npos ? 0 : start + 3);
  const auto colon = rest.find(':');
  const auto slash = rest.find('/', colon);
  return {rest.substr(0, colon), rest.substr(colon + 1, slash - colon - 1), url.starts_with("wss://")};
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

struct options {
  std::vector<std::string> gateways{"ws://127.0.0.1:8080/ws"};
  std::string broker = "127.0.0.1:7878";
  std::string secret_file;
  int gateway_pid = 0;
  int devices = 10'000;
  int in_flight = 200;
  int rate = 20'000;
  int seconds = 10;
  std::string prefix = "user:";
  std::string ca_file;  // wss://: the CA the gateway's certificate must chain to (empty: not checked)
  bool json = false;
  unsigned seed = 1;
};

using plain_ws = websocket::stream<beast::tcp_stream>;
using tls_ws = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;

// One device: a WebSocket (plain or TLS, by its URL), reconnecting by the
// JavaScript client's policy.
struct device : std::enable_shared_from_this<device> {
  struct fleet* f;
  int index;
  std::string user;
  std::unique_ptr<plain_ws> ws;  // ws://
  std::unique_ptr<tls_ws> wss;   // wss://
  beast::flat_buffer in;
  asio::steady_timer retry;
  int attempts = 0;       // since the last welcome
  int attempt_count = 0;  // backoff exponent (JS: attempt)
  std::size_t url_index = 0;
  bool welcomed = false;
  clock_type::time_point welcomed_at{};
  int attempts_to_welcome = 0;
  device(struct fleet* fl, int i, asio::io_context& io);
  void connect();
  void failed();
  template <class Ws>
  void open(Ws& s, const endpoint& at);
  template <class Ws>
  void upgrade(Ws& s, const endpoint& at);
  template <class Ws>
  void read(Ws& s);
};

struct fleet {
  asio::io_context io;
  asio::ssl::context tls{asio::ssl::context::tls_client};
  options o;
  std::vector<std::shared_ptr<device>> devices;
  std::vector<endpoint> urls;
  std::mt19937_64 rng;
  std::string secret;
  int connecting = 0;
  int next_to_start = 0;
  std::atomic<int> welcomed{0};
  std::atomic<int> welcomed_in_storm{0};  // welcomes after the kill
  bool storm = false;
  // Latency samples (us), written on the io thread.
  std::vector<double> latencies;
  std::uint64_t received = 0;

  void start_more() {
    while (connecting < o.in_flight && next_to_start < static_cast<int>(devices.size())) {
      ++connecting;
      devices[next_to_start++]->connect();
    }
  }
};

device::device(fleet* fl, int i, asio::io_context& io) : f(fl), index(i), user("d" + std::to_string(i)), retry(io) {}

void device::connect() {
  ++attempts;
  const auto& at = f->urls[url_index % f->urls.size()];
  ws.reset();
  wss.reset();
  if (at.tls) {
    wss = std::make_unique<tls_ws>(f->io, f->tls);
    open(*wss, at);
  } else {
    ws = std::make_unique<plain_ws>(f->io);
    open(*ws, at);
  }
}

// TCP connect, the TLS handshake for wss://, the upgrade, the hello. `s`
// is owned by this device and replaced only by the next connect(), after
// this chain ended.
template <class Ws>
void device::open(Ws& s, const endpoint& at) {
  beast::get_lowest_layer(s).expires_after(10s);
  beast::get_lowest_layer(s).async_connect(
      asio::ip::tcp::endpoint(asio::ip::make_address(at.host), static_cast<unsigned short>(std::stoi(at.port))),
      [self = shared_from_this(), &s, at](beast::error_code ec) {
        if (ec) return self->failed();
        // As browsers do: a TLS handshake's last flight and the upgrade
        // request go out at once, not after a delayed ACK (Nagle).
        beast::get_lowest_layer(s).socket().set_option(asio::ip::tcp::no_delay(true), ec);
        if constexpr (std::is_same_v<Ws, tls_ws>) {
          s.next_layer().async_handshake(asio::ssl::stream_base::client, [self, &s, at](beast::error_code ec2) {
            if (ec2) return self->failed();
            self->upgrade(s, at);
          });
        } else {
          self->upgrade(s, at);
        }
      });
}

template <class Ws>
void device::upgrade(Ws& s, const endpoint& at) {
  s.async_handshake(at.host + ":" + at.port, "/ws", [self = shared_from_this(), &s](beast::error_code ec2) {
    if (ec2) return self->failed();
    beast::get_lowest_layer(s).expires_never();
    const std::string hello = R"({"t":"hello","token":")" + hs256(self->f->secret, self->user) + "\"}";
    s.async_write(asio::buffer(hello),
                  [self, &s, keep = std::make_shared<std::string>(hello)](beast::error_code ec3, std::size_t) {
                    if (ec3) return self->failed();
                    self->read(s);
                  });
  });
}

template <class Ws>
void device::read(Ws& s) {
  s.async_read(in, [self = shared_from_this(), &s](beast::error_code ec, std::size_t) {
    if (ec) return self->failed();
    const std::string_view text(static_cast<const char*>(self->in.cdata().data()), self->in.size());
    if (!self->welcomed && text.find(R"("t":"welcome")") != std::string_view::npos) {
      self->welcomed = true;
      self->welcomed_at = clock_type::now();
      self->attempts_to_welcome = self->attempts;
      self->attempts = 0;
      self->attempt_count = 0;
      ++self->f->welcomed;
      if (self->f->storm) ++self->f->welcomed_in_storm;
      if (!self->f->storm) {
        --self->f->connecting;
        self->f->start_more();
      }
    } else if (const auto at = text.find(R"("data":"t=)"); at != std::string_view::npos) {
      const auto sent = std::stoll(std::string(text.substr(at + 10, 20)));
      const auto now = clock_type::now().time_since_epoch().count();
      self->f->latencies.push_back(static_cast<double>(now - sent) / 1000.0);
      ++self->f->received;
    }
    self->in.consume(self->in.size());
    self->read(s);
  });
}

// The JavaScript client's policy: uniform(0, min(30 s, 500 ms * 2^n)); the
// same URL once after a lost connection, the next one from the second try.
void device::failed() {
  if (welcomed) {
    welcomed = false;
    --f->welcomed;
  }
  if (!f->storm) {  // load: a failed first connect is an error, counted by the missing welcome
    --f->connecting;
    f->start_more();
    return;
  }
  const double ceiling = std::min(30'000.0, 500.0 * std::pow(2.0, std::min(attempt_count, 30)));
  const auto delay =
      std::chrono::milliseconds(static_cast<long>(std::uniform_real_distribution<double>(0, ceiling)(f->rng)));
  ++attempt_count;
  if (attempt_count > 1) ++url_index;
  retry.expires_after(delay);
  retry.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->connect();
  });
}

void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Runs the io_context on a thread while `body` runs on this one.
template <class F>
void with_io(fleet& f, F body) {
  auto work = asio::make_work_guard(f.io);
  std::thread t([&] { f.io.run(); });
  body();
  work.reset();
  f.io.stop();
  t.join();
}

bool wait_for(const std::function<bool()>& pred, std::chrono::seconds limit) {
  const auto end = clock_type::now() + limit;
  while (clock_type::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

int run_load(fleet& f) {
  const long rss_before = f.o.gateway_pid ? rss_kib(f.o.gateway_pid) : -1;
  double connect_s = 0;
  long rss_after = -1;
  double sent = 0;
  with_io(f, [&] {
    const auto t0 = clock_type::now();
    asio::post(f.io, [&] { f.start_more(); });
    wait_for([&] { return f.welcomed == f.o.devices; }, 300s);
    connect_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::this_thread::sleep_for(2s);  // settled
    if (f.o.gateway_pid) rss_after = rss_kib(f.o.gateway_pid);
    if (f.o.rate <= 0 || f.o.seconds <= 0) return;
    // A service, paced: one send every 1/rate s, in bursts per millisecond.
    switchyard::client_options co;
    co.addresses = {f.o.broker};
    co.client_name = "ws-bench service";
    auto service = switchyard::client::connect(co);
    if (!service) throw std::runtime_error("cannot reach the broker: " + service.error().message());
    std::mt19937_64 pick(f.o.seed);
    const auto start = clock_type::now();
    const auto end = start + std::chrono::seconds(f.o.seconds);
    std::uint64_t n = 0;
    while (clock_type::now() < end) {
      const auto due =
          static_cast<std::uint64_t>(std::chrono::duration<double>(clock_type::now() - start).count() * f.o.rate);
      for (; n < due; ++n) {
        const auto user = f.o.prefix + "d" + std::to_string(pick() % static_cast<std::uint64_t>(f.o.devices));
        const auto payload = fmt::format("t={:020}", clock_type::now().time_since_epoch().count());
        (void)(*service)->send_nowait(user, std::as_bytes(std::span(payload.data(), payload.size())));
      }
      std::this_thread::sleep_for(200us);
    }
    sent = static_cast<double>(n);
    (void)(*service)->flush();
    std::this_thread::sleep_for(1s);
  });
  const double per_socket =
      rss_before >= 0 && rss_after >= 0 ? static_cast<double>(rss_after - rss_before) * 1024.0 / f.o.devices : -1;
  const double p50 = percentile(f.latencies, 50), p99 = percentile(f.latencies, 99),
               p999 = percentile(f.latencies, 99.9);
  if (f.o.json) {
    std::printf(R"({"workload":"ws-load","devices":%d,"welcomed":%d,"connect_s":%.3f,"connects_per_s":%.0f,)"
                R"("gateway_rss_before_kib":%ld,"gateway_rss_after_kib":%ld,"bytes_per_idle_socket":%.0f,)"
                R"("rate":%d,"seconds":%d,"sent":%.0f,"received":%llu,"p50_us":%.1f,"p99_us":%.1f,"p999_us":%.1f})"
                "\n",
                f.o.devices, f.welcomed.load(), connect_s, f.o.devices / connect_s, rss_before, rss_after, per_socket,
                f.o.rate, f.o.seconds, sent, static_cast<unsigned long long>(f.received), p50, p99, p999);
  } else {
    std::printf("%d devices welcomed in %.2f s (%.0f connects/s)\n", f.welcomed.load(), connect_s,
                f.o.devices / connect_s);
    if (per_socket >= 0)
      std::printf("gateway RSS %ld -> %ld KiB: %.0f bytes per idle socket\n", rss_before, rss_after, per_socket);
    if (sent > 0)
      std::printf("%.0f sends at %d/s: %llu received; latency p50 %.1f us, p99 %.1f us, p99.9 %.1f us\n", sent,
                  f.o.rate, static_cast<unsigned long long>(f.received), p50, p99, p999);
  }
  return f.welcomed == f.o.devices ? 0 : 1;
}

int run_storm(fleet& f) {
  if (!f.o.gateway_pid) throw std::runtime_error("storm needs --gateway-pid (the gateway to kill)");
  if (f.urls.size() < 2) throw std::runtime_error("storm needs two --gateway URLs (the first is killed)");
  double t99 = -1;
  clock_type::time_point killed{};
  with_io(f, [&] {
    asio::post(f.io, [&] { f.start_more(); });
    wait_for([&] { return f.welcomed == f.o.devices; }, 300s);
    std::this_thread::sleep_for(1s);
    asio::post(f.io, [&] { f.storm = true; });
    std::this_thread::sleep_for(100ms);
    killed = clock_type::now();
    ::kill(f.o.gateway_pid, SIGKILL);
    // The devices see the connection end and come back on their own.
    wait_for([&] { return f.welcomed_in_storm == f.o.devices; }, 120s);
    std::this_thread::sleep_for(500ms);
  });
  std::vector<double> back;
  std::vector<int> attempts;
  for (const auto& d : f.devices) {
    if (!d->welcomed || d->welcomed_at < killed) continue;
    back.push_back(std::chrono::duration<double>(d->welcomed_at - killed).count());
    attempts.push_back(d->attempts_to_welcome);
  }
  std::sort(back.begin(), back.end());
  const auto need = static_cast<std::size_t>(std::ceil(0.99 * f.o.devices));
  if (back.size() >= need) t99 = back[need - 1];
  double mean_attempts = 0;
  for (int a : attempts) mean_attempts += a;
  if (!attempts.empty()) mean_attempts /= static_cast<double>(attempts.size());
  const double bin = 0.25;
  std::vector<int> hist(static_cast<std::size_t>(back.empty() ? 1 : back.back() / bin + 1), 0);
  for (double t : back) ++hist[static_cast<std::size_t>(t / bin)];
  std::vector<int> by_attempts(12, 0);
  for (int a : attempts) ++by_attempts[std::min<std::size_t>(static_cast<std::size_t>(a), 11)];
  if (f.o.json) {
    std::string h, ba;
    for (auto v : hist) h += (h.empty() ? "" : ",") + std::to_string(v);
    for (auto v : by_attempts) ba += (ba.empty() ? "" : ",") + std::to_string(v);
    std::printf(R"({"workload":"ws-storm","devices":%d,"back":%zu,"t99_s":%.3f,"attempts_mean":%.2f,"bin_s":%.2f,)"
                R"("histogram":[%s],"attempts_histogram":[%s]})"
                "\n",
                f.o.devices, back.size(), t99, mean_attempts, bin, h.c_str(), ba.c_str());
  } else {
    std::printf("%zu of %d devices back on the other gateway; 99%% after %.2f s; %.2f attempts each on average\n",
                back.size(), f.o.devices, t99, mean_attempts);
  }
  return t99 >= 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"switchyard-ws-bench: WebSocket devices against switchyard-gateway", "switchyard-ws-bench"};
  app.set_version_flag("--version", std::string(SWITCHYARD_VERSION));
  options o;
  std::string mode;
  app.add_option("mode", mode, "load or storm")->required()->check(CLI::IsMember({"load", "storm"}));
  app.add_option("--gateway", o.gateways, "gateway URL(s), ws://host:port/ws (storm: the first is killed)");
  app.add_option("--broker", o.broker, "the broker (load: the service that sends)");
  app.add_option("--secret", o.secret_file, "the gateway's --jwt-secret-file")->required();
  app.add_option("--gateway-pid", o.gateway_pid,
                 "the (first) gateway's pid: its memory (load), the one killed (storm)");
  app.add_option("--devices", o.devices, "devices")->capture_default_str();
  app.add_option("--in-flight", o.in_flight, "connects under way at once (load)")->capture_default_str();
  app.add_option("--rate", o.rate, "sends per second after connecting (load; 0: none)")->capture_default_str();
  app.add_option("--seconds", o.seconds, "how long to send (load)")->capture_default_str();
  app.add_option("--seed", o.seed, "the randomness (jitter, users picked)")->capture_default_str();
  app.add_option("--ca", o.ca_file,
                 "wss://: the CA file the gateway's certificate must chain to (default: not checked)");
  app.add_flag("--json", o.json, "one JSON object on stdout");
  CLI11_PARSE(app, argc, argv);
  if (sodium_init() < 0) return 2;
  raise_fd_limit();
  fleet f;
  f.o = o;
  f.rng.seed(o.seed);
  if (!o.ca_file.empty()) {
    f.tls.load_verify_file(o.ca_file);
    f.tls.set_verify_mode(asio::ssl::verify_peer);
  }
  for (const auto& g : o.gateways) f.urls.push_back(parse_url(g));
  std::ifstream in(o.secret_file);
  std::getline(in, f.secret);
  for (int i = 0; i < o.devices; ++i) f.devices.push_back(std::make_shared<device>(&f, i, f.io));
  try {
    return mode == "load" ? run_load(f) : run_storm(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-ws-bench: %s\n", e.what());
    return 2;
  }
}

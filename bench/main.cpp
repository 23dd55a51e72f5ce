// switchyard-bench: throughput and latency workloads over the client library,
// with the same definitions, flags and JSON fields as ../shared/peers (see
// its README), so Switchyard can sit in the same table as NATS and Redis.
//
//   switchyard-bench fanout  --subs S --count N --size P [--json]
//   switchyard-bench latency --rate R --seconds D --size P [--json]
//   switchyard-bench durable --count N --size P --window W [--durability M] [--fsync-probe S] [--json]
//   switchyard-bench replay  --count N --size P [--json]
//   switchyard-bench route   --users U --gateways G --count N --size P --window W [--json]
//   switchyard-bench leases  --leases L --window W [--json]
//   switchyard-bench connections --count C [--declare BYTES] [--json]
//   switchyard-bench handshakes --clients C --seconds D [--tls] [--json]
//   switchyard-bench reconnect --clients C --max-hellos-per-s R [--mode kill|drain|both] [--json]
//   switchyard-bench offers  --users U --gateways G --count N --window W --rounds R --rate R --seconds D
//                            --pending P [--json]
//     offers with delivery receipts against plain sends, in one run
//     (offers_workload.cpp): (a) throughput of each and their ratio,
//     R alternating rounds of N each; (b) receipt latency (send call ->
//     receipt) at a fixed rate; (c) broker memory per pending offer
//     (RSS and the offer_bytes gauge, P offers nobody acks).
//
// Without --address it starts its own switchyard-server on 127.0.0.1 (a
// fresh one per run). Progress goes to stderr while it is a terminal (none
// when it is redirected); the summary to stdout, or to stderr with --json,
// where stdout's last line is the JSON result. Every workload also reports
// the CPU time of the bench and of the broker it started per message
// (cpu_usage.hpp); route checks where each message went (route_check.hpp).
// Security, with any workload: --tls (a started broker gets a throw-away
// certificate), --auth (a started broker gets an auth file, every client
// its token: bench/auth_file.hpp), or --token / --key-file for a broker of
// your own.

#include "bench/auth_file.hpp"
#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "bench/route_check.hpp"
#include "bench/server_process.hpp"
#include "bench/temp_folder.hpp"
#include "common/latency_probe.hpp"
#include "switchyard/client.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace switchyard::bench;
using switchyard::client;
using switchyard::client_options;
using switchyard::event_loop;

constexpr std::uint64_t sentinel_seq = std::numeric_limits<std::uint64_t>::max();
constexpr std::string_view channel = "bench.fanout";

enum class end_reason { none, count, sentinel, idle, error, deadline };
const char* end_name(end_reason e) {
  switch (e) {
    case end_reason::count:
      return "count";
    case end_reason::sentinel:
      return "sentinel";
    case end_reason::idle:
      return "idle";
    case end_reason::error:
      return "error";
    case end_reason::deadline:
      return "deadline";
    default:
      return "none";
  }
}

// One subscriber's tallies. Written by its handler on the loop thread; the
// main thread reads `recv`, `last_ns` and `ended` while it waits.
struct subscriber {
  std::unique_ptr<client> conn;
  std::uint64_t expect = 0;
  std::atomic<std::uint64_t> recv{0};
  std::atomic<std::uint64_t> last_ns{0};
  std::atomic<int> ended{static_cast<int>(end_reason::none)};
  std::uint64_t first_ns = 0;
  std::uint64_t next_seq = 0;
  std::uint64_t gaps = 0;
  std::uint64_t reorder = 0;
  std::vector<std::int64_t> latencies;  // ns, latency workload only
  bool latency_mode = false;

  void on_message(const switchyard::message& m) {
    if (ended.load(std::memory_order_relaxed) != static_cast<int>(end_reason::none) || m.payload.size() < 8) return;
    const std::uint64_t t = now_ns();
    const std::uint64_t seq = get_u64(m.payload.data());
    if (seq == sentinel_seq) {
      ended = static_cast<int>(end_reason::sentinel);
      return;
    }
    const auto n = recv.load(std::memory_order_relaxed);
    if (n == 0) first_ns = t;
    if (seq > next_seq)
      ++gaps;
    else if (seq < next_seq)
      ++reorder;
    next_seq = seq + 1;
    if (latency_mode && m.payload.size() >= 16 && latencies.size() < latencies.capacity())
      latencies.push_back(static_cast<std::int64_t>(t - get_u64(m.payload.data() + 8)));
    last_ns.store(t, std::memory_order_relaxed);
    recv.store(n + 1, std::memory_order_release);
    if (n + 1 >= expect) ended = static_cast<int>(end_reason::count);
  }
};

// fanout / latency: S subscribers (one for latency), one publisher.
int run_pubsub(const settings& s, const target& t, bool latency) {
  const int nsubs = latency ? 1 : s.subs;
  const std::uint64_t count =
      latency ? std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(s.rate * s.seconds)))
              : static_cast<std::uint64_t>(s.count);
  // Each subscriber reads on its own I/O thread by default, as the peers'
  // subscriber threads do; --sub-threads N shares N threads among them.
  const int threads = s.sub_threads > 0 ? std::min(s.sub_threads, nsubs) : nsubs;
  std::vector<std::shared_ptr<event_loop>> sub_loops;
  for (int i = 0; i < threads; ++i) sub_loops.push_back(std::make_shared<event_loop>());
  std::vector<std::unique_ptr<subscriber>> subs;
  std::atomic<std::uint64_t> dropped{0};
  for (int i = 0; i < nsubs; ++i) {
    auto sub = std::make_unique<subscriber>();
    sub->expect = count;
    sub->latency_mode = latency;
    if (latency) sub->latencies.reserve(count + 16);
    auto o = options_for(t, fmt::format("bench-sub-{}", i));
    if (t.sub_port != 0) o.host = t.sub_host, o.port = t.sub_port;
    o.on_dropped = [&dropped](std::uint64_t n) { dropped += n; };
    auto c = client::connect(o, sub_loops[static_cast<std::size_t>(i) % sub_loops.size()]);
    if (!c) return fail_line(s, "subscriber connect: " + c.error().message());
    subscriber* raw = sub.get();
    auto id = (*c)->subscribe(channel, [raw](const switchyard::message& m) { raw->on_message(m); });
    if (!id) return fail_line(s, "subscribe: " + id.error().message());
    sub->conn = std::move(*c);
    subs.push_back(std::move(sub));
  }

  auto o = options_for(t, "bench-pub");
  o.write_immediately = latency;
  auto pub = client::connect(o);
  if (!pub) return fail_line(s, "publisher connect: " + pub.error().message());

  std::vector<std::byte> buf(static_cast<std::size_t>(s.size), std::byte{'x'});
  put_u64(buf.data() + 8, 0);
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(s.timeout * 1e9);

  // Progress and end detection run beside the publisher.
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> t0{0};
  std::thread watcher([&] {
    std::uint64_t next_progress = now_ns() + 1'000'000'000ull;
    // Ends once every subscriber has ended (count, sentinel, idle or the deadline).
    for (;;) {
      std::this_thread::sleep_for(5ms);
      const std::uint64_t t = now_ns();
      const std::uint64_t start = t0.load();
      bool all = true;
      std::uint64_t total = 0;
      for (auto& sub : subs) {
        total += sub->recv.load(std::memory_order_relaxed);
        if (sub->ended != static_cast<int>(end_reason::none)) continue;
        all = false;
        if (t > deadline)
          sub->ended = static_cast<int>(end_reason::deadline);
        else if (start) {
          const std::uint64_t base = std::max(sub->last_ns.load(), start);
          if (t > base + static_cast<std::uint64_t>(s.idle * 1e9)) sub->ended = static_cast<int>(end_reason::idle);
        }
      }
      if (all && start) break;
      if (t >= next_progress) {
        progress("{}: published {}/{}, delivered {}", s.workload, sent.load(), count, total);
        next_progress = t + 1'000'000'000ull;
      }
    }
    progress_done();
  });

  std::string pub_error;
  const cpu_meter cpu(t.server);
  const std::uint64_t start = now_ns();
  t0 = start;
  pacer pace(start, s.rate);  // latency only
  if (!latency) {
    for (std::uint64_t i = 0; i < count; ++i) {
      put_u64(buf.data(), i);
      if (auto ec = (*pub)->publish(channel, buf)) {
        pub_error = ec.message();
        break;
      }
      sent.store(i + 1, std::memory_order_relaxed);
      if ((i & 0xffff) == 0 && now_ns() > deadline) {
        pub_error = "publisher hit deadline";
        break;
      }
    }
  } else {
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t now = pace.take(i);
      switchyard::probe::mark(switchyard::probe::point::pub_call, i, now);  // --latency-probe builds only
      put_u64(buf.data(), i);
      put_u64(buf.data() + 8, now);
      if (auto ec = (*pub)->publish(channel, buf)) {
        pub_error = ec.message();
        break;
      }
      sent.store(i + 1, std::memory_order_relaxed);
      if (now > deadline) {
        pub_error = "publisher hit deadline";
        break;
      }
    }
  }
  const std::uint64_t t_sent = now_ns();
  put_u64(buf.data(), sentinel_seq);
  if (pub_error.empty()) {
    if (auto ec = (*pub)->publish(channel, buf))
      pub_error = ec.message();
    else if (auto ec2 = (*pub)->flush())
      pub_error = "flush: " + ec2.message();
  }
  const std::uint64_t t_pub_end = now_ns();
  watcher.join();
  std::uint64_t received = 0;
  for (auto& sub : subs) received += sub->recv.load();
  const cpu_cost cost = cpu.stop(received, latency ? "received message" : "delivered message");

  // Stop the subscribers' I/O before reading their tallies.
  for (auto& sub : subs) sub->conn->close();
  (*pub)->close();

  std::uint64_t total = 0, last = 0, gaps = 0, reorder = 0;
  bool any_error = false;
  std::string recv_list = "[", ends = "[";
  for (std::size_t i = 0; i < subs.size(); ++i) {
    auto& sub = *subs[i];
    total += sub.recv;
    last = std::max<std::uint64_t>(last, sub.last_ns);
    gaps += sub.gaps;
    reorder += sub.reorder;
    const auto e = static_cast<end_reason>(sub.ended.load());
    any_error |= e == end_reason::error || e == end_reason::deadline;
    recv_list += fmt::format("{}{}", i ? "," : "", sub.recv.load());
    ends += fmt::format("{}\"{}\"", i ? "," : "", end_name(e));
  }
  recv_list += "]";
  ends += "]";

  json_line j;
  j.str("broker", "switchyard").str("workload", s.workload);
  std::string summary;
  if (!latency) {
    const double pub_secs = static_cast<double>(t_pub_end - start) / 1e9;
    const double del_secs = last > start ? static_cast<double>(last - start) / 1e9 : NAN;
    const double expected = static_cast<double>(count) * nsubs;
    const double loss = 1.0 - static_cast<double>(total) / expected;
    j.integer("subs", nsubs).integer("n", static_cast<long long>(count)).integer("size", s.size);
    j.str("client",
          fmt::format("switchyard client-lib: batched publish (loop-thread writer), subscribers on {} I/O thread(s)",
                      threads));
    j.integer("sent", static_cast<long long>(sent.load()));
    j.num("pub_secs", pub_secs).num("pub_rate", static_cast<double>(sent.load()) / pub_secs);
    j.num("pub_call_secs", static_cast<double>(t_sent - start) / 1e9);
    j.raw("recv", recv_list).integer("recv_total", static_cast<long long>(total));
    j.num("delivered_secs", del_secs).num("delivered_rate", static_cast<double>(total) / del_secs);
    j.num("loss", loss)
        .integer("gaps", static_cast<long long>(gaps))
        .integer("reorder", static_cast<long long>(reorder));
    summary = fmt::format(
        "fanout: {} subscriber(s), {} messages of {} B\n"
        "  publish:   {:.0f} msg/s ({:.3f} s until the broker confirmed)\n"
        "  delivered: {:.0f} msg/s ({} of {}, loss {:.2f}%, gaps {}, reorder {})\n",
        nsubs, count, s.size, static_cast<double>(sent.load()) / pub_secs, pub_secs,
        static_cast<double>(total) / del_secs, total, static_cast<std::uint64_t>(expected), loss * 100, gaps, reorder);
  } else {
    auto& lat = subs[0]->latencies;
    std::sort(lat.begin(), lat.end());
    double sum = 0;
    for (auto v : lat) sum += static_cast<double>(v);
    const double loss = 1.0 - static_cast<double>(subs[0]->recv) / static_cast<double>(count);
    j.integer("subs", 1).num("rate", s.rate).num("secs", s.seconds).integer("size", s.size);
    j.str("client", "switchyard client-lib: publish writes immediately, subscriber on its own I/O thread");
    j.integer("sent", static_cast<long long>(sent.load())).integer("recv", static_cast<long long>(subs[0]->recv));
    j.num("loss", loss)
        .num("achieved_rate", static_cast<double>(sent.load()) / (static_cast<double>(t_sent - start) / 1e9));
    j.num("pub_late_max_us", static_cast<double>(pace.late_max()) / 1000.0)
        .integer("samples", static_cast<long long>(lat.size()));
    j.num("min_us", lat.empty() ? NAN : static_cast<double>(lat.front()) / 1000.0);
    j.num("mean_us", lat.empty() ? NAN : sum / static_cast<double>(lat.size()) / 1000.0);
    j.num("p50_us", pct_us(lat, 50)).num("p90_us", pct_us(lat, 90)).num("p99_us", pct_us(lat, 99));
    j.num("p999_us", pct_us(lat, 99.9)).num("max_us", lat.empty() ? NAN : static_cast<double>(lat.back()) / 1000.0);
    j.integer("gaps", static_cast<long long>(gaps)).integer("reorder", static_cast<long long>(reorder));
    summary = fmt::format(
        "latency: {} msg/s for {} s, {} B, one-way (publish call -> handler)\n"
        "  p50 {:.1f} us  p90 {:.1f} us  p99 {:.1f} us  p99.9 {:.1f} us  max {:.1f} us\n"
        "  received {}/{} (loss {:.2f}%), publisher late by at most {:.1f} us\n",
        s.rate, s.seconds, s.size, pct_us(lat, 50), pct_us(lat, 90), pct_us(lat, 99), pct_us(lat, 99.9),
        lat.empty() ? NAN : static_cast<double>(lat.back()) / 1000.0, subs[0]->recv.load(), count, loss * 100,
        static_cast<double>(pace.late_max()) / 1000.0);
  }
  j.raw("sub_end", ends);
  j.raw("server", fmt::format("{{\"dropped\":{}}}", dropped.load())).raw("cpu", cost.json());
  if (!pub_error.empty()) j.str("errors", "pub: " + pub_error);
  emit(s, summary + cost.summary(), j);
  return (!pub_error.empty() || any_error) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  CLI::App app{"switchyard-bench: Switchyard throughput and latency workloads (definitions as in shared/peers)",
               "switchyard-bench"};
  app.require_subcommand(1, 1);
  app.add_option("--address", s.address, "broker host:port (default: start a fresh server on 127.0.0.1)");
  app.add_option("--server", s.server_binary, "switchyard-server binary to start (default: the one in this build)");
  app.add_flag("--json", s.json, "print one JSON line (the last line of stdout)");
  app.add_flag("--tls", s.tls, "TLS to the broker (a started broker gets a self-signed certificate made with openssl)");
  app.add_option("--tls-ca", s.tls_ca, "with --tls and --address: the CA file to trust");
  auto* token = app.add_option("--token", s.token,
                               "bearer token every client presents (a broker with an auth file; also "
                               "SWITCHYARD_TOKEN, which ps does not show)");
  auto* key_file = app.add_option("--key-file", s.key_file,
                                  "Ed25519 key file (switchyard-cli keygen) every client signs in with (also "
                                  "SWITCHYARD_KEY_FILE)")
                       ->excludes(token);
  app.add_flag("--auth", s.auth,
               "start the broker with an auth file (a token for every client, permissions on every operation "
               "checked per message: several allow patterns and a deny pattern, as an operator would write them)")
      ->excludes(token)
      ->excludes(key_file);
  app.add_option("--timeout", s.timeout, "hard limit for the whole run, seconds")->capture_default_str();

  auto* fanout = app.add_subcommand("fanout", "S subscribers, one publisher sending N messages as fast as it can");
  fanout->add_option("--subs", s.subs, "subscriber connections")->check(CLI::Range(1, 64))->capture_default_str();
  fanout->add_option("--count", s.count, "messages to publish")
      ->check(CLI::Range(1L, 100'000'000L))
      ->capture_default_str();
  fanout->add_option("--size", s.size, "payload bytes (>= 16)")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  fanout->add_option("--sub-threads", s.sub_threads, "I/O threads shared by the subscribers (0 = one each)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  fanout->add_option("--idle", s.idle, "a subscriber stops after this many seconds without a message")
      ->capture_default_str();

  auto* latency =
      app.add_subcommand("latency", "one subscriber, one publisher at a fixed rate; one-way latency percentiles");
  latency->add_option("--rate", s.rate, "messages per second")->check(CLI::Range(1.0, 1e7))->capture_default_str();
  latency->add_option("--seconds", s.seconds, "duration")->check(CLI::Range(0.001, 600.0))->capture_default_str();
  latency->add_option("--size", s.size, "payload bytes (>= 16)")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  for (auto* sub : {fanout, latency})
    sub->add_option("--sub-address", s.sub_address,
                    "the subscribers connect to this host:port (another node of a cluster: docs/cluster.md); needs "
                    "--address");

  auto* durable = app.add_subcommand("durable", "acknowledged appends to the sequence log, at most W unacknowledged");
  durable->add_option("--count", s.count, "appends")->check(CLI::Range(1L, 100'000'000L))->capture_default_str();
  durable->add_option("--size", s.size, "payload bytes")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  durable->add_option("--window", s.window, "unacknowledged appends at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  durable
      ->add_option("--fsync-probe", s.fsync_probe,
                   "after the run, time 4 KiB append + fdatasync in the broker's data folder for this many seconds "
                   "(0 = no probe)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  auto* durability = durable
                         ->add_option("--durability", s.durability,
                                      "the mode of the server the bench starts: sync, batch or none (not with "
                                      "--address: that broker's own mode is reported)")
                         ->check(CLI::IsMember({"sync", "batch", "none"}))
                         ->capture_default_str();

  auto* replay = app.add_subcommand("replay", "append N records, then read the stream from sequence 1: records/s");
  replay->add_option("--count", s.count, "records")->check(CLI::Range(1L, 100'000'000L))->capture_default_str();
  replay->add_option("--size", s.size, "payload bytes")->check(CLI::Range(16, 1 << 20))->capture_default_str();

  auto* route =
      app.add_subcommand("route", "send-to-user: U users across G gateways, one service sending to random users");
  route->add_option("--users", s.users, "registered users")->check(CLI::Range(1L, 10'000'000L))->capture_default_str();
  route->add_option("--sub-address", s.sub_address,
                    "the gateways connect to this host:port (another node of a cluster: docs/cluster.md), the "
                    "service to --address; needs --address");
  route->add_option("--gateways", s.gateways, "gateways (inboxes)")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  route->add_option("--count", s.count, "sends")->check(CLI::Range(1L, 100'000'000L))->capture_default_str();
  route->add_option("--size", s.size, "payload bytes")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  route->add_option("--window", s.window, "sends in flight at most (0 = fire and forget, no answers)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  route
      ->add_option("--rate", s.route_rate,
                   "fire and forget at this many sends per second, each stamped with its send time: reports the "
                   "send-to-inbox latency (p50/p99/p99.9); 0 = as fast as the client queues")
      ->check(CLI::Range(0.0, 10'000'000.0))
      ->capture_default_str();
  route
      ->add_option("--idle", s.idle,
                   "stop waiting for the gateways' sentinels after this many seconds without a delivery")
      ->capture_default_str();

  auto* leases =
      app.add_subcommand("leases", "grant and keep alive L leases (each with one route); memory and sweep cost");
  leases->add_option("--leases", s.leases, "leases")->check(CLI::Range(1L, 10'000'000L))->capture_default_str();
  leases->add_option("--window", s.window, "requests in flight at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();

  auto* conns = app.add_subcommand("connections", "broker memory per idle connection, and per incomplete large frame");
  conns->add_option("--count", s.connections, "connections")->check(CLI::Range(1L, 15'000L))->capture_default_str();
  conns->add_option("--declare", s.declare, "each then starts a frame declaring this many bytes (0 = stay idle)")
      ->check(CLI::Range(0L, 64L << 20))
      ->capture_default_str();

  auto* shakes = app.add_subcommand(
      "handshakes", "C clients connect (TCP, TLS handshake with --tls, hello) and close in a loop for D seconds");
  shakes->add_option("--clients", s.hs_clients, "client threads")->check(CLI::Range(1, 256))->capture_default_str();
  shakes->add_option("--seconds", s.seconds, "duration")->check(CLI::Range(0.1, 600.0))->capture_default_str();

  auto* storm = app.add_subcommand(
      "reconnect",
      "a reconnect storm: C clients (G of them gateways) come back after SIGKILL and restart, then a drain");
  storm->add_option("--clients", s.clients, "clients, each with a subscription")
      ->check(CLI::Range(1L, 15'000L))
      ->capture_default_str();
  storm->add_option("--gateways", s.rc_gateways, "how many of them are gateways (lease, inbox, routes)")
      ->check(CLI::Range(0L, 15'000L))
      ->capture_default_str();
  storm->add_option("--routes", s.routes_per_gateway, "routes per gateway")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  storm->add_option("--max-hellos-per-s", s.max_hellos_per_s, "the restarted broker's handshake limit")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  storm->add_option("--mode", s.rc_mode, "kill, drain or both (kill first)")
      ->check(CLI::IsMember({"kill", "drain", "both"}))
      ->capture_default_str();
  storm->add_option("--drain-window", s.drain_window, "drain window, seconds")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  storm->add_option("--phase-timeout", s.phase_timeout, "give up on a phase after this many seconds")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  storm->add_option("--loops", s.rc_loops, "client I/O threads")->check(CLI::Range(1, 64))->capture_default_str();

  auto* offers = app.add_subcommand(
      "offers",
      "offers with receipts against plain send-to-user: throughput ratio, receipt latency, memory per pending offer");
  offers->add_option("--users", s.users, "registered users")->check(CLI::Range(1L, 200'000L))->capture_default_str();
  offers->add_option("--gateways", s.gateways, "gateways (inboxes)")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  offers->add_option("--count", s.offer_count, "plain sends, then offers, per round")
      ->check(CLI::Range(1L, 10'000'000L))
      ->capture_default_str();
  offers->add_option("--size", s.size, "payload bytes")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  offers->add_option("--window", s.window, "sends (offers) in flight at most, unanswered")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  offers->add_option("--rounds", s.rounds, "throughput rounds (plain, then offers, each)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  offers->add_option("--rate", s.rate, "offers per second in the latency phase")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  offers->add_option("--seconds", s.seconds, "duration of the latency phase")
      ->check(CLI::Range(0.001, 600.0))
      ->capture_default_str();
  offers->add_option("--pending", s.pending, "offers nobody acks, for the memory per pending offer (0 = skip)")
      ->check(CLI::Range(0L, 900'000L))
      ->capture_default_str();

  // Flags may come before or after the workload name.
  for (auto* sub : {fanout, latency, durable, route, leases, replay, conns, shakes, storm, offers}) sub->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // No workload, or a word that is not one: CLI11 says only "A subcommand
    // is required"; name the word and the workloads (same exit code).
    if (e.get_exit_code() != 0 && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr &&
        app.get_subcommands().empty()) {
      std::string known;
      for (const auto* c : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + c->get_name();
      const auto rest = app.remaining(true);
      std::string what = "a workload is required";
      if (!rest.empty() && rest.front().starts_with('-'))
        what += fmt::format(" ('{}' is not a flag of switchyard-bench itself)", rest.front());
      else if (!rest.empty())
        what = fmt::format("'{}' is not a workload", rest.front());
      std::fprintf(stderr, "switchyard-bench: %s: {%s} (see --help)\n", what.c_str(), known.c_str());
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  s.workload = app.get_subcommands().front()->get_name();
  if (!s.auth && s.token.empty() && s.key_file.empty()) {
    // The environment, when no flag chose the credentials.
    const char* env_token = std::getenv("SWITCHYARD_TOKEN");
    const char* env_key = std::getenv("SWITCHYARD_KEY_FILE");
    if (env_token && *env_token) s.token = env_token;
    if (env_key && *env_key) s.key_file = env_key;
    if (!s.token.empty() && !s.key_file.empty())
      return fail_line(s, "SWITCHYARD_TOKEN and SWITCHYARD_KEY_FILE are both set: unset one", 2);
  }

  if ((s.workload == "latency" || s.workload == "offers") && s.rate * s.seconds > 5e7)
    return fail_line(s, "rate*seconds too large", 2);
  if (s.workload == "reconnect" && !s.address.empty())
    return fail_line(s, "reconnect kills and restarts its own broker: --address is not allowed", 2);
  if (s.workload == "route" && s.route_rate > 0 && (s.window != 0 || s.size < static_cast<int>(timed_payload_min)))
    return fail_line(s, fmt::format("route --rate needs --window 0 and --size of at least {}", timed_payload_min), 2);
  if (s.workload == "reconnect") s.timeout = std::max(s.timeout, 2 * s.phase_timeout + s.drain_window + 120);

  if (durability->count() > 0 && !s.address.empty())
    return fail_line(s,
                     "--durability sets the mode of the broker the bench starts; a broker of --address keeps its own "
                     "(the summary reports it when the broker lets the bench read its settings): drop --durability",
                     2);

  // A hard limit like the peers' alarm(): print an error line and leave.
  std::thread([limit = s.timeout + 5, &s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit));
    std::printf("{\"broker\":\"switchyard\",\"workload\":\"%s\",\"error\":\"hard timeout\"}\n", s.workload.c_str());
    std::fflush(stdout);
    std::_Exit(3);
  }).detach();

  if (s.workload == "connections" && (s.tls || !s.key_file.empty()))
    return fail_line(
        s, "connections writes raw hellos on plain sockets: no --tls or --key-file (--token and --auth work)", 2);

  target t;
  t.token = s.token;
  t.key_file = s.key_file;
  // The certificate of --tls and the auth file of --auth; removed at exit
  // (declared before `server`, so the broker is stopped first).
  std::optional<temp_folder> scratch;
  std::optional<switchyard::bench::server_process> server;
  if (!s.address.empty()) {
    const auto colon = s.address.rfind(':');
    const std::string port = colon == std::string::npos ? "" : s.address.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    if (colon == 0 || !digits || std::stoul(port) == 0 || std::stoul(port) > 65535)
      return fail_line(s, "--address must be host:port (port 1..65535), got '" + s.address + "'", 2);
    t.host = s.address.substr(0, colon);
    if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']')
      t.host = t.host.substr(1, t.host.size() - 2);
    t.port = static_cast<std::uint16_t>(std::stoul(port));
    t.address = s.address;
    t.remote = true;
    // A name prefix unique to this run (see target::remote).
    std::random_device entropy;
    t.prefix = fmt::format("bench.{:08x}.", entropy());
    if (s.tls && s.tls_ca.empty()) return fail_line(s, "--tls with --address needs --tls-ca", 2);
    if (s.auth)
      return fail_line(
          s, "--auth writes the auth file of the broker the bench starts: with --address give --token or --key-file",
          2);
    if (s.tls) t.tls_ca = s.tls_ca;
    if (!s.sub_address.empty()) {
      const auto c = s.sub_address.rfind(':');
      const std::string p = c == std::string::npos ? "" : s.sub_address.substr(c + 1);
      if (c == 0 || p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(p) == 0 || std::stoul(p) > 65535)
        return fail_line(s, "--sub-address must be host:port (port 1..65535), got '" + s.sub_address + "'", 2);
      t.sub_host = s.sub_address.substr(0, c);
      t.sub_port = static_cast<std::uint16_t>(std::stoul(p));
    }
  } else {
    if (!s.sub_address.empty()) return fail_line(s, "--sub-address needs --address (a cluster's node)", 2);
    const std::string binary = s.server_binary.empty() ? switchyard::bench::default_server_binary() : s.server_binary;
    // Short minimum TTL so the leases workload can watch expiry in seconds.
    std::vector<std::string> args;
    if (s.workload == "leases") args = {"--lease-min-ttl-ms", "100"};
    if (s.workload == "durable") args = {"--durability", s.durability};
    if (s.workload == "replay") args = {"--durability", "none"};  // loading speed is not what is measured
    // No offer evicted while the throughput phase keeps 2 s of them live.
    if (s.workload == "offers") args = {"--max-offers", "1000000", "--max-offer-bytes", "1073741824"};
    if (s.workload == "connections")
      args = {"--max-connections", "20000", "--max-frame", "16777216", "--max-pending-bytes", "16777216"};
    // Set-up is not rate limited; the broker restarted in each phase is.
    if (s.workload == "reconnect")
      args = {"--max-connections", "20000", "--lease-min-ttl-ms", "100", "--log-level", "error"};
    if (s.tls || s.auth) {
      scratch = temp_folder::make("switchyard-bench-security-");
      if (!scratch) return fail_line(s, "cannot create a temporary folder for --tls / --auth");
    }
    if (s.tls) {
      // A self-signed certificate for 127.0.0.1.
      const std::string dir = scratch->path().string();
      const std::string cert = dir + "/broker.pem", key = dir + "/broker.key";
      const std::string cmd =
          "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
          "-subj /CN=switchyard-bench -addext subjectAltName=IP:127.0.0.1 -keyout " +
          key + " -out " + cert + " >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) return fail_line(s, "--tls: openssl could not make a certificate");
      t.server_security_args.insert(t.server_security_args.end(), {"--tls-cert", cert, "--tls-key", key});
      t.tls_ca = cert;
    }
    if (s.auth) {
      auto written = write_bench_auth_file(scratch->path());
      if (!written) return fail_line(s, written.error());
      t.server_security_args.insert(t.server_security_args.end(), {"--auth-file", written->file.string()});
      t.token = written->token;
      t.admin_token = written->admin_token;
    }
    args.insert(args.end(), t.server_security_args.begin(), t.server_security_args.end());
    auto started = switchyard::bench::server_process::start(binary, args, 10s);
    if (!started) {
      // Say where the binary was looked for and how to name another one.
      const std::string where = s.server_binary.empty() ? " (looked next to switchyard-bench and on PATH)" : "";
      return fail_line(s,
                       started.error() + where + "; give --server PATH, or --address HOST:PORT for a running broker");
    }
    server.emplace(std::move(*started));
    t.port = server->port();
    t.server = &*server;
  }
  int rc = 0;
  if (s.workload == "route")
    rc = run_route(s, t);
  else if (s.workload == "durable")
    rc = run_durable(s, t);
  else if (s.workload == "replay")
    rc = run_replay(s, t);
  else if (s.workload == "leases")
    rc = run_leases(s, t, server ? server->pid() : -1);
  else if (s.workload == "connections")
    rc = run_connections(s, t, server ? server->pid() : -1);
  else if (s.workload == "reconnect")
    rc = run_reconnect(s, t, *server);
  else if (s.workload == "handshakes")
    rc = run_handshakes(s, t);
  else if (s.workload == "offers")
    rc = run_offers(s, t);
  else
    rc = run_pubsub(s, t, s.workload == "latency");
  if (server) server->stop();
  return rc;
}

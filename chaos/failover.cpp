// switchyard-failover: a benchmark on the chaos harness: from a node's kill -9 to its gateways' users being
// routable again (docs/benchmarks.md, "Failover"). Starts the chaos
// harness (chaos/harness.hpp: 3 etcd members, 3 nats-servers, 3 nodes on
// loopback), then:
//   1. `--gateways` gateways (the client library's gateway helper, default
//      options: lease 10 s, the client's default reconnect delays), each
//      listing all three nodes (the client connects to them in a shuffled
//      order), with `--users` users spread over them (user u on gateway
//      u % G); the gateways that landed on node a (by server instance) are
//      the ones measured;
//   2. SIGKILL of node a; its gateways reconnect to b or c and put their
//      users again (the client's restore);
//   3. from the kill on, a random sample (--sample) of a's gateways' users
//      is probed from b and c (async single-key sends: a new one every
//      --probe-every-ms per user not routed yet, each waiting up to the
//      nodes' forward timeout, 2 s, when its path still leads to the dead
//      node) until a probe is routed to the user's own gateway: that
//      user's time is the probe's answer, minus the kill (an upper bound,
//      at most about --probe-every-ms late). A sample, because probing
//      every user at that rate would load the survivors more than the
//      failover itself; every user's route is checked at the end.
// Prints the percentiles (p50, p90, p99, max) and the reconnect downtimes;
// --out writes each user's time in ms, one per line (bench/plot-failover.sh
// draws the histogram). Exit 0 when every user was routed within
// --timeout, 1 otherwise, 2 on bad usage or a cluster that did not start.
//
//   switchyard-failover [--gateways 200] [--users 100000] [--lease-ttl 5] [--out times.txt] [--json]

#include "bench/server_process.hpp"
#include "chaos/harness.hpp"
#include "chaos/run_folder.hpp"
#include "chaos/settle.hpp"

#include <switchyard/client.hpp>
#include <switchyard/gateway.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

namespace {

namespace fs = std::filesystem;
using namespace switchyard;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using chaos::progress;

struct options {
  std::string server;
  fs::path dir;
  bool keep = false;
  int gateways = 200;
  int users = 100'000;
  int lease_ttl_s = 5;  // the server's default cluster-lease-ttl-s
  int probe_every_ms = 100;
  int sample = 3000;  // users probed (0: all)
  int timeout_s = 60;
  std::string out;
  bool json = false;
};

double ms_between(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// The value at quantile q of sorted `v` (nearest rank).
double quantile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const auto i =
      static_cast<std::size_t>(std::clamp(q * static_cast<double>(v.size()) + 0.5, 1.0, static_cast<double>(v.size())));
  return v[i - 1];
}

// The users of the killed node's gateways, probed until each is routed.
class prober {
 public:
  struct user {
    std::string key;
    std::string gateway;  // its inbox id
    clock_type::time_point last_sent{};
    int in_flight = 0;
    bool routed = false;
    double ms = 0;  // from the kill to the routed probe's answer
  };

  // A probe whose path leads to the dead node waits for the nodes' forward
  // timeout (2 s): enough in flight per user that one is sent every
  // `every` all the same.
  prober(std::vector<user> users, std::vector<std::unique_ptr<client>> via, clock_type::time_point kill,
         std::chrono::milliseconds every)
      : users_(std::move(users)),
        via_(std::move(via)),
        kill_(kill),
        every_(every),
        max_in_flight_(static_cast<int>(2500ms / every) + 1) {}

  // Probes until every user is routed or `deadline`; returns the users left.
  std::size_t run(clock_type::time_point deadline) {
    static constexpr std::byte payload[] = {std::byte{'p'}};
    while (clock_type::now() < deadline) {
      std::vector<std::size_t> due;
      std::size_t left = 0;
      {
        std::lock_guard lock(mu_);
        const auto now = clock_type::now();
        for (std::size_t i = 0; i < users_.size(); ++i) {
          auto& u = users_[i];
          if (u.routed) continue;
          ++left;
          if (u.in_flight < max_in_flight_ && now - u.last_sent >= every_) {
            u.last_sent = now;
            ++u.in_flight;
            due.push_back(i);
          }
        }
        routed_now_ = users_.size() - left;
      }
      if (left == 0) return 0;
      for (const auto i : due) {
        auto& conn = *via_[i % via_.size()];
        conn.async_send(users_[i].key, payload, [this, i](std::expected<std::string_view, std::error_code> r) {
          const auto now = clock_type::now();
          std::lock_guard lock(mu_);
          auto& u = users_[i];
          --u.in_flight;
          if (r && *r == u.gateway && !u.routed) {
            u.routed = true;
            u.ms = ms_between(kill_, now);
          }
        });
      }
      std::this_thread::sleep_for(20ms);
    }
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(
        std::count_if(users_.begin(), users_.end(), [](const user& u) { return !u.routed; }));
  }

  std::size_t routed_now() {
    std::lock_guard lock(mu_);
    return routed_now_;
  }

  // The routed users' times, sorted.
  std::vector<double> times() {
    std::lock_guard lock(mu_);
    std::vector<double> t;
    for (const auto& u : users_)
      if (u.routed) t.push_back(u.ms);
    std::sort(t.begin(), t.end());
    return t;
  }

  // No callback runs after it: the connections close first.
  ~prober() { via_.clear(); }

 private:
  std::mutex mu_;
  std::vector<user> users_;
  std::vector<std::unique_ptr<client>> via_;
  clock_type::time_point kill_;
  std::chrono::milliseconds every_;
  int max_in_flight_;
  std::size_t routed_now_ = 0;
};

int run(const options& o) {
  constexpr int victim = 0;  // node a
  progress("starting 3 etcd members, 3 nats-servers and 3 nodes ...");
  chaos::harness h({.server_binary = o.server, .dir = o.dir, .cluster_lease_ttl_s = o.lease_ttl_s});
  const auto addresses = h.node_addresses();
  if (auto wrong = chaos::settle(addresses, 60s); !wrong.empty())
    throw std::runtime_error("the cluster did not settle: " + wrong);

  // The gateways, on four client threads.
  std::vector<std::shared_ptr<event_loop>> loops;
  for (int i = 0; i < 4; ++i) loops.push_back(std::make_shared<event_loop>());
  struct gateway_slot {
    std::unique_ptr<client> conn;
    std::unique_ptr<gateway> gw;
    std::atomic<double> downtime_ms{-1};  // the client's restore, once
  };
  std::vector<std::unique_ptr<gateway_slot>> gateways;
  std::atomic<std::uint64_t> delivered{0};
  for (int g = 0; g < o.gateways; ++g) {
    progress(fmt::format("starting gateway {}/{} ...", g + 1, o.gateways));
    auto slot = std::make_unique<gateway_slot>();
    client_options co;
    co.client_name = fmt::format("failover-gw-{}", g);
    co.addresses = addresses;
    co.on_reconnect = [s = slot.get()](const reconnect_info& info) {
      double expected = -1;
      s->downtime_ms.compare_exchange_strong(expected, static_cast<double>(info.downtime.count()));
    };
    auto conn = client::connect(co, loops[static_cast<std::size_t>(g) % loops.size()]);
    if (!conn) throw std::runtime_error(fmt::format("gateway {} cannot connect: {}", g, conn.error().message()));
    slot->conn = std::move(*conn);
    gateway_options go;
    go.inbox_id = fmt::format("gw-{}", g);
    go.on_message = [&delivered](const inbox_message&) { delivered.fetch_add(1, std::memory_order_relaxed); };
    for (int u = g; u < o.users; u += o.gateways) go.routes.push_back(fmt::format("user:{}", u));
    auto gw = gateway::start(*slot->conn, go);
    // A partition's owner may still be rebuilding its directory: retried, bounded.
    for (int attempt = 0; !gw && gw.error() == make_error_code(errc::unavailable) && attempt < 100; ++attempt) {
      std::this_thread::sleep_for(100ms);
      gw = gateway::start(*slot->conn, go);
    }
    if (!gw) throw std::runtime_error(fmt::format("gateway {} cannot start: {}", g, gw.error().message()));
    slot->gw = std::move(*gw);
    gateways.push_back(std::move(slot));
  }

  // The gateways connected to the victim (each client picked its first
  // node at random) and their users, a sample of them probed from the two
  // other nodes.
  std::uint64_t victim_instance = 0;
  {
    auto admin = chaos::connect_admin(addresses[victim]);
    if (!admin) throw std::runtime_error("cannot ask node a: " + admin.error().message());
    victim_instance = (*admin)->server_instance();
  }
  std::vector<int> on_victim;
  for (int g = 0; g < o.gateways; ++g)
    if (gateways[static_cast<std::size_t>(g)]->conn->server_instance() == victim_instance) on_victim.push_back(g);
  std::vector<prober::user> all;
  for (const int g : on_victim)
    for (int u = g; u < o.users; u += o.gateways)
      all.push_back({.key = fmt::format("user:{}", u), .gateway = fmt::format("gw-{}", g)});
  if (all.empty()) throw std::runtime_error("no gateway connected to node a");
  std::vector<prober::user> users = all;
  if (o.sample > 0 && static_cast<std::size_t>(o.sample) < users.size()) {
    std::mt19937_64 random(42);
    std::shuffle(users.begin(), users.end(), random);
    users.resize(static_cast<std::size_t>(o.sample));
  }
  std::vector<std::unique_ptr<client>> via;
  for (int k = 0; k < chaos::harness::size; ++k) {
    if (k == victim) continue;
    client_options co;
    co.client_name = fmt::format("failover-probe-{}", k);
    co.addresses = {addresses[static_cast<std::size_t>(k)]};
    auto c = client::connect(co);
    if (!c) throw std::runtime_error("probe client cannot connect: " + c.error().message());
    via.push_back(std::move(*c));
  }
  // Every user is routable before the kill.
  for (const auto& u : users) {
    std::expected<std::string, std::error_code> r;
    for (int attempt = 0; attempt < 50 && !(r = via[0]->send(u.key, "before")); ++attempt)
      std::this_thread::sleep_for(100ms);
    if (!r || *r != u.gateway)
      throw std::runtime_error(
          fmt::format("{} is not routable before the kill: {}", u.key, r ? "routed to " + *r : r.error().message()));
  }
  const std::size_t probed = users.size();
  const auto victim_gateways = on_victim.size();

  progress(fmt::format("kill -9 of node {} ({} gateways, {} users) ...", chaos::harness::node_name(victim),
                       victim_gateways, probed));
  const auto kill = clock_type::now();
  h.kill_node(victim);
  prober p(std::move(users), std::move(via), kill, std::chrono::milliseconds(o.probe_every_ms));
  std::atomic<bool> done{false};
  std::thread shown([&] {
    while (!done.load()) {
      progress(fmt::format("{:.1f} s after the kill: {}/{} users routable", ms_between(kill, clock_type::now()) / 1000,
                           p.routed_now(), probed));
      std::this_thread::sleep_for(250ms);
    }
  });
  const auto left = p.run(kill + std::chrono::seconds(o.timeout_s));
  done = true;
  shown.join();
  // Every user of the killed node's gateways routable at the end (not
  // timed): many keys per Send, each answered per key.
  progress("checking every user of the killed node's gateways ...");
  std::size_t unroutable = 0;
  {
    auto check = chaos::connect_admin(addresses[1]);
    if (!check) throw std::runtime_error("check client cannot connect: " + check.error().message());
    static constexpr std::byte payload[] = {std::byte{'c'}};
    for (std::size_t i = 0; i < all.size(); i += 500) {
      std::vector<std::string_view> keys;
      for (std::size_t j = i; j < std::min(all.size(), i + 500); ++j) keys.push_back(all[j].key);
      std::expected<send_result, std::error_code> r;
      for (int attempt = 0; attempt < 20 && !(r = (*check)->send_many(keys, payload)); ++attempt)
        std::this_thread::sleep_for(250ms);
      if (!r) throw std::runtime_error("the final check failed: " + r.error().message());
      for (std::size_t j = 0; j < keys.size(); ++j) unroutable += r->gateways[j] != all[i + j].gateway;
    }
  }
  progress("");

  const auto times = p.times();
  std::vector<double> downtimes;
  for (const int g : on_victim)
    if (const auto d = gateways[static_cast<std::size_t>(g)]->downtime_ms.load(); d >= 0) downtimes.push_back(d);
  std::sort(downtimes.begin(), downtimes.end());
  if (!o.out.empty()) {
    std::ofstream out(o.out);
    for (const auto t : times) out << fmt::format("{:.1f}\n", t);
  }
  nlohmann::json j = {
      {"gateways", o.gateways},
      {"users", o.users},
      {"killed_node", chaos::harness::node_name(victim)},
      {"gateways_killed_node", victim_gateways},
      {"users_of_killed_node", all.size()},
      {"users_probed", probed},
      {"users_unroutable_at_end", unroutable},
      {"users_routed", times.size()},
      {"users_not_routed", left},
      {"lease_ttl_s", o.lease_ttl_s},
      {"probe_every_ms", o.probe_every_ms},
      {"routable_ms",
       {{"p50", quantile(times, 0.5)},
        {"p90", quantile(times, 0.9)},
        {"p99", quantile(times, 0.99)},
        {"max", times.empty() ? 0.0 : times.back()}}},
      {"reconnect_downtime_ms",
       {{"gateways", downtimes.size()},
        {"p50", quantile(downtimes, 0.5)},
        {"p99", quantile(downtimes, 0.99)},
        {"max", downtimes.empty() ? 0.0 : downtimes.back()}}},
  };
  if (o.json) {
    std::cout << j.dump() << '\n';
  } else {
    std::cout << fmt::format(
        "kill -9 of node {} with {} gateways' {} users (of {} gateways, {} users; node lease TTL {} s):\n"
        "  routable again ({} users probed): p50 {:.0f} ms, p90 {:.0f} ms, p99 {:.0f} ms, max {:.0f} ms; {} not "
        "within {} s\n"
        "  gateways' reconnect (loss to restored session, with the first answers to their route puts): p50 {:.0f} "
        "ms, p99 {:.0f} ms, max {:.0f} ms\n"
        "  users of the killed node's gateways not routable at the end: {}\n",
        chaos::harness::node_name(victim), victim_gateways, all.size(), o.gateways, o.users, o.lease_ttl_s, probed,
        quantile(times, 0.5), quantile(times, 0.9), quantile(times, 0.99), times.empty() ? 0.0 : times.back(), left,
        o.timeout_s, quantile(downtimes, 0.5), quantile(downtimes, 0.99), downtimes.empty() ? 0.0 : downtimes.back(),
        unroutable);
  }
  gateways.clear();
  return left == 0 && unroutable == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "switchyard-failover: kills (SIGKILL) one node of a 3-node cluster on loopback and measures how long until "
      "every user of its gateways is routable again (docs/benchmarks.md, \"Failover\")"};
  app.set_version_flag("--version,-V", std::string("switchyard-failover ") + SWITCHYARD_VERSION);
  o.server = bench::default_server_binary();
  app.add_option("--server", o.server, "the switchyard-server binary")->capture_default_str();
  app.add_option("--gateways", o.gateways, "gateways (spread over the three nodes)")
      ->capture_default_str()
      ->check(CLI::Range(3, 2000));
  app.add_option("--users", o.users, "users (spread over the gateways)")
      ->capture_default_str()
      ->check(CLI::Range(3, 1'000'000));
  app.add_option("--lease-ttl", o.lease_ttl_s, "the nodes' --cluster-lease-ttl-s")
      ->capture_default_str()
      ->check(CLI::Range(2, 60));
  app.add_option("--sample", o.sample, "users of the killed node's gateways probed (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--probe-every-ms", o.probe_every_ms, "a new probe per unrouted user this often")
      ->capture_default_str()
      ->check(CLI::Range(20, 5000));
  app.add_option("--timeout", o.timeout_s, "seconds after the kill to give up")
      ->capture_default_str()
      ->check(CLI::Range(5, 600));
  app.add_option("--out", o.out, "write each user's time (ms after the kill) to this file, one per line");
  app.add_option("--dir", o.dir, "folder for data and logs (default: a new one in /dev/shm, removed unless --keep)");
  app.add_flag("--keep", o.keep, "keep the folder after the run");
  app.add_flag("--json", o.json, "print the result as one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the help, the version, or what was wrong
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  if (o.users < o.gateways) {
    std::cerr << "switchyard-failover: --users must be at least --gateways\n";
    return 2;
  }
  auto folder = chaos::run_folder::make(o.dir, "switchyard-failover", o.keep);
  if (!folder) {
    std::cerr << "switchyard-failover: " << folder.error() << '\n';
    return 2;
  }
  o.dir = folder->path();
  int rc = 2;
  try {
    rc = run(o);
  } catch (const std::exception& e) {
    progress("");
    std::cerr << "switchyard-failover: " << e.what() << " (logs in " << o.dir.string() << ")\n";
    return 2;  // the folder is kept: its logs say why
  }
  folder->remove_unless_kept();
  return rc;
}

// switchyard-chaos: starts a cluster on loopback (chaos/harness.hpp), runs
// the workload (chaos/workload.hpp) while injecting faults, then checks the
// history (chaos/checker.hpp). docs/chaos.md is its manual.
//
// Exit codes: 0 no violation; 1 a violation (each printed); 2 bad usage, or
// the cluster could not be started or brought back (the message says what).

#include "bench/server_process.hpp"
#include "chaos/checker.hpp"
#include "chaos/harness.hpp"
#include "chaos/history.hpp"
#include "chaos/run_folder.hpp"
#include "chaos/settle.hpp"
#include "chaos/workload.hpp"

#include <switchyard/client.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>

namespace {

namespace fs = std::filesystem;
using namespace switchyard;
using namespace std::chrono_literals;
using chaos::progress;

constexpr std::array<std::string_view, 5> all_faults{"kill-node", "kill-etcd", "kill-nats", "stop-node", "cut-node"};

struct run_options {
  std::string server;
  fs::path dir;
  bool keep = false;
  int duration_s = 60;
  int fault_every_s = 6;
  std::vector<std::string> faults{all_faults.begin(), all_faults.end()};
  std::uint64_t seed = 0;
  int gateways = 6;
  bool json = false;
  std::string check_file;
};

// After users stayed unroutable: what each node says about the first of
// them and about itself, into `file` (for whoever reads the run's folder).
void diagnose(const std::vector<std::string>& addresses, const std::vector<std::string>& users, const fs::path& file,
              chaos::history_recorder& history) {
  std::uint64_t n = 0;
  std::ofstream out(file);
  for (const auto& a : addresses) {
    auto c = chaos::connect_admin(a);
    if (!c) {
      out << a << ": cannot connect: " << c.error().message() << '\n';
      continue;
    }
    for (std::size_t i = 0; i < std::min<std::size_t>(users.size(), 3); ++i) {
      // Recorded as probes: the gateways still record what they receive.
      chaos::event e;
      e.type = chaos::event_type::probe;
      e.proc = "diagnose";
      e.user = users[i];
      e.payload = fmt::format("d-{}", n++);
      e.t_us = history.now_us();
      auto r = (*c)->send(users[i], e.payload);
      e.outcome = r ? "ok" : chaos::outcome_of(r.error());
      if (r) e.gateway = *r;
      history.record(std::move(e));
      out << a << ": send to " << users[i] << ": " << (r ? "routed to " + *r : r.error().message()) << '\n';
    }
    if (auto st = (*c)->cluster_status()) {
      out << a << ": node " << st->node_id << " incarnation " << st->incarnation << " view " << st->view_revision
          << (st->in_standing ? " in standing" : " out of standing") << (st->synced ? " synced" : " not synced")
          << '\n';
      for (const auto& m : st->members)
        out << "  member " << m.node_id << " " << m.incarnation << " partitions " << m.partitions << " synced_in "
            << m.synced_in << " lost_in " << m.lost_in << " failed_out " << m.failed_out << '\n';
    }
    if (auto stats = (*c)->stats()) {
      for (const auto& v : stats->values)
        if (v.name.find("cluster") != std::string::npos || v.name.find("route") != std::string::npos ||
            v.name.find("lease") != std::string::npos)
          out << "  " << v.name << " " << v.value << '\n';
    }
  }
}

void print_report(const chaos::check_report& r, const run_options& o, const std::vector<std::string>& exited,
                  std::size_t fault_count) {
  if (o.json) {
    nlohmann::json j;
    j["ok"] = r.ok() && exited.empty();
    j["seed"] = o.seed;
    j["faults"] = fault_count;
    j["appends"] = r.appends;
    j["appends_acked"] = r.appends_acked;
    j["appends_unknown"] = r.appends_unknown;
    j["streams_read"] = r.streams_read;
    j["records_read"] = r.records_read;
    j["sends"] = r.sends;
    j["sends_ok"] = r.sends_ok;
    j["deliveries"] = r.deliveries;
    j["publishes"] = r.publishes;
    j["receipts"] = r.receipts;
    j["offers"] = r.offers;
    j["offer_acks"] = r.offer_acks;
    j["offer_receipts"] = r.offer_receipts;
    j["subscribers"] = r.subscribers;
    j["abandoned_gateways"] = r.abandoned_gateways;
    j["users_probed"] = r.users_probed;
    j["users_routable"] = r.users_routable;
    j["exited"] = exited;
    auto& v = j["violations"] = nlohmann::json::array();
    for (const auto& x : r.violations) v.push_back({{"property", x.property}, {"detail", x.detail}});
    std::cout << j.dump() << '\n';
    return;
  }
  std::cout << fmt::format(
      "faults {}  appends {} (acked {}, outcome unknown {})  records read {} in {} streams\n"
      "sends {} (routed {})  deliveries {}  users routable after the faults {}/{}\n"
      "publishes {}  received {} by {} subscribers\n"
      "offers {}  acked by gateways {}  receipts {}\n",
      fault_count, r.appends, r.appends_acked, r.appends_unknown, r.records_read, r.streams_read, r.sends, r.sends_ok,
      r.deliveries, r.users_routable, r.users_probed, r.publishes, r.receipts, r.subscribers, r.offers, r.offer_acks,
      r.offer_receipts);
  for (const auto& p : exited) std::cout << "process-alive: " << p << " exited by itself\n";
  for (const auto& x : r.violations) std::cout << x.property << ": " << x.detail << '\n';
  std::cout << (r.ok() && exited.empty() ? "no violations\n"
                                         : fmt::format("{} violations\n", r.violations.size() + exited.size()));
}

// One fault: injects it, holds it, ends it. Records both. Throws
// std::runtime_error when what it broke cannot be brought back.
void inject(chaos::harness& h, chaos::history_recorder& history, std::mt19937_64& random, const std::string& fault,
            int cluster_lease_ttl_s) {
  const int target = std::uniform_int_distribution<int>(0, chaos::harness::size - 1)(random);
  const auto hold = std::chrono::milliseconds(std::uniform_int_distribution<int>(1000, 3000)(random));
  chaos::event e;
  e.type = chaos::event_type::fault;
  e.proc = "harness";
  e.fault = fault;
  const bool on_node = fault == "kill-node" || fault == "stop-node" || fault == "cut-node";
  e.target = on_node ? chaos::harness::node_name(target) : fmt::format("{}", target);
  history.record(e);
  const auto check = [](std::expected<void, std::string> r) {
    if (!r) throw std::runtime_error(r.error());
  };
  if (fault == "kill-node") {
    h.kill_node(target);
    std::this_thread::sleep_for(hold);
    check(h.restart_node(target));
  } else if (fault == "kill-etcd") {
    h.kill_etcd(target);
    std::this_thread::sleep_for(hold);
    check(h.restart_etcd(target));
  } else if (fault == "kill-nats") {
    h.kill_nats(target);
    std::this_thread::sleep_for(hold);
    check(h.restart_nats(target));
  } else if (fault == "stop-node") {
    // Past its etcd lease: its partitions pass to the others meanwhile.
    h.stop_node(target);
    std::this_thread::sleep_for(std::chrono::seconds(cluster_lease_ttl_s) + hold);
    h.continue_node(target);
  } else if (fault == "cut-node") {
    h.cut_node(target);
    std::this_thread::sleep_for(std::chrono::seconds(cluster_lease_ttl_s) + hold);
    h.heal_node(target);
  }
  e.type = chaos::event_type::heal;
  history.record(std::move(e));
}

int run(const run_options& o) {
  constexpr int lease_ttl_s = 2;
  chaos::history_recorder history(o.dir / "history.jsonl");
  std::ofstream(o.dir / "seed") << o.seed << '\n';  // to run the same schedule again
  std::vector<std::string> exited;
  std::size_t fault_count = 0;
  {
    progress("starting 3 etcd members, 3 nats-servers and 3 nodes ...");
    chaos::harness h({.server_binary = o.server, .dir = o.dir, .cluster_lease_ttl_s = lease_ttl_s});
    if (auto wrong = chaos::settle(h.node_addresses(), 60s); !wrong.empty())
      throw std::runtime_error("the cluster did not settle: " + wrong);
    chaos::workload w({.addresses = h.node_addresses(), .gateways = o.gateways, .seed = o.seed}, history);
    w.start();
    std::mt19937_64 random(o.seed);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::seconds(o.duration_s);
    bool abandoned = false;
    std::vector<std::string> round;
    while (std::chrono::steady_clock::now() < end) {
      const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
      progress(fmt::format("{}/{} s  faults {}  calls {}", elapsed.count(), o.duration_s, fault_count, w.calls()));
      if (!abandoned && elapsed.count() * 3 >= o.duration_s) {
        w.abandon_one();
        abandoned = true;
        // No fault until its lease lapsed: a keepalive in flight must not
        // be held back (and the lease extended) by a stopped or cut node.
        std::this_thread::sleep_for(std::chrono::seconds(lease_ttl_s) + 1100ms);
      }
      if (!o.faults.empty()) {
        // Rounds of every fault kind once, each round in a shuffled order.
        if (round.empty()) {
          round = o.faults;
          std::shuffle(round.begin(), round.end(), random);
        }
        const auto f = round.back();
        round.pop_back();
        inject(h, history, random, f, lease_ttl_s);
        ++fault_count;
        for (const auto& p : h.exited()) exited.push_back(p);
        if (!exited.empty()) break;
      }
      // Quiet between faults: the cluster recovers, the workload goes on.
      const auto quiet = std::min<std::chrono::steady_clock::time_point>(
          end, std::chrono::steady_clock::now() + std::chrono::seconds(o.fault_every_s));
      while (std::chrono::steady_clock::now() < quiet) std::this_thread::sleep_for(100ms);
    }
    w.stop();
    progress("faults over: waiting for the cluster to settle ...");
    if (exited.empty()) {
      if (auto wrong = chaos::settle(h.node_addresses(), 60s); !wrong.empty())
        throw std::runtime_error("the cluster did not settle after the faults: " + wrong);
      progress("probing every live user ...");
      if (w.probe(30s) > 0) diagnose(h.node_addresses(), w.unreached(), o.dir / "diagnostics.txt", history);
      progress("reading every stream ...");
      w.read_streams(30s);
      progress("publishing from every node ...");
      w.probe_channels(20s);
    }
    progress("");
  }
  const auto report = chaos::check(history.events());
  print_report(report, o, exited, fault_count);
  return report.ok() && exited.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  run_options o;
  CLI::App app{
      "switchyard-chaos: runs a Switchyard cluster (3 etcd, 3 NATS, 3 nodes) on loopback under a workload while "
      "injecting faults, then checks the history for lost acknowledged appends, sequence gaps, double or misrouted "
      "deliveries, deliveries through expired leases and users left unroutable (docs/chaos.md)"};
  app.set_version_flag("--version,-V", std::string("switchyard-chaos ") + SWITCHYARD_VERSION);
  o.server = bench::default_server_binary();
  app.add_option("--server", o.server, "the switchyard-server binary")->capture_default_str();
  app.add_option("--duration", o.duration_s, "seconds of workload and faults")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--fault-every", o.fault_every_s, "seconds of quiet after each fault")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--faults", o.faults, "faults to choose from (comma-separated; --no-faults for none)")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<std::string>(all_faults.begin(), all_faults.end())))
      ->capture_default_str();
  app.add_flag(
      "--no-faults", [&](std::int64_t) { o.faults.clear(); }, "run the workload without faults");
  app.add_option("--seed", o.seed, "random seed of the fault schedule and the workload (0: a random one)");
  app.add_option("--gateways", o.gateways, "gateways (20 users each)")
      ->capture_default_str()
      ->check(CLI::Range(2, 200));
  app.add_option("--dir", o.dir,
                 "folder for data, logs and history.jsonl (default: a new one in /dev/shm, removed unless --keep)");
  app.add_flag("--keep", o.keep, "keep the folder after the run");
  app.add_flag("--json", o.json, "print the report as one JSON object");
  app.add_option("--check", o.check_file, "check a history file (JSON lines) and exit; starts nothing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the help, the version, or what was wrong
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  if (!o.check_file.empty()) {
    auto h = chaos::read_history(o.check_file);
    if (!h) {
      std::cerr << "switchyard-chaos: " << h.error() << '\n';
      return 2;
    }
    const auto report = chaos::check(*h);
    print_report(report, o, {}, report.faults);
    return report.ok() ? 0 : 1;
  }
  if (o.seed == 0) o.seed = std::random_device{}() | 1;
  auto folder = chaos::run_folder::make(o.dir, "switchyard-chaos", o.keep);
  if (!folder) {
    std::cerr << "switchyard-chaos: " << folder.error() << '\n';
    return 2;
  }
  o.dir = folder->path();
  int rc = 2;
  try {
    rc = run(o);
  } catch (const std::exception& e) {
    progress("");
    std::cerr << "switchyard-chaos: " << e.what() << " (seed " << o.seed << "; logs in " << o.dir.string() << ")\n";
    return 2;  // the folder is kept: its logs say why
  }
  if (rc != 0 || o.keep) {
    std::cerr << "switchyard-chaos: seed " << o.seed << "; history and logs in " << o.dir.string() << '\n';
  } else {
    folder->remove_unless_kept();
  }
  return rc;
}

#include "chaos/workload.hpp"

#include <switchyard/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <random>
#include <stdexcept>

namespace switchyard::chaos {
std::string outcome_of(const std::error_code& ec) {
  if (ec.category() == client_category()) return std::string(error_name(static_cast<errc>(ec.value())));
  return ec.message();
}

namespace {

std::string stream_name(int k) { return fmt::format("chaos.s{}", k); }

}  // namespace

struct workload::gateway_slot {
  std::string id;
  std::vector<std::string> users;
  std::unique_ptr<client> conn;
  std::unique_ptr<gateway> gw;
  bool abandoned = false;
};

workload::workload(workload_options o, history_recorder& history) : options_(std::move(o)), history_(history) {}

workload::~workload() {
  stop();
  subscribers_.clear();
  for (auto& g : gateways_) g->gw.reset();
}

client_options workload::options_for(const std::string& name, std::vector<std::string> addresses) const {
  client_options co;
  co.addresses = std::move(addresses);
  co.client_name = "chaos-" + name;
  co.request_timeout = std::chrono::milliseconds(3000);
  co.connect_timeout = std::chrono::milliseconds(3000);
  co.reconnect.base_delay = std::chrono::milliseconds(100);
  co.reconnect.max_delay = std::chrono::milliseconds(1000);
  return co;
}

std::unique_ptr<client> workload::connect(const std::string& name) {
  auto c = client::connect(options_for(name, options_.addresses));
  if (!c) throw std::runtime_error(fmt::format("chaos: {} cannot connect: {}", name, c.error().message()));
  return std::move(*c);
}

std::unique_ptr<client> workload::connect_until_stopped(const std::string& name) {
  for (int attempt = 0; !stopping_.load(); ++attempt) {
    try {
      return connect(name);
    } catch (const std::runtime_error&) {
      // Every node may be down or cut off for a moment: a service retries.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 100 * (attempt + 1))));
    }
  }
  return nullptr;
}

void workload::start() {
  for (int g = 0; g < options_.gateways; ++g) {
    auto slot = std::make_unique<gateway_slot>();
    slot->id = fmt::format("gw-{}", g);
    for (int u = 0; u < options_.users_per_gateway; ++u) slot->users.push_back(fmt::format("u{}-{}", g, u));
    users_.insert(users_.end(), slot->users.begin(), slot->users.end());
    slot->conn = connect(slot->id);
    gateway_options go;
    go.inbox_id = slot->id;
    go.lease_ttl = options_.gateway_lease_ttl;
    go.routes = slot->users;
    go.on_message = [this, id = slot->id, s = slot.get()](const inbox_message& m) {
      if (m.offer_id != 0) {
        // The device takes every offer: recorded before the broker hears of it.
        for (const auto key : m.route_keys) {
          event e;
          e.type = event_type::offer_ack;
          e.proc = id;
          e.gateway = id;
          e.user = std::string(key);
          e.payload = std::string(m.payload_text());
          history_.record(std::move(e));
        }
        s->conn->ack(m);
      }
      for (const auto key : m.route_keys) {
        event e;
        e.type = event_type::deliver;
        e.proc = id;
        e.gateway = id;
        e.user = std::string(key);
        e.payload = std::string(m.payload_text());
        if (e.payload.starts_with("p-")) {  // a probe: probe() waits for it
          switchyard::lock_guard lock(probes_mu_);
          probes_delivered_.insert(e.payload);
        }
        history_.record(std::move(e));
      }
    };
    // Recorded before the routes exist: a delivery is never seen before its route.
    for (const auto& u : slot->users) {
      event e;
      e.type = event_type::route;
      e.proc = slot->id;
      e.gateway = slot->id;
      e.user = u;
      history_.record(std::move(e));
    }
    // A partition's owner may still be rebuilding its directory (unavailable): retried, bounded.
    auto gw = gateway::start(*slot->conn, go);
    for (int attempt = 0; !gw && gw.error() == make_error_code(errc::unavailable) && attempt < 100; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gw = gateway::start(*slot->conn, go);
    }
    if (!gw)
      throw std::runtime_error(fmt::format("chaos: gateway {} cannot start: {}", slot->id, gw.error().message()));
    slot->gw = std::move(*gw);
    gateways_.push_back(std::move(slot));
  }
  {
    switchyard::lock_guard lock(probes_mu_);
    probes_seen_.resize(options_.subscribers);
  }
  for (int k = 0; k < options_.subscribers; ++k) {
    const auto name = fmt::format("subscriber-{}", k);
    auto& conn = subscribers_.emplace_back(connect(name));
    auto sub = conn->subscribe("chaos.news.*", [this, name, k](const message& m) {
      event e;
      e.type = event_type::receive;
      e.proc = name;
      e.channel = std::string(m.channel);
      e.payload = std::string(m.payload_text());
      if (e.payload.starts_with("q-")) {  // "q-<node>-<n>": a probe from prober-<node>
        const auto node = e.payload.substr(2, e.payload.find('-', 2) - 2);
        switchyard::lock_guard lock(probes_mu_);
        probes_seen_[k].insert("prober-" + node);
      }
      history_.record(std::move(e));
    });
    if (!sub) throw std::runtime_error(fmt::format("chaos: {} cannot subscribe: {}", name, sub.error().message()));
    event e;
    e.type = event_type::subscribe;
    e.proc = name;
    e.channel = "chaos.news.*";
    history_.record(std::move(e));
  }
  for (int k = 0; k < options_.senders; ++k) threads_.emplace_back([this, k] { run_sender(k); });
  for (int k = 0; k < options_.offerers; ++k) threads_.emplace_back([this, k] { run_offerer(k); });
  for (int k = 0; k < options_.publishers; ++k) threads_.emplace_back([this, k] { run_publisher(k); });
  for (int k = 0; k < options_.appenders; ++k) threads_.emplace_back([this, k] { run_appender(k); });
}

void workload::run_worker(const std::string& name, const std::function<void(client&, std::uint64_t)>& step) {
  auto conn = connect_until_stopped(name);
  if (!conn) return;
  for (std::uint64_t n = 0; !stopping_.load(); ++n) {
    step(*conn, n);
    calls_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(options_.pause);
  }
}

void workload::run_sender(int k) {
  const auto name = fmt::format("sender-{}", k);
  std::mt19937_64 random(options_.seed * 1000 + 100 + k);
  std::uniform_int_distribution<std::size_t> pick(0, users_.size() - 1);
  run_worker(name, [&](client& conn, std::uint64_t n) {
    event e;
    e.type = event_type::send;
    e.proc = name;
    e.user = users_[pick(random)];
    e.payload = fmt::format("s{}-{}", k, n);
    e.t_us = history_.now_us();
    auto r = conn.send(e.user, e.payload);
    e.outcome = r ? "ok" : outcome_of(r.error());
    if (r) e.gateway = *r;
    history_.record(std::move(e));
  });
}

void workload::run_offerer(int k) {
  const auto name = fmt::format("offerer-{}", k);
  std::mt19937_64 random(options_.seed * 1000 + 300 + k);
  std::uniform_int_distribution<std::size_t> pick(0, users_.size() - 1);
  // Offer ids unique in the cluster: the offerer in the high bits. Its
  // receipts name the offer by id: the payload is found from it.
  const auto offer_id = [k](std::uint64_t n) { return (std::uint64_t(k + 1) << 40) | (n + 1); };
  const auto payload_of = [k](std::uint64_t id) { return fmt::format("o{}-{}", k, (id & ((1ull << 40) - 1)) - 1); };
  auto co = options_for(name, options_.addresses);
  co.on_receipt = [this, name, payload_of](const receipt& r) {
    event e;
    e.type = event_type::offer_receipt;
    e.proc = name;
    e.payload = payload_of(r.offer_id);
    e.user = r.route_key;
    e.gateway = r.inbox_id;
    e.outcome = r.outcome == receipt_outcome::acked ? "acked" : "timeout";
    history_.record(std::move(e));
  };
  std::unique_ptr<client> conn;
  for (int attempt = 0; !conn && !stopping_.load(); ++attempt) {
    auto c = client::connect(co);
    if (c)
      conn = std::move(*c);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 100 * (attempt + 1))));
  }
  if (!conn) return;
  for (std::uint64_t n = 0; !stopping_.load(); ++n) {
    event e;
    e.type = event_type::send;
    e.proc = name;
    e.user = users_[pick(random)];
    e.payload = payload_of(offer_id(n));
    e.t_us = history_.now_us();
    const std::array<std::string_view, 1> keys{e.user};
    auto r = conn->send_offer(
        keys, e.payload,
        {.offer_id = offer_id(n), .expires_in = std::chrono::seconds(10), .receipt_timeout = options_.receipt_timeout});
    if (!r) {
      e.outcome = outcome_of(r.error());
    } else if (r->routed == 1) {
      e.outcome = "ok";
      e.gateway = r->gateways.at(0);
    } else {
      e.outcome = "no_route";
    }
    history_.record(std::move(e));
    calls_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(options_.pause);
  }
}

void workload::run_appender(int k) {
  const auto name = fmt::format("appender-{}", k);
  std::mt19937_64 random(options_.seed * 1000 + 200 + k);
  std::uniform_int_distribution<int> pick(0, options_.streams - 1);
  run_worker(name, [&](client& conn, std::uint64_t n) {
    event e;
    e.type = event_type::append;
    e.proc = name;
    e.stream = stream_name(pick(random));
    e.payload = fmt::format("a{}-{}", k, n);
    e.t_us = history_.now_us();
    auto r = conn.append(e.stream, std::as_bytes(std::span(e.payload.data(), e.payload.size())));
    e.outcome = r ? "ok" : outcome_of(r.error());
    if (r) {
      e.seq = r->seq;
      e.epoch = r->epoch;
    }
    history_.record(std::move(e));
  });
}

void workload::run_publisher(int k) {
  const auto name = fmt::format("publisher-{}", k);
  const auto channel = fmt::format("chaos.news.p{}", k);
  run_worker(name, [&](client& conn, std::uint64_t n) {
    event e;
    e.type = event_type::publish;
    e.proc = name;
    e.channel = channel;
    e.payload = fmt::format("b{}-{}", k, n);
    // Recorded before: a subscriber may receive it before publish() returns.
    // A publish refused here (buffer full while reconnecting) is never
    // received, which at most once allows.
    history_.record(e);
    (void)conn.publish(e.channel, e.payload);
  });
}

std::size_t workload::probe_channels(std::chrono::milliseconds deadline) {
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  std::size_t missed = 0;
  for (std::size_t i = 0; i < options_.addresses.size(); ++i) {
    const auto node = std::string(1, static_cast<char>('a' + i));
    const auto prober = "prober-" + node;
    auto conn = client::connect(options_for(prober, {options_.addresses[i]}));
    if (!conn) {  // recorded: the checker then expects this node's probe at every subscriber
      event e;
      e.type = event_type::publish;
      e.proc = prober;
      e.channel = "chaos.news.probe";
      e.payload = fmt::format("q-{}-unsent", node);
      e.outcome = outcome_of(conn.error());
      history_.record(std::move(e));
    }
    auto reached_all = [&] {
      switchyard::lock_guard lock(probes_mu_);
      return std::all_of(probes_seen_.begin(), probes_seen_.end(),
                         [&](const auto& seen) { return seen.contains(prober); });
    };
    for (std::uint64_t n = 0; conn && !reached_all() && std::chrono::steady_clock::now() < give_up; ++n) {
      event e;
      e.type = event_type::publish;
      e.proc = prober;
      e.channel = "chaos.news.probe";
      e.payload = fmt::format("q-{}-{}", node, n);
      history_.record(e);
      (void)(*conn)->publish(e.channel, e.payload);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    switchyard::lock_guard lock(probes_mu_);
    for (const auto& seen : probes_seen_) missed += seen.contains(prober) ? 0 : 1;
  }
  return missed;
}

void workload::abandon_one() {
  if (gateways_.empty()) return;
  auto& g = *gateways_.back();
  if (g.abandoned) return;
  event e;
  e.type = event_type::abandon;
  e.proc = g.id;
  e.gateway = g.id;
  e.ttl_ms = options_.gateway_lease_ttl.count();
  e.sweep_ms = options_.sweep_period.count();
  e.t_us = history_.now_us();  // before: a keepalive after this moment is not possible
  g.gw->abandon();
  g.abandoned = true;
  history_.record(std::move(e));
}

void workload::stop() {
  stopping_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::size_t workload::probe(std::chrono::milliseconds deadline) {
  auto conn = connect("prober");
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  std::size_t missed = 0;
  std::uint64_t n = 0;
  for (const auto& g : gateways_) {
    if (g->abandoned) continue;
    for (const auto& user : g->users) {
      if (std::chrono::steady_clock::now() >= give_up) {  // not probed: the checker says so
        ++missed;
        unreached_.push_back(user);
        continue;
      }
      for (;;) {
        event e;
        e.type = event_type::probe;
        e.proc = "prober";
        e.user = user;
        e.payload = fmt::format("p-{}", n++);
        e.t_us = history_.now_us();
        const auto id = e.payload;
        auto r = conn->send(user, e.payload);
        e.outcome = r ? "ok" : outcome_of(r.error());
        if (r) e.gateway = *r;
        history_.record(std::move(e));
        // Reached: routed to the user's gateway and delivered there (up to 1 s).
        bool reached = false;
        for (int wait = 0; r && *r == g->id && !reached && wait < 100; ++wait) {
          {
            switchyard::lock_guard lock(probes_mu_);
            reached = probes_delivered_.contains(id);
          }
          if (!reached) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (reached) break;
        if (std::chrono::steady_clock::now() >= give_up) {
          ++missed;
          unreached_.push_back(user);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  return missed;
}

void workload::read_streams(std::chrono::milliseconds deadline) {
  auto conn = connect("reader");
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  for (int k = 0; k < options_.streams; ++k) {
    event e;
    e.type = event_type::read;
    e.proc = "reader";
    e.stream = stream_name(k);
    const auto started = std::chrono::steady_clock::now();
    for (;;) {
      e.records.clear();
      e.t_us = history_.now_us();
      std::uint64_t from = 1;
      std::error_code failed;
      for (int pages = 0; pages < 100'000; ++pages) {  // bounded: a page holds at least one record
        auto r = conn->read(e.stream, from);
        if (!r) {
          failed = r.error();
          break;
        }
        e.epoch = r->epoch;
        for (auto& rec : r->records)
          e.records.emplace_back(rec.seq,
                                 std::string(reinterpret_cast<const char*>(rec.payload.data()), rec.payload.size()));
        if (r->records.empty() || r->records.back().seq >= r->last_seq) break;
        from = r->records.back().seq + 1;
      }
      // not_found: nothing was appended to it, or its holder does not know
      // it yet; retried for 5 s, then recorded as such (the checker minds
      // only when an append to it was acknowledged).
      e.outcome = failed ? outcome_of(failed) : "ok";
      const bool absent = failed == make_error_code(errc::not_found) &&
                          std::chrono::steady_clock::now() >= started + std::chrono::seconds(5);
      if (!failed || absent || std::chrono::steady_clock::now() >= give_up) {
        history_.record(e);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace switchyard::chaos

#include "chaos/checker.hpp"

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace switchyard::chaos {
namespace {

using slot = std::tuple<std::string, std::uint64_t, std::uint64_t>;  // stream, epoch, seq

std::string slot_text(const slot& s) {
  return fmt::format("{} epoch {} seq {}", std::get<0>(s), std::get<1>(s), std::get<2>(s));
}

bool outcome_unknown(const std::string& outcome) {
  return outcome == "outcome_unknown" || outcome == "connection_lost" || outcome == "timeout";
}

class history_checker {
 public:
  history_checker(const std::vector<event>& h, const check_options& o) : history_(h), options_(o) {}

  check_report run() {
    index();
    check_appends();
    check_deliveries();
    check_receipts();
    check_offer_receipts();
    check_routable();
    return std::move(report_);
  }

 private:
  void fail(const char* property, std::string detail) { report_.violations.push_back({property, std::move(detail)}); }

  void index() {
    for (const auto& e : history_) {
      switch (e.type) {
        case event_type::append:
          ++report_.appends;
          appended_.emplace(e.payload, &e);
          if (e.outcome == "ok") {
            ++report_.appends_acked;
            acked_.push_back(&e);
          } else if (outcome_unknown(e.outcome)) {
            ++report_.appends_unknown;
          }
          break;
        case event_type::read:
          ++report_.streams_read;
          report_.records_read += e.records.size();
          reads_[e.stream] = &e;  // the last read of a stream counts
          break;
        case event_type::route:
          holders_[e.user].insert(e.gateway);
          break;
        case event_type::send:
          ++report_.sends;
          if (e.outcome == "ok") ++report_.sends_ok;
          sends_[e.payload] = &e;
          if (e.proc.starts_with("offerer-")) ++report_.offers;
          break;
        case event_type::deliver:
          ++report_.deliveries;
          delivered_at_.emplace(e.payload, e.gateway);
          break;
        case event_type::abandon:
          ++report_.abandoned_gateways;
          abandoned_[e.gateway] = &e;
          break;
        case event_type::fault:
          ++report_.faults;
          break;
        case event_type::heal:
          break;
        case event_type::probe:
          probes_[e.user].push_back(&e);
          sends_[e.payload] = &e;  // a probe is a send too: its delivery is checked like one
          break;
        case event_type::subscribe:
          if (subscribers_.insert(e.proc).second) ++report_.subscribers;
          break;
        case event_type::publish:
          ++report_.publishes;
          publishes_[e.payload] = &e;
          if (e.proc.starts_with("prober-")) prober_nodes_.insert(e.proc);
          break;
        case event_type::receive:
          ++report_.receipts;
          break;
        case event_type::offer_ack:
          ++report_.offer_acks;
          acks_.emplace(e.payload, e.user);
          break;
        case event_type::offer_receipt:
          ++report_.offer_receipts;
          break;
      }
    }
  }

  void check_appends() {
    std::map<slot, std::string> payload_at;
    std::unordered_map<std::string, slot> slot_of;
    auto claim = [&](const slot& s, const std::string& payload, const char* where) {
      auto [it, fresh] = payload_at.emplace(s, payload);
      if (!fresh && it->second != payload) {
        fail("one-payload-per-slot",
             fmt::format("{} holds \"{}\" and \"{}\" ({})", slot_text(s), it->second, payload, where));
      }
      auto [p, new_payload] = slot_of.emplace(payload, s);
      if (!new_payload && p->second != s) {
        fail("one-payload-per-slot",
             fmt::format("\"{}\" sits at {} and at {} ({})", payload, slot_text(p->second), slot_text(s), where));
      }
    };
    for (const auto* a : acked_) claim({a->stream, a->epoch, a->seq}, a->payload, "acknowledged append");
    std::set<std::string> acked_streams;
    for (const auto* a : acked_) acked_streams.insert(a->stream);
    for (const auto& [stream, r] : reads_) {
      if (r->outcome != "ok") {
        // A stream nothing acknowledged may be absent (not_found).
        if (acked_streams.contains(stream))
          fail("acked-append-present", fmt::format("the final read of {} failed: {}", stream, r->outcome));
        continue;
      }
      std::uint64_t expect = 1;
      for (const auto& [seq, payload] : r->records) {
        if (seq != expect) {
          fail("sequence-gap-free", fmt::format("{} epoch {}: seq {} where {} was due", stream, r->epoch, seq, expect));
          expect = seq;
        }
        ++expect;
        if (const auto a = appended_.find(payload); a == appended_.end()) {
          fail("one-payload-per-slot",
               fmt::format("{} holds \"{}\", which nothing appended", slot_text({stream, r->epoch, seq}), payload));
        } else if (a->second->outcome != "ok" && !outcome_unknown(a->second->outcome)) {
          fail("refused-append-absent", fmt::format("{} holds \"{}\", whose append was answered {}",
                                                    slot_text({stream, r->epoch, seq}), payload, a->second->outcome));
        }
        claim({stream, r->epoch, seq}, payload, "final read");
      }
    }
    for (const auto* a : acked_) {
      auto r = reads_.find(a->stream);
      if (r == reads_.end()) {
        fail("acked-append-present", fmt::format("{} was never read after the run", a->stream));
        reads_.emplace(a->stream, nullptr);  // said once per stream
        continue;
      }
      if (r->second == nullptr || r->second->outcome != "ok") continue;  // said above
      const auto& read = *r->second;
      if (read.epoch != a->epoch) {
        fail("acked-append-present", fmt::format("\"{}\" acknowledged at {}, but the stream is at epoch {} now",
                                                 a->payload, slot_text({a->stream, a->epoch, a->seq}), read.epoch));
        continue;
      }
      const bool present = a->seq >= 1 && a->seq <= read.records.size() && read.records[a->seq - 1].first == a->seq &&
                           read.records[a->seq - 1].second == a->payload;
      if (!present) {
        fail("acked-append-present", fmt::format("\"{}\" acknowledged at {} (by {}) is not there", a->payload,
                                                 slot_text({a->stream, a->epoch, a->seq}), a->proc));
      }
    }
  }

  void check_deliveries() {
    std::unordered_map<std::string, const event*> delivered;
    const auto slack_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.expiry_slack).count();
    for (const auto& e : history_) {
      if (e.type != event_type::deliver) continue;
      if (auto [it, fresh] = delivered.emplace(e.payload, &e); !fresh) {
        fail("delivered-at-most-once", fmt::format("{} delivered to {} at {} us and to {} at {} us", e.payload,
                                                   it->second->gateway, it->second->t_us, e.gateway, e.t_us));
      }
      const auto send = sends_.find(e.payload);
      if (send == sends_.end()) {
        fail("delivered-to-addressee",
             fmt::format("{} reached {} for {}, but nothing sent it", e.payload, e.gateway, e.user));
        continue;
      }
      if (send->second->user != e.user) {
        fail("delivered-to-addressee",
             fmt::format("{} was sent to {} but reached {} for {}", e.payload, send->second->user, e.gateway, e.user));
      }
      const auto holders = holders_.find(e.user);
      if (holders == holders_.end() || !holders->second.contains(e.gateway)) {
        fail("delivered-to-addressee",
             fmt::format("{} for {} reached {}, which never held that user", e.payload, e.user, e.gateway));
      }
      if (auto a = abandoned_.find(e.gateway); a != abandoned_.end()) {
        const auto& ab = *a->second;
        const auto lapsed_us = ab.t_us + (ab.ttl_ms + ab.sweep_ms) * 1000 + slack_us;
        if (send->second->t_us > lapsed_us) {
          fail("no-delivery-after-expiry",
               fmt::format("{} sent at {} us reached {}, whose lease lapsed by {} us (keepalives stopped at {} us)",
                           e.payload, send->second->t_us, e.gateway, lapsed_us, ab.t_us));
        }
      }
    }
  }

  void check_receipts() {
    std::set<std::pair<std::string, std::string>> seen;    // subscriber, id
    std::map<std::string, std::set<std::string>> reached;  // subscriber -> probers whose publish it received
    for (const auto& e : history_) {
      if (e.type != event_type::receive) continue;
      if (!seen.emplace(e.proc, e.payload).second)
        fail("delivered-at-most-once", fmt::format("{} received {} twice", e.proc, e.payload));
      const auto p = publishes_.find(e.payload);
      if (p == publishes_.end()) {
        fail("delivered-to-addressee",
             fmt::format("{} received {} on {}, which nothing published", e.proc, e.payload, e.channel));
        continue;
      }
      if (p->second->channel != e.channel) {
        fail("delivered-to-addressee",
             fmt::format("{} received {} on {}, published on {}", e.proc, e.payload, e.channel, p->second->channel));
      }
      if (p->second->proc.starts_with("prober-")) reached[e.proc].insert(p->second->proc);
    }
    if (subscribers_.empty()) return;
    if (prober_nodes_.empty()) {
      fail("subscribed-after-faults",
           fmt::format("no probe publish after the run: {} subscribers unchecked", subscribers_.size()));
      return;
    }
    for (const auto& sub : subscribers_) {
      for (const auto& prober : prober_nodes_) {
        if (!reached[sub].contains(prober))
          fail("subscribed-after-faults",
               fmt::format("{} received nothing {} published after the faults healed", sub, prober));
      }
    }
  }

  void check_offer_receipts() {
    std::set<std::tuple<std::string, std::string, std::string>> seen;  // offer id, user, outcome
    for (const auto& e : history_) {
      if (e.type != event_type::offer_receipt) continue;
      if (!seen.emplace(e.payload, e.user, e.outcome).second)
        fail("receipt-once", fmt::format("{} got a second {} receipt for {}", e.payload, e.outcome, e.user));
      if (e.outcome == "timeout" && seen.contains({e.payload, e.user, "acked"}))
        fail("receipt-once", fmt::format("{} got a timeout receipt for {} after its acked one", e.payload, e.user));
      if (e.outcome != "acked") continue;
      if (!acks_.contains({e.payload, e.user})) {
        fail("acked-receipt-was-acked",
             fmt::format("{} has an acked receipt for {}, which no gateway acked", e.payload, e.user));
        continue;
      }
      const auto d = delivered_at_.find(e.payload);
      if (d == delivered_at_.end() || d->second != e.gateway)
        fail("acked-receipt-was-acked", fmt::format("{}'s acked receipt for {} names {}, where it was not delivered",
                                                    e.payload, e.user, e.gateway));
    }
  }

  void check_routable() {
    bool any_probe = !probes_.empty();
    for (const auto& [user, gateways] : holders_) {
      bool alive = false;
      std::string home;
      for (const auto& g : gateways) {
        if (!abandoned_.contains(g)) {
          alive = true;
          home = g;
        }
      }
      if (!alive) continue;
      ++report_.users_probed;
      // Routed by the node to the user's gateway, and delivered there.
      bool reached = false;
      if (auto p = probes_.find(user); p != probes_.end()) {
        for (const auto* probe : p->second) {
          const auto d = delivered_at_.find(probe->payload);
          reached = reached || (probe->outcome == "ok" && gateways.contains(probe->gateway) &&
                                d != delivered_at_.end() && gateways.contains(d->second));
        }
      }
      if (reached) {
        ++report_.users_routable;
      } else if (any_probe) {
        fail("routable-after-faults",
             fmt::format("{} (gateway {}) was not reached after the faults healed", user, home));
      }
    }
    if (!any_probe && report_.users_probed > 0) {
      fail("routable-after-faults", fmt::format("no probe after the run: {} users unchecked", report_.users_probed));
    }
  }

  const std::vector<event>& history_;
  const check_options options_;
  check_report report_;
  std::vector<const event*> acked_;
  std::unordered_map<std::string, const event*> appended_;  // every payload an append carried, by its answer
  std::map<std::string, const event*> reads_;
  std::unordered_map<std::string, std::set<std::string>> holders_;  // user -> gateways that registered it
  std::unordered_map<std::string, const event*> sends_;
  std::unordered_map<std::string, const event*> abandoned_;
  std::unordered_map<std::string, std::vector<const event*>> probes_;
  std::unordered_map<std::string, std::string> delivered_at_;  // message id -> the gateway it first reached
  std::set<std::string> subscribers_;
  std::unordered_map<std::string, const event*> publishes_;
  std::set<std::string> prober_nodes_;
  std::set<std::pair<std::string, std::string>> acks_;  // offer id, user a gateway acked
};

}  // namespace

check_report check(const std::vector<event>& history, const check_options& options) {
  return history_checker(history, options).run();
}

}  // namespace switchyard::chaos

#pragma once
// Offers (capability "offers"; docs/protocol.md §15, docs/offers.md): a
// send with an expiry, an offer id, receipts or an exposure cap; the
// gateway's OfferAck; Withdraw; PendingOffers; ExposureQuery; and the
// sweep that sends receipt timeouts and forgets expired offers.
//
// It keeps the live offers (offer_table) and the exposure counts
// (exposure_table), delivers through fanout::send_offer, and finds where
// a receipt goes: the inbox the send named (routing_table::inbox_owner,
// at the time of the receipt), else the sending connection while it is
// open.
//
// In cluster mode (use_cluster) an offer is delivered on every node
// through the route relay and stays on this node (its origin); an ack, a
// withdraw or a pull this node cannot answer from its own offers is asked
// of the other members (offer_relay), and it answers theirs
// (docs/cluster.md, "Offers"). Exposure is counted and capped by each
// key's owner (route_relay, on this handler's exposure_table).
//
// Loop thread only. Time comes from `now` (the server's clock; tests pass
// their own).

#include "broker/cluster/offer_relay.hpp"
#include "broker/cluster/route_relay.hpp"
#include "broker/tables/exposure_table.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/offer_table.hpp"
#include "broker/requests/peer.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/config/server_config.hpp"
#include "broker/tables/server_counters.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class offer_handler {
 public:
  using clock = std::chrono::steady_clock;

  // Borrows everything for its lifetime. `now` reads the clock.
  offer_handler(const server_config& config, routing_table& routing, fanout& fan, protocol::frame_builder& builder,
                server_counters& counters, std::function<clock::time_point()> now,
                std::shared_ptr<spdlog::logger> logger);

  // Whether a Send uses the offer fields (then routing_handler hands it
  // here, unless is_expiring_durable_send). Inline: every Send asks. A Send
  // whose vtable ends at `stream` (every send of a client without offers)
  // has none of the offer fields: one compare.
  static bool is_offer(const protocol::wire::Send& m) noexcept {
    const auto* vtable = reinterpret_cast<const flatbuffers::Table*>(&m)->GetVTable();
    if (flatbuffers::ReadScalar<flatbuffers::voffset_t>(vtable) <=
        protocol::wire::Send::VT_STREAM + sizeof(flatbuffers::voffset_t)) [[likely]]
      return false;
    return m.expires_in_ms() != 0 || m.offer_id() != 0 || m.receipt_timeout_ms() != 0 || m.cap_max() != 0 ||
           m.cap_window_ms() != 0 || (m.receipt_inbox() && m.receipt_inbox()->size() > 0);
  }
  // Checks the expiry a Publish or a durable Send asks for (> 0): answers
  // the refusal (unsupported_message without "offers" granted,
  // bad_request above max-offer-expiry-ms) and returns true when refused.
  static bool refuse_expiry(peer& from, std::uint64_t request_id, std::uint32_t expires_in_ms,
                            const server_config& config);
  // A Send with a stream whose only offer field is an expiry: a durable send
  // that expires (routing_handler keeps it; the record carries the expiry).
  static bool is_expiring_durable_send(const protocol::wire::Send& m) noexcept {
    return m.stream() && m.stream()->size() > 0 && m.offer_id() == 0 && m.receipt_timeout_ms() == 0 &&
           m.cap_max() == 0 && m.cap_window_ms() == 0 && !(m.receipt_inbox() && m.receipt_inbox()->size() > 0);
  }

  // A Send with an expiry, offer id, receipts or cap (routing_handler has
  // checked the "routing" capability; "offers" is checked here). Answers
  // SendResult with per-key outcomes when it has an offer id or a cap,
  // else as a plain send.
  void send(peer& from, std::uint64_t request_id, const protocol::wire::Send& m);
  void ack(peer& from, std::uint64_t request_id, const protocol::wire::OfferAck& m);
  void withdraw(peer& from, std::uint64_t request_id, const protocol::wire::Withdraw& m);
  void pending(peer& from, std::uint64_t request_id, const protocol::wire::PendingOffers& m);
  void exposure(peer& from, std::uint64_t request_id, const protocol::wire::ExposureQuery& m);

  // Sends the receipt timeouts due, forgets expired offers and stale
  // exposure counts. Returns when it next has work (nullopt: no live offer).
  std::optional<clock::time_point> sweep();
  // Called after each offer is taken: the server arms its sweep timer.
  // `f` gets the new offer's first deadline (receipt timeout or expiry).
  void on_offer_added(std::function<void(clock::time_point)> f) { offer_added_ = std::move(f); }

  // `p` closed: receipts for its offers now go to their receipt inbox only.
  void disconnected(peer& p);

  // Cluster mode (both borrowed until the next call; null, null: one
  // node): offers are delivered through `relay`, and what this node does
  // not hold is asked of the others through `offers` (whose questions this
  // handler answers from now on).
  void use_cluster(route_relay* relay, offer_relay* offers);

  const offer_table& offers() const noexcept { return offers_; }
  const exposure_table& exposure_counts() const noexcept { return exposure_; }

 private:
  struct in_flight;
  // `inbox`: the inbox the receipt names (k.inbox when empty).
  void send_receipt(offer_table::offer& o, const offer_table::key_state& k, std::uint8_t outcome, clock::time_point now,
                    std::string_view inbox = {});

  // Who sent an offer (kept even when the connection has gone).
  struct sender_info {
    std::uint64_t id = 0;
    owner_id owner = 0;
    std::string principal;  // the principal's name ("" = none, or an admin)
    std::weak_ptr<peer> who;
  };
  // An offer send checked and capped, its deliverable keys chosen: what
  // take() needs once their delivery is known. Views borrowed for the call.
  struct send_args {
    std::uint64_t request_id = 0;
    std::uint64_t offer_id = 0;
    clock::time_point now{};
    clock::time_point expires{};  // {} = none
    std::chrono::milliseconds receipt_timeout{0};
    std::string_view receipt_inbox;
    bool tracked = false;  // has an offer id: kept in offers_
    bool counted = false;  // answered with outcomes, counted for exposure
    std::uint32_t capped = 0;
    std::span<const std::string_view> keys;
    protocol::bytes_view payload;
    std::span<const std::size_t> deliver_index;  // the keys delivered, by place in `keys`
    std::span<std::uint8_t> outcomes;            // per key (capped ones set)
    // Cluster mode: the keys' owners counted the keys routed, and left out
    // those whose flag is set (per deliver key) over the cap.
    bool counted_by_owners = false;
    std::span<const std::uint8_t> capped_by_owners;
  };
  // The second half of send(): deliver key j went into `routed_to[j]` ("" =
  // not routed); `unavailable` keys had an owner out of reach;
  // `timed_out`: nodes `silent` did not answer. Keeps a tracked offer,
  // counts exposure, answers on `from` (null: gone).
  void take(peer* from, const sender_info& sender, const send_args& a, std::span<const std::string_view> routed_to,
            std::uint32_t routed, std::uint32_t unavailable, bool timed_out, std::string_view silent);
  // Acks key `key` of this node's offer `id` (every key delivered into
  // `inboxes` when empty), sending receipts; returns the keys acked.
  std::uint32_t ack_here(std::uint64_t id, std::string_view key, std::span<const std::string> inboxes);
  // The tracked offer `id` was kept (or not) once its delivery was known:
  // the acks and withdraws that came meanwhile, applied now.
  void settle_early(std::uint64_t id, in_flight early);
  // Withdraws live offer `o` (this node's): drops its queued copies here,
  // retracts delivered ones, tells the other nodes. Returns the counts.
  offer_relay::withdraw_answer withdraw_here(offer_table::offer& o);
  // Drops or retracts offer `id`'s copies in the inboxes this node holds
  // among `inboxes` (`keys[i]` went into `inboxes[key_inbox[i]]`).
  void retract(std::uint64_t id, std::span<const std::string_view> inboxes, std::span<const std::string_view> keys,
               std::span<const std::uint32_t> key_inbox, std::uint32_t& dropped, std::uint32_t& notified);
  // This node's offers pending for `key`, oldest first, at most `limit`
  // (0 = all) and one frame's worth.
  void pending_here(std::string_view key, std::uint32_t limit, clock::time_point now,
                    std::vector<offer_relay::pending_entry>& out);

  const server_config& config_;
  routing_table& routing_;
  fanout& fanout_;
  protocol::frame_builder& builder_;
  server_counters& counters_;
  std::function<clock::time_point()> now_;
  std::shared_ptr<spdlog::logger> logger_;
  offer_table offers_;
  exposure_table exposure_;
  // Senders of live offers that asked for receipts, by connection id.
  std::unordered_map<std::uint64_t, std::weak_ptr<peer>> senders_;
  std::function<void(clock::time_point)> offer_added_;
  route_relay* relay_ = nullptr;
  // Tracked offers sent across nodes, waiting for their delivery (not in
  // offers_ yet): their ids are taken; acks and withdraws that come
  // meanwhile wait for the offer (at most max_early_acks acks each).
  struct in_flight {
    struct early_ack {
      std::string key;
      std::vector<std::string> inboxes;
    };
    struct withdrawer {
      std::weak_ptr<peer> who;
      std::uint64_t request_id = 0;
      std::uint64_t ticket = 0;
    };
    std::vector<early_ack> acks;
    std::vector<withdrawer> withdraws;
  };
  static constexpr std::size_t max_early_acks = 4096;
  std::unordered_map<std::uint64_t, in_flight> sending_;
  // What the offers waiting for other nodes hold (payload and keys):
  // counted with offers_.bytes() against max-offer-bytes.
  std::size_t sending_bytes_ = 0;
  // Reused per answer: each key's inbox.
  std::vector<std::string_view> answer_gateways_;
  offer_relay* cluster_offers_ = nullptr;
  clock::time_point last_exposure_sweep_{};
  // Reused per send: what became of each key.
  std::vector<std::uint8_t> outcomes_;
  std::vector<std::string_view> deliver_keys_;
  std::vector<std::size_t> deliver_index_;
  std::vector<std::string_view> inbox_of_;
};

}  // namespace switchyard::broker

#pragma once
// offer_relay: offers across nodes (docs/cluster.md, "Offers").
//
// A live offer stays on the node it was sent to, its origin (offer_handler
// keeps it there; route_relay delivers it on any node with its id and the
// time it has left). What a client asks of an offer elsewhere (a gateway's
// OfferAck on the node its device is on, a Withdraw or a PendingOffers on
// another node than the offer's) is asked of every other member: each
// answers from the offers it holds (OfferAsk, OfferReply). A withdrawn
// offer's copies on other nodes are dropped or retracted there
// (OfferWithdrawn, told to every other member).
//
// An ask waits for every member asked, at most the forward timeout; an ack
// or a withdraw ends at the first member that found the offer. Members are
// few (a cluster of a handful of nodes): each ask is one message per
// member, each way.
//
// Memory a client can make this node hold: one entry per ask waiting
// (until answered or the forward timeout), at most max_asks; a pending
// pull's entries (at most one frame's worth per member).
//
// Loop thread only.

#include "broker/cluster/node_bus.hpp"
#include "broker/requests/peer.hpp"
#include "common/asio.hpp"

#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}
namespace switchyard::broker::link {
struct OfferAsk;
struct OfferReply;
struct OfferWithdrawn;
}  // namespace switchyard::broker::link

namespace switchyard::broker {

class offer_relay {
 public:
  // Asks waiting at once; past it an ask is answered unavailable.
  static constexpr std::size_t max_asks = 16'384;

  // An offer pending for a key, as a member listed it.
  struct pending_entry {
    std::uint64_t offer_id = 0;
    std::vector<std::uint8_t> payload;
    std::uint32_t expires_in_ms = 0;
    std::uint32_t age_ms = 0;
  };
  // What the members asked answered, summed.
  struct gathered {
    std::uint32_t found = 0;  // ack: keys acked; withdraw: members that held the offer
    bool forbidden = false;   // withdraw: the offer belongs to another principal
    bool busy = false;        // withdraw: its delivery is under way on its node (retry)
    std::uint32_t dropped = 0, notified = 0, pending = 0;
    std::vector<pending_entry> offers;  // pending: every member's, unsorted
    std::vector<std::uint32_t> counts;  // exposure: per key asked, summed over the members
    std::string silent;                 // the members that did not answer in time ('a', 'b'), or ""
  };
  // Called once with what was gathered, when `who` is still open; the
  // relay closes the peer ticket it holds on `who` after the call.
  using gathered_done = std::function<void(peer& who, const gathered&)>;

  // What this node answers for the others: offer_handler's own offers.
  struct withdraw_answer {
    bool found = false;
    bool forbidden = false;
    bool busy = false;
    std::uint32_t dropped = 0, notified = 0, pending = 0;
  };
  struct local_offers {
    // Acks key `key` (every key delivered into `inboxes` when empty) of
    // offer `id`; returns the keys acked.
    std::function<std::uint32_t(std::uint64_t id, std::string_view key, std::span<const std::string> inboxes)> ack;
    // Withdraws offer `id` when `principal` may ("" = anyone).
    std::function<withdraw_answer(std::uint64_t id, std::string_view principal)> withdraw;
    // Appends the offers pending for `key` (oldest first, at most `limit`,
    // 0 = all; at most one frame's worth).
    std::function<void(std::string_view key, std::uint32_t limit, std::vector<pending_entry>& out)> pending;
    // Per key, the offers counted here in the last `window` (as a key's
    // owner; counts kept from before an ownership move included).
    std::function<void(std::span<const std::string_view> keys, std::chrono::milliseconds window,
                       std::vector<std::uint32_t>& out)>
        exposure;
    // Another node withdrew offer `id`: drop or retract its copies in the
    // inboxes this node holds among `inboxes`; `keys[i]` went into
    // `inboxes[key_inbox[i]]`.
    std::function<void(std::uint64_t id, std::span<const std::string_view> inboxes,
                       std::span<const std::string_view> keys, std::span<const std::uint32_t> key_inbox)>
        withdrawn;
  };

  // Borrows `io` and `bus` for its lifetime.
  offer_relay(asio::io_context& io, node_bus& bus, std::chrono::milliseconds forward_timeout,
              std::shared_ptr<spdlog::logger> logger);
  ~offer_relay();
  offer_relay(const offer_relay&) = delete;
  offer_relay& operator=(const offer_relay&) = delete;

  void set_local(local_offers local) { local_ = std::move(local); }

  // Ask every other member about an offer this node does not hold, for a
  // request `request_id` of `who`; `done` answers it (see gathered_done).
  // With no other member, `done` is called at once. Past max_asks, `who`
  // is answered unavailable here.
  void ask_ack(peer& who, std::uint64_t request_id, std::uint64_t offer_id, std::string_view key,
               std::span<const std::string> inboxes, gathered_done done);
  void ask_withdraw(peer& who, std::uint64_t request_id, std::uint64_t offer_id, std::string_view principal,
                    gathered_done done);
  void ask_pending(peer& who, std::uint64_t request_id, std::string_view key, std::uint32_t limit, gathered_done done);
  void ask_exposure(peer& who, std::uint64_t request_id, std::span<const std::string_view> keys,
                    std::chrono::milliseconds window, gathered_done done);
  // Offer `offer_id`, held here, was withdrawn: every other member drops
  // or retracts its copies in `inboxes` (`keys[i]` went into
  // `inboxes[key_inbox[i]]`). Fire and forget.
  void tell_withdrawn(std::uint64_t offer_id, std::span<const std::string_view> inboxes,
                      std::span<const std::string_view> keys, std::span<const std::uint32_t> key_inbox);

  std::size_t waiting() const noexcept { return asks_.size(); }

 private:
  struct ask;
  using clock = std::chrono::steady_clock;

  // Sends the OfferAsk built by `fill` to every other member and waits.
  struct question {
    std::uint8_t kind = 0;
    std::uint64_t offer_id = 0;
    std::string_view key;
    std::span<const std::string> inboxes;
    std::string_view principal;
    std::uint32_t limit = 0;
    std::span<const std::string_view> keys;
    std::uint32_t window_ms = 0;
  };
  void start(peer& who, std::uint64_t request_id, const question& q, gathered_done done);
  void on_message(remote_node& from, const link::LinkMessage& m);
  void on_ask(remote_node& from, const link::OfferAsk& a);
  void on_reply(remote_node& from, const link::OfferReply& r);
  void on_withdrawn(const link::OfferWithdrawn& w);
  // Answers ask `it` with what it gathered and forgets it.
  void finish(std::map<std::uint64_t, ask>::iterator it);
  void arm_timer();

  node_bus& bus_;
  std::chrono::milliseconds forward_timeout_;
  std::shared_ptr<spdlog::logger> logger_;
  local_offers local_;
  flatbuffers::FlatBufferBuilder builder_{4096};
  std::uint64_t next_ticket_ = 0;
  std::map<std::uint64_t, ask> asks_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Reused per message.
  std::vector<pending_entry> pending_scratch_;
  std::vector<std::string> inbox_scratch_;
  std::vector<std::string_view> view_scratch_, key_scratch_;
  std::vector<std::uint32_t> index_scratch_;
};

}  // namespace switchyard::broker

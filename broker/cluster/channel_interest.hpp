#pragma once
// channel_interest: this node's channel interest as its peers must know it
// (docs/cluster.md, "Channels"), and the Subscribes waiting until they do.
//
// Counts the local (connection, pattern) pairs per pattern: the first pair
// of a pattern is announced to every peer, the last one's end withdrawn.
// An announcement carries a ticket; a Subscribe of a pattern whose
// announcement is not yet acknowledged by every peer is answered once it
// is (so a publish on any node after the Ok reaches the subscriber), or at
// the deadline, when the peers still silent are presumed down (they get
// the whole interest when they answer again; node_bus).
//
// Pure bookkeeping: no I/O, no clock of its own (callers pass `now`).
// Loop thread only.

#include "broker/requests/peer.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace switchyard::broker {

class channel_interest {
 public:
  using clock = std::chrono::steady_clock;
  // A Subscribe to answer Ok once its pattern is confirmed.
  struct waiter {
    std::weak_ptr<peer> who;
    std::uint64_t request_id = 0;
    std::uint64_t ticket = 0;  // the peer's answer ticket (peer::open_ticket), closed when answered
  };

  // A local subscriber of `pattern` came. True when it is the first: the
  // pattern is then in the next delta (take_delta), and waits for the
  // acks of `peers` (node ids), due by `deadline`.
  bool add_local(std::string_view pattern, const std::vector<std::string>& peers, clock::time_point deadline);
  // A local subscriber of `pattern` went. True when it was the last (the
  // pattern is then in the next delta's removals). A pattern gone before
  // its announcement was sent is never announced: its waiters go to
  // `done`.
  bool remove_local(std::string_view pattern, std::vector<waiter>& done);
  // Every pattern with a local subscriber (an InterestSync's content).
  std::vector<std::string> patterns() const;
  std::size_t size() const noexcept { return local_.size(); }

  // The changes since the last take_delta, for one Interest message with
  // `ticket`: the patterns added then wait for that ticket's acks.
  // False when there is nothing to send.
  bool take_delta(std::uint64_t ticket, std::vector<std::string>& add, std::vector<std::string>& remove);

  // Whether `pattern`'s announcement still waits for acks.
  bool is_pending(std::string_view pattern) const { return pending_.contains(std::string(pattern)); }
  // Answer `w` once `pattern` is confirmed. False when it already is
  // (answer now).
  bool wait(std::string_view pattern, waiter w);
  // `node` joined: every announcement not yet confirmed waits for it too
  // (the whole interest it is sent covers them).
  void node_added(std::string_view node);
  // `node` applied `ticket` (sync: an InterestSync, which carries every
  // pattern announced before it, so it confirms every ticket up to it).
  // Waiters now confirmed are appended to `done`.
  void acked(std::string_view node, std::uint64_t ticket, bool sync, std::vector<waiter>& done);
  // `node` left the cluster: nothing waits for it any more.
  void node_gone(std::string_view node, std::vector<waiter>& done);
  // Announcements past their deadline at `now`: their waiters go to
  // `done`, the nodes that did not answer to `silent` (each once).
  void expire(clock::time_point now, std::vector<waiter>& done, std::vector<std::string>& silent);
  // The earliest deadline of an unconfirmed announcement.
  std::optional<clock::time_point> next_deadline() const;
  // Announcements not yet confirmed.
  std::size_t unconfirmed() const noexcept { return pending_.size(); }

 private:
  struct pending {
    std::uint64_t ticket = 0;  // 0: not sent yet (in the delta)
    std::unordered_set<std::string> awaiting;
    clock::time_point deadline;
    std::vector<waiter> waiters;
  };
  // Moves the waiters of `it` to `done` and forgets it.
  void finish(std::unordered_map<std::string, pending>::iterator it, std::vector<waiter>& done);

  std::unordered_map<std::string, std::uint32_t> local_;  // pattern -> local subscribers
  std::unordered_map<std::string, pending> pending_;      // pattern -> its announcement
  std::unordered_set<std::string> delta_add_, delta_remove_;
};

}  // namespace switchyard::broker

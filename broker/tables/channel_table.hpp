#pragma once
// Channel subscriptions: which delivery targets a channel's messages go to.
// Storage only; broker/delivery/fanout.hpp encodes and delivers.

#include "broker/tables/delivery_target.hpp"
#include "broker/tables/subscription_index.hpp"

#include <cstddef>
#include <string_view>
#include <vector>

namespace switchyard::broker {

// Loop thread only. Holds raw target pointers: a target removes all of its
// patterns before it is destroyed.
class channel_table {
 public:
  // Preconditions: protocol::is_valid_pattern(pattern). Return false when the
  // pair was already present / absent.
  bool subscribe(std::string_view pattern, delivery_target* t) { return index_.add(pattern, t); }
  bool unsubscribe(std::string_view pattern, delivery_target* t) { return index_.remove(pattern, t); }

  // The targets subscribed to `channel`, each once. The vector is the
  // index's cache: valid until the next subscribe or unsubscribe.
  // Precondition: protocol::is_valid_channel(channel).
  // Targets that do not receive the channel (delivery_target::receives)
  // are left out.
  const std::vector<delivery_target*>& match(std::string_view channel) {
    return index_.match(channel, [channel](delivery_target* t) { return t->receives(channel); });
  }
  // What targets receive changed (an auth file reload): forget the cached matches.
  void permissions_changed() noexcept { index_.forget_matches(); }

  // Subscriptions (pattern, target pairs).
  std::size_t size() const noexcept { return index_.size(); }

 private:
  subscription_index<delivery_target*> index_;
};

}  // namespace switchyard::broker

#include "broker/delivery/fanout.hpp"

#include <algorithm>

namespace switchyard::broker {

std::size_t fanout::publish(std::string_view channel, protocol::bytes_view payload, const log_position* position) {
  ++counters_.published;
  // delivery_target::deliver never closes a target synchronously, so `subs`
  // (owned by the index's cache) stays valid through the loop.
  const auto& subs = channels_.match(channel);
  if (subs.empty()) return 0;
  frame_ref plain, positioned;  // each encoded at most once, when first needed
  for (delivery_target* t : subs) {
    if (position && t->wants_log_positions()) {
      if (!positioned)
        positioned = arena_.store(builder_.deliver(channel, payload, position->stream, position->seq, position->epoch));
      t->deliver(positioned);
    } else {
      if (!plain) plain = arena_.store(builder_.deliver(channel, payload));
      t->deliver(plain);
    }
  }
  return subs.size();
}

void fanout::deliver_to_inbox(delivery_target* owner, std::string_view inbox, std::span<const std::string_view> keys,
                              protocol::bytes_view payload, const log_position* position) {
  // A log position is a field only targets that asked for it get.
  if (position && owner->wants_log_positions())
    owner->deliver(builder_.inbox_delivery(inbox, keys, payload, position->stream, position->seq, position->epoch));
  else
    owner->deliver(builder_.inbox_delivery(inbox, keys, payload));
}

namespace {
std::uint32_t ms_left(std::chrono::steady_clock::time_point deadline, std::chrono::steady_clock::time_point now) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(left, 1, UINT32_MAX));
}
}  // namespace

std::size_t fanout::publish_expiring(std::string_view channel, protocol::bytes_view payload,
                                     std::chrono::steady_clock::time_point deadline,
                                     std::chrono::steady_clock::time_point now, const log_position* position) {
  ++counters_.published;
  const auto& subs = channels_.match(channel);
  if (subs.empty()) return 0;
  const delivery_meta shared_meta{deadline, 0, false};
  const delivery_meta own_meta{deadline, 0, true};
  frame_ref plain, positioned;  // shared by the targets without the offer fields
  for (delivery_target* t : subs) {
    const bool with_position = position && t->wants_log_positions();
    if (t->wants_offer_fields()) {
      t->deliver(with_position ? builder_.deliver(channel, payload, position->stream, position->seq, position->epoch,
                                                  ms_left(deadline, now))
                               : builder_.deliver(channel, payload, {}, 0, 0, ms_left(deadline, now)),
                 own_meta);
    } else if (with_position) {
      if (!positioned)
        positioned = arena_.store(builder_.deliver(channel, payload, position->stream, position->seq, position->epoch));
      t->deliver(positioned, shared_meta);
    } else {
      if (!plain) plain = arena_.store(builder_.deliver(channel, payload));
      t->deliver(plain, shared_meta);
    }
  }
  return subs.size();
}

void fanout::deliver_offer(delivery_target* owner, std::string_view inbox, std::span<const std::string_view> keys,
                           protocol::bytes_view payload) {
  const delivery_meta& meta = *offer_meta_;
  const log_position* position = owner->wants_log_positions() ? offer_position_ : nullptr;
  const std::string_view stream = position ? std::string_view(position->stream) : std::string_view{};
  const std::uint64_t seq = position ? position->seq : 0, epoch = position ? position->epoch : 0;
  if (owner->wants_offer_fields()) {
    delivery_meta own = meta;
    own.refresh_time_left = meta.deadline != std::chrono::steady_clock::time_point{};
    owner->deliver(
        builder_.inbox_delivery(inbox, keys, payload, stream, seq, epoch, offer_time_left_ms_, meta.offer_id), own);
  } else {
    owner->deliver(builder_.inbox_delivery(inbox, keys, payload, stream, seq, epoch), meta);
  }
}

std::uint32_t fanout::send_offer(std::span<const std::string_view> keys, protocol::bytes_view payload,
                                 const delivery_meta& meta, std::chrono::steady_clock::time_point now,
                                 std::vector<std::string_view>& gateways, const log_position* position) {
  offer_meta_ = &meta;
  offer_position_ = position;
  offer_time_left_ms_ = meta.deadline == std::chrono::steady_clock::time_point{} ? 0 : ms_left(meta.deadline, now);
  const auto routed =
      route_and_group(keys, gateways, routing_.lease_now(),
                      [&](delivery_target* owner, std::string_view inbox, std::span<const std::string_view> ks) {
                        deliver_offer(owner, inbox, ks, payload);
                      });
  offer_meta_ = nullptr;
  offer_position_ = nullptr;
  return routed;
}

std::uint32_t fanout::send_to_users(std::span<const std::string_view> keys, protocol::bytes_view payload,
                                    const log_position* position, std::vector<std::string_view>& gateways) {
  return send_to_users(keys, payload, position, gateways, routing_.lease_now());
}

std::uint32_t fanout::send_to_users(std::span<const std::string_view> keys, protocol::bytes_view payload,
                                    const log_position* position, std::vector<std::string_view>& gateways,
                                    mono_clock::time_point lease_now) {
  return route_and_group(keys, gateways, lease_now,
                         [&](delivery_target* owner, std::string_view inbox, std::span<const std::string_view> ks) {
                           deliver_to_inbox(owner, inbox, ks, payload, position);
                         });
}

template <class Deliver>
std::uint32_t fanout::route_and_group(std::span<const std::string_view> keys, std::vector<std::string_view>& gateways,
                                      mono_clock::time_point lease_now, Deliver&& deliver) {
  gateways.assign(keys.size(), {});
  std::uint32_t routed = 0;
  if (keys.size() == 1) {
    // Send to a user: nothing to group.
    if (const auto to = routing_.route(keys[0], lease_now); to.owner) {
      deliver(to.owner, to.inbox, keys);
      gateways[0] = to.inbox;
      routed = 1;
    }
  } else {
    // Resolve every key, then group by inbox: each inbox gets one delivery
    // listing its keys, encoded once.
    std::size_t used = 0;
    group_index_.clear();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto to = routing_.route(keys[i], lease_now);
      if (!to.owner) continue;
      auto [it, fresh] = group_index_.try_emplace(to.inbox, used);
      if (fresh) {
        if (used == groups_.size()) groups_.emplace_back();
        auto& g = groups_[used++];
        g.inbox = to.inbox;
        g.owner = to.owner;
        g.keys.clear();
      }
      groups_[it->second].keys.push_back(keys[i]);
      gateways[i] = to.inbox;
      ++routed;
    }
    for (std::size_t g = 0; g < used; ++g) deliver(groups_[g].owner, groups_[g].inbox, groups_[g].keys);
  }
  counters_.sends_routed += routed;
  counters_.sends_unrouted += keys.size() - routed;
  return routed;
}

}  // namespace switchyard::broker

#pragma once
// The route workload's checks on each gateway, the same as the peers'
// route clients make (../shared/peers, common.h), so that a route figure
// counts only messages that went where they should.
//
// Payload layout (at least 16 bytes): bytes 0..7 the send's sequence number
// (little-endian u64; all ones for the end sentinel), bytes 8..15 the id of
// the user it was sent to. User u is registered on gateway u % G. On
// gateway g a message is
//  - misrouted if its user is not one of g's (u % G != g, or u is not a
//    registered user), if the broker delivered it for another route key
//    than that user's (one key, "<prefix>user:<u>"), or if it is too short
//    to say;
//  - a reorder if its sequence number is below the one before it in the
//    same inbox (sequences rise within an inbox: one sender, in order);
//    or, checked per user (route --sub-address: across the nodes of a
//    cluster, where sends to different users of one gateway may take
//    different paths, docs/cluster.md "Order"), below the one before it
//    for the same user.
// Each inbox ends with one sentinel (checked for its route like the rest).

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::bench {

constexpr std::uint64_t route_sentinel = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t route_payload_min = 16;
// route --rate: the send time (now_ns) follows the header, bytes 16..23.
constexpr std::size_t timed_payload_min = route_payload_min + 8;

// The users the route workload sends to: uniformly random in [0, users),
// splitmix64 from seed 7 and a multiply-shift into the range, the peers'
// sequence, so both pick the same users in the same order.
class user_picker {
 public:
  explicit user_picker(std::uint64_t users) : users_(users) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(z) * users_) >> 64);
  }

 private:
  std::uint64_t users_;
  std::uint64_t state_ = 7;
};

// Writes the route layout's first 16 bytes into `payload` (at least 16).
inline void put_route_header(std::span<std::byte> payload, std::uint64_t seq, std::uint64_t user) {
  std::memcpy(payload.data(), &seq, 8);
  std::memcpy(payload.data() + 8, &user, 8);
}

// One gateway's checks. on_delivery is called by one thread at a time (the
// gateway's I/O thread); received(), last_ns() and ended() may be read from
// any thread meanwhile; misrouted() and reorder() once deliveries stopped.
class alignas(64) route_checker {
 public:
  // Gateway `gateway` of `gateways`, for `users` users whose route keys
  // are `key_prefix` + "user:" + the user id in decimal. `per_user`:
  // order is checked per user (8 bytes per user of this gateway), else
  // per inbox.
  route_checker(std::uint64_t gateway, std::uint64_t gateways, std::uint64_t users, std::string_view key_prefix = {},
                bool per_user = false)
      : gateway_(gateway), gateways_(gateways), users_(users), key_prefix_(std::string(key_prefix) + "user:") {
    if (per_user) next_seq_of_user_.assign(users / gateways + 1, 0);
  }

  // One delivery into this gateway's inbox at `now_ns`: its payload and the
  // route keys the broker delivered it for. After the sentinel nothing
  // more is counted.
  void on_delivery(std::span<const std::byte> payload, std::span<const std::string_view> route_keys,
                   std::uint64_t now_ns) {
    if (ended_.load(std::memory_order_relaxed)) return;
    if (payload.size() < route_payload_min) {
      ++misrouted_;
      return;
    }
    std::uint64_t seq = 0, user = 0;
    std::memcpy(&seq, payload.data(), 8);
    std::memcpy(&user, payload.data() + 8, 8);
    if (user >= users_ || user % gateways_ != gateway_ || route_keys.size() != 1 || !is_key_of(route_keys[0], user))
      ++misrouted_;
    if (seq == route_sentinel) {
      ended_.store(true, std::memory_order_release);
      return;
    }
    received_.store(received_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    last_ns_.store(now_ns, std::memory_order_relaxed);
    auto& next = next_seq_of_user_.empty() || user >= users_ ? next_seq_ : next_seq_of_user_[user / gateways_];
    if (seq < next) ++reorder_;
    next = seq + 1;
  }

  std::uint64_t received() const noexcept { return received_.load(std::memory_order_relaxed); }
  std::uint64_t last_ns() const noexcept { return last_ns_.load(std::memory_order_relaxed); }
  bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }
  std::uint64_t misrouted() const noexcept { return misrouted_; }
  std::uint64_t reorder() const noexcept { return reorder_; }

 private:
  // Whether `key` is user `user`'s route key (parsed, not looked up: no
  // cache miss per delivery on the gateways' threads).
  bool is_key_of(std::string_view key, std::uint64_t user) const noexcept {
    if (!key.starts_with(key_prefix_)) return false;
    std::uint64_t id = 0;
    const char* end = key.data() + key.size();
    const auto [at, ec] = std::from_chars(key.data() + key_prefix_.size(), end, id);
    return ec == std::errc{} && at == end && id == user && (id == 0 || key[key_prefix_.size()] != '0');
  }

  std::uint64_t gateway_, gateways_, users_;
  std::string key_prefix_;
  std::atomic<std::uint64_t> received_{0};  // data messages (not the sentinel)
  std::atomic<std::uint64_t> last_ns_{0};   // the last data message
  std::atomic<bool> ended_{false};          // the sentinel arrived
  std::uint64_t next_seq_ = 0;
  std::vector<std::uint64_t> next_seq_of_user_;  // per user u of this gateway, at u / gateways (per_user)
  std::uint64_t misrouted_ = 0, reorder_ = 0;
};

// The checks of every gateway together, once deliveries stopped. `ends`
// counts the gateways per end reason: "sentinel", "idle" (none for
// --idle seconds), "deadline", "no_users" (G > U: a gateway nobody is
// registered on gets nothing, not even a sentinel).
struct route_tally {
  std::uint64_t received = 0, min = 0, max = 0;
  std::uint64_t misrouted = 0, reorder = 0;
  std::map<std::string, long> ends;

  // `how_unfinished`: the end reason of a gateway still waiting for its
  // sentinel; `users`: registered users.
  static route_tally of(std::span<const route_checker* const> gateways, std::uint64_t users,
                        const std::string& how_unfinished) {
    route_tally t;
    t.min = gateways.empty() ? 0 : std::numeric_limits<std::uint64_t>::max();
    for (std::size_t g = 0; g < gateways.size(); ++g) {
      const auto& c = *gateways[g];
      t.received += c.received();
      t.min = std::min(t.min, c.received());
      t.max = std::max(t.max, c.received());
      t.misrouted += c.misrouted();
      t.reorder += c.reorder();
      ++t.ends[c.ended() ? "sentinel" : g >= users ? "no_users" : how_unfinished];
    }
    return t;
  }
  // A run passes only with every message where it belonged, in order.
  bool passed() const noexcept { return misrouted == 0 && reorder == 0; }
  // {"sentinel":200} (JSON)
  std::string ends_json() const {
    std::string out = "{";
    for (const auto& [reason, n] : ends) out += (out.size() > 1 ? ",\"" : "\"") + reason + "\":" + std::to_string(n);
    return out + "}";
  }
};

}  // namespace switchyard::bench

#pragma once
// Channels: the subscription index plus at-most-once fan-out.

#include "broker/frame_arena.hpp"
#include "broker/subscription_index.hpp"
#include "protocol/frame_builder.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace switchyard::broker {

class session;

// Owned by server_core; used on the loop thread only. Holds raw session
// pointers: a session removes all of its patterns before it is destroyed.
class channel_table {
 public:
  channel_table(frame_arena& arena, protocol::frame_builder& builder)
      : arena_(arena), builder_(builder) {}

  // Preconditions: protocol::is_valid_pattern(pattern). Return false when the
  // pair was already present / absent.
  bool subscribe(std::string_view pattern, session* s) { return index_.add(pattern, s); }
  bool unsubscribe(std::string_view pattern, session* s) { return index_.remove(pattern, s); }

  // A published message's place in the sequence log.
  struct log_position {
    std::string_view stream;
    std::uint64_t seq = 0;
    std::uint64_t epoch = 0;
  };

  // Encodes one Deliver frame (once, whatever the subscriber count) and
  // hands it to every matching session. With a log position, sessions that
  // were granted "log" get a second encoding that carries it (a field is
  // only sent to peers that declared it). Returns the number of sessions
  // that matched. Precondition: protocol::is_valid_channel(channel).
  std::size_t publish(std::string_view channel, protocol::bytes_view payload, const log_position* position = nullptr);

 private:
  frame_arena& arena_;
  protocol::frame_builder& builder_;
  subscription_index<session*> index_;
};

}  // namespace switchyard::broker

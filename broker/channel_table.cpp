#include "broker/channel_table.hpp"

#include "broker/session.hpp"

namespace switchyard::broker {

std::size_t channel_table::publish(std::string_view channel, protocol::bytes_view payload,
                                   const log_position* position) {
  // Invariant: session::deliver never closes a session synchronously, so
  // `subs` (owned by the index's cache) stays valid through the loop.
  const auto& subs = index_.match(channel);
  if (subs.empty()) return 0;
  frame_ref plain, positioned;  // each encoded at most once, when first needed
  for (session* s : subs) {
    if (position && s->wants_log_positions()) {
      if (!positioned)
        positioned = arena_.store(builder_.deliver(channel, payload, position->stream, position->seq, position->epoch));
      s->deliver(positioned);
    } else {
      if (!plain) plain = arena_.store(builder_.deliver(channel, payload));
      s->deliver(plain);
    }
  }
  return subs.size();
}

}  // namespace switchyard::broker

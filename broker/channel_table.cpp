#include "broker/channel_table.hpp"

#include "broker/session.hpp"

namespace switchyard::broker {

std::size_t channel_table::publish(std::string_view channel, protocol::bytes_view payload) {
  const auto& subs = index_.match(channel);
  if (subs.empty()) return 0;
  const frame_ref frame = arena_.store(builder_.deliver(channel, payload));
  for (session* s : subs) s->deliver(frame);
  return subs.size();
}

}  // namespace switchyard::broker

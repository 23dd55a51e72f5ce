#include "broker/requests/capabilities.hpp"

#include <algorithm>

namespace switchyard::broker {

negotiated_capabilities negotiate(const protocol::wire::Hello& hello, bool log_available) noexcept {
  namespace cap = protocol::capability;
  negotiated_capabilities out;
  if (const auto* asked = hello.capabilities()) {
    for (const auto* name : *asked) {
      const std::string_view c = name->string_view();
      const auto it = std::find(protocol::supported_capabilities.begin(), protocol::supported_capabilities.end(), c);
      if (it == protocol::supported_capabilities.end()) continue;
      if (!log_available && (c == cap::log || c == cap::stream_drops)) continue;
      if (std::find(out.names.begin(), out.names.begin() + out.count, c) != out.names.begin() + out.count) continue;
      out.names[out.count++] = *it;
    }
  }
  for (std::size_t i = 0; i < out.count; ++i) {
    out.set.dropped_notice |= out.names[i] == cap::dropped_notice;
    out.set.publish_ack |= out.names[i] == cap::publish_ack;
    out.set.routing |= out.names[i] == cap::routing;
    out.set.sequence_log |= out.names[i] == cap::log;
    out.set.stream_drops |= out.names[i] == cap::stream_drops;
    out.set.admin |= out.names[i] == cap::admin;
    out.set.offers |= out.names[i] == cap::offers;
  }
  // StreamDropped carries a log position ("log") and is reset by the
  // Dropped notice ("dropped-notice").
  out.set.stream_drops = out.set.stream_drops && out.set.sequence_log && out.set.dropped_notice;
  return out;
}

void withhold_admin(negotiated_capabilities& caps) noexcept {
  const auto end = caps.names.begin() + caps.count;
  const auto kept = std::remove(caps.names.begin(), end, protocol::capability::admin);
  caps.count = static_cast<std::size_t>(kept - caps.names.begin());
  caps.set.admin = false;
}

std::string_view no_log_message(bool log_available) noexcept {
  return log_available ? std::string_view("this needs the \"log\" capability in the hello")
                       : std::string_view("the sequence log is off (the server has no data dir)");
}

std::vector<std::string_view> names_of(const capability_set& set) {
  namespace cap = protocol::capability;
  std::vector<std::string_view> out;
  if (set.dropped_notice) out.push_back(cap::dropped_notice);
  if (set.publish_ack) out.push_back(cap::publish_ack);
  if (set.routing) out.push_back(cap::routing);
  if (set.sequence_log) out.push_back(cap::log);
  if (set.stream_drops) out.push_back(cap::stream_drops);
  if (set.admin) out.push_back(cap::admin);
  if (set.offers) out.push_back(cap::offers);
  return out;
}

}  // namespace switchyard::broker

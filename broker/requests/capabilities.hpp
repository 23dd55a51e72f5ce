#pragma once
// Capability negotiation: what a connection asked for in its hello and was
// granted (docs/protocol.md §3). The wire names are in protocol/limits.hpp.

#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"

#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

namespace switchyard::broker {

// The capabilities granted to one connection.
struct capability_set {
  bool dropped_notice = false;
  bool publish_ack = false;
  bool routing = false;
  bool sequence_log = false;  // the "log" capability: Append, Read, stream admin, log positions
  bool stream_drops = false;  // granted only with "log" and "dropped-notice"
  bool admin = false;         // Drain; may use the reserved --admin-slots (with an auth file: admin principals only)
  bool offers = false;        // expiries, offers, receipts (docs/protocol.md §15); fields also need the flag
};

// The answer to a hello's capability list: the names granted (asked ∩
// supported, each once, in the order asked) and the set. Without a sequence
// log (no data folder), "log" and "stream-drops" are never granted: a client
// asking learns so from the welcome.
struct negotiated_capabilities {
  std::array<std::string_view, protocol::supported_capabilities.size()> names{};
  std::size_t count = 0;
  capability_set set;
};
negotiated_capabilities negotiate(const protocol::wire::Hello& hello, bool log_available) noexcept;
// The wire names of the capabilities in `set`, in supported_capabilities
// order (static strings).
std::vector<std::string_view> names_of(const capability_set& set);

// Takes "admin" out of what was negotiated (a principal that is not an
// admin asked for it): it is then simply not granted, as an unknown
// capability would not be.
void withhold_admin(negotiated_capabilities& caps) noexcept;

// Why a request for the sequence log is refused (unsupported_message): the
// connection did not ask for "log", or the server has no log.
std::string_view no_log_message(bool log_available) noexcept;

}  // namespace switchyard::broker

#pragma once
// When a socket is due a ping or a close: the arithmetic of the hello
// deadline, heartbeats, token expiry and the close grace, with the time
// passed in (unit-tested on made-up times; the gateway's sweep calls it for
// every socket).

#include <chrono>
#include <optional>

namespace switchyard::edge {

using steady_time = std::chrono::steady_clock::time_point;

struct liveness_timing {
  std::chrono::milliseconds hello_timeout{10'000};  // accept -> hello received (the upgrade included)
  std::chrono::milliseconds ping_interval{25'000};  // a ping this long after the last one
  std::chrono::milliseconds dead_after{60'000};     // nothing received this long: dead
  std::chrono::milliseconds close_grace{2'000};     // a close not finished this long: the TCP socket is closed
};

struct liveness {
  steady_time accepted{};
  steady_time last_received{};  // any frame: a message, a pong, a close
  steady_time last_ping{};
  bool upgraded = false;        // the WebSocket handshake is done
  bool hello_received = false;  // its hello arrived (the welcome may still wait for the route)
  std::optional<steady_time> token_expiry;
  std::optional<steady_time> closing_since;  // a close was started
};

enum class liveness_action {
  none,
  ping,           // send a ping (and note last_ping)
  hello_timeout,  // close: no hello in time
  dead,           // close: nothing received for dead_after
  token_expired,  // close: the token's exp passed
  abort,          // the close did not finish within the grace: close the TCP socket
};

// What is due for `s` at `now`: at most one action, the most urgent first
// (abort, hello timeout, token expiry, dead, ping).
liveness_action due(const liveness& s, const liveness_timing& t, steady_time now) noexcept;

}  // namespace switchyard::edge

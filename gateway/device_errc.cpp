#include "gateway/device_errc.hpp"

#include <array>

namespace switchyard::edge {

namespace {

// Close codes: 1001 and 1013 are RFC 6455's "going away" and "try again
// later", 1009 "message too big"; 4000-4999 are the application's range.
constexpr std::array rows{
    device_error_row{device_errc::bad_message, "bad_message", 4000, false,
                     "not a JSON object, an unknown `t`, a missing field or one of the wrong type"},
    device_error_row{device_errc::unauthorized, "unauthorized", 4001, false,
                     "the token is missing, malformed, badly signed, of an algorithm not configured, or names no "
                     "user: get a new token before reconnecting"},
    device_error_row{device_errc::token_expired, "token_expired", 4002, true,
                     "the token's `exp` has passed (or its `nbf` is still ahead): get a fresh token and reconnect "
                     "at once"},
    device_error_row{device_errc::forbidden, "forbidden", 0, false,
                     "the token's `channels` do not allow this channel (the socket stays)"},
    device_error_row{device_errc::hello_timeout, "hello_timeout", 4004, true,
                     "no `hello` within `--hello-timeout-ms` of the upgrade"},
    device_error_row{device_errc::hello_required, "hello_required", 4005, false,
                     "a message before the `hello`, or a second `hello`"},
    device_error_row{device_errc::too_large, "too_large", 1009, false,
                     "a message over `--max-message-bytes`, or a binary frame"},
    device_error_row{device_errc::rate_limited, "rate_limited", 4006, true,
                     "more messages than `--max-messages-per-s` allows after its burst"},
    device_error_row{device_errc::slow_consumer, "slow_consumer", 4007, true,
                     "more than `--max-pending-bytes` waiting to be written, with `--slow-consumer disconnect` "
                     "(with `drop`, messages are dropped and counted instead: a `dropped` message)"},
    device_error_row{device_errc::heartbeat_timeout, "heartbeat_timeout", 4008, true,
                     "nothing (no message, no pong) received for `--dead-after-ms`"},
    device_error_row{device_errc::unavailable, "unavailable", 1013, true,
                     "the broker cannot be reached just now (the route could not be held): reconnect after a "
                     "backoff"},
    device_error_row{device_errc::going_away, "going_away", 1001, true,
                     "the gateway drains or stops: reconnect, to another gateway if there is one, after the "
                     "`retry_after_ms` of the close reason"},
    device_error_row{device_errc::too_many_sockets, "too_many_sockets", 0, true,
                     "the gateway holds `--max-sockets` already: the upgrade is refused with HTTP 503 and a "
                     "`Retry-After`"},
    device_error_row{device_errc::not_found, "not_found", 0, false,
                     "an `unsub` of a channel not subscribed, an `ack` of an offer this socket does not hold"},
    device_error_row{device_errc::internal, "internal", 1011, true, "a fault of the gateway's (a bug: report it)"},
};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (static_cast<std::size_t>(rows[i].code) != i + 1) return false;
  return true;
}
static_assert(in_enum_order(), "device_errc rows must follow the enum's order");

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard.gateway"; }
  std::string message(int v) const override {
    if (v < 1 || v > static_cast<int>(rows.size())) return "unknown gateway error";
    return std::string(rows[static_cast<std::size_t>(v - 1)].name);
  }
};

}  // namespace

std::span<const device_error_row> device_errors() noexcept { return rows; }

const device_error_row& row_of(device_errc e) noexcept {
  const auto i = static_cast<std::size_t>(e) - 1;
  return i < rows.size() ? rows[i] : rows.back();
}

const std::error_category& device_category() noexcept {
  static const category c;
  return c;
}

std::string device_errc_markdown() {
  std::string out =
      "| code | close code | reconnect as is | meaning |\n"
      "| --- | --- | --- | --- |\n";
  for (const auto& r : rows)
    out += "| `" + std::string(r.name) + "` | " + (r.close_code ? std::to_string(r.close_code) : "– (error message)") +
           " | " + (r.retry ? "yes" : "no") + " | " + std::string(r.meaning) + " |\n";
  return out;
}

}  // namespace switchyard::edge

#include "switchyard/error.hpp"

#include "protocol/errc.hpp"

#include <string>

namespace switchyard {
namespace {

static_assert(static_cast<int>(errc::internal) == static_cast<int>(protocol::errc::internal));
static_assert(static_cast<int>(errc::bad_request) == static_cast<int>(protocol::errc::bad_request));
static_assert(static_cast<int>(protocol::last_known_errc) == static_cast<int>(errc::outcome_unknown),
              "a protocol error code was added: add it to switchyard::errc");

// The library's own codes (from 100): the one table of their names and
// messages. Codes 1..99 take both from the protocol.
struct library_code {
  errc code;
  std::string_view name;
  const char* message;
};
constexpr library_code library_codes[] = {
    {errc::not_connected, "not_connected", "not connected"},
    {errc::timeout, "timeout", "timed out waiting for the broker"},
    {errc::invalid_channel, "invalid_channel", "invalid channel name"},
    {errc::invalid_pattern, "invalid_pattern", "invalid subscription pattern"},
    {errc::payload_too_large, "payload_too_large", "payload too large for the server's max frame"},
    {errc::would_deadlock, "would_deadlock", "blocking call on the client's event-loop thread"},
    {errc::protocol_violation, "protocol_violation", "the server violated the protocol"},
    {errc::not_supported, "not_supported", "not supported by the server"},
    {errc::invalid_position, "invalid_position", "a stream position has a sequence but no epoch"},
    {errc::connection_lost, "connection_lost", "the connection was lost before the answer came"},
    {errc::buffer_full, "buffer_full",
     "the buffer for frames to send is full (reconnecting, or wait_for_space is off)"},
    {errc::reconnect_failed, "reconnect_failed", "gave up reconnecting to the broker"},
    {errc::tls_failed, "tls_failed", "TLS set-up or handshake with the broker failed"},
    {errc::not_a_broker, "not_a_broker", "not a Switchyard broker: its answer is not a Switchyard frame"},
};

constexpr bool is_server_code(int value) noexcept { return value > 0 && value < 100; }

const library_code* find_library_code(int value) noexcept {
  for (const auto& c : library_codes)
    if (static_cast<int>(c.code) == value) return &c;
  return nullptr;
}

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard"; }
  std::string message(int value) const override {
    if (is_server_code(value)) return protocol::protocol_category().message(value);
    if (const auto* c = find_library_code(value)) return c->message;
    return "switchyard error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& client_category() noexcept {
  static const category instance;
  return instance;
}

std::string_view error_name(errc e) noexcept {
  const int value = static_cast<int>(e);
  if (is_server_code(value)) return protocol::errc_name(static_cast<protocol::errc>(value));
  if (const auto* c = find_library_code(value)) return c->name;
  return "unknown";
}

}  // namespace switchyard

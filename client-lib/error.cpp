#include "switchyard/error.hpp"

#include "protocol/errc.hpp"

#include <string>

namespace switchyard {
namespace {

static_assert(static_cast<int>(errc::internal) == static_cast<int>(protocol::errc::internal));
static_assert(static_cast<int>(errc::bad_request) == static_cast<int>(protocol::errc::bad_request));
static_assert(static_cast<int>(protocol::last_known_errc) == static_cast<int>(errc::limit_exceeded),
              "a protocol error code was added: add it to switchyard::errc");

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard"; }
  std::string message(int value) const override {
    if (value > 0 && value < 100) return protocol::protocol_category().message(value);
    switch (static_cast<errc>(value)) {
      case errc::not_connected: return "not connected";
      case errc::timeout: return "timed out waiting for the broker";
      case errc::invalid_channel: return "invalid channel name";
      case errc::invalid_pattern: return "invalid subscription pattern";
      case errc::payload_too_large: return "payload too large for the server's max frame";
      case errc::would_deadlock: return "blocking call on the client's event-loop thread";
      case errc::protocol_violation: return "the server violated the protocol";
      case errc::not_supported: return "not supported by the server";
      case errc::invalid_position: return "a stream position has a sequence but no epoch";
      default: return "switchyard error " + std::to_string(value);
    }
  }
};

}  // namespace

const std::error_category& client_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace switchyard

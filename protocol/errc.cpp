#include "protocol/errc.hpp"

#include "protocol/switchyard_generated.h"

#include <string>

namespace switchyard::protocol {
namespace {

static_assert(static_cast<int>(errc::internal) == static_cast<int>(wire::ErrorCode::internal));
static_assert(static_cast<int>(errc::bad_request) == static_cast<int>(wire::ErrorCode::bad_request));
static_assert(static_cast<int>(wire::ErrorCode::MAX) == static_cast<int>(last_known_errc),
              "a wire ErrorCode was added: add it to protocol::errc");

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard.protocol"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::bad_request:
        return "bad request";
      case errc::malformed_frame:
        return "malformed frame";
      case errc::frame_too_large:
        return "frame too large";
      case errc::unsupported_version:
        return "unsupported protocol version";
      case errc::unsupported_message:
        return "unsupported message type";
      case errc::hello_required:
        return "hello required as first frame";
      case errc::hello_timeout:
        return "no hello within the hello timeout";
      case errc::heartbeat_timeout:
        return "peer silent past the heartbeat deadline";
      case errc::too_many_connections:
        return "too many connections";
      case errc::unauthorized:
        return "unauthorized";
      case errc::rate_limited:
        return "rate limited";
      case errc::draining:
        return "server draining";
      case errc::shutting_down:
        return "server shutting down";
      case errc::slow_consumer:
        return "slow consumer";
      case errc::not_found:
        return "not found";
      case errc::no_route:
        return "no route";
      case errc::trimmed:
        return "position trimmed from the log";
      case errc::storage_full:
        return "storage full";
      case errc::internal:
        return "internal server error";
      case errc::inbox_taken:
        return "inbox is open on another live connection";
      case errc::corrupted:
        return "log data corrupted";
      case errc::limit_exceeded:
        return "limit exceeded";
      case errc::forbidden:
        return "forbidden";
      case errc::unavailable:
        return "unavailable";
      case errc::outcome_unknown:
        return "outcome unknown";
    }
    return "protocol error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& protocol_category() noexcept {
  static const category instance;
  return instance;
}

std::string_view errc_name(errc e) noexcept {
  const auto v = static_cast<wire::ErrorCode>(e);
  if (v < wire::ErrorCode::MIN || v > wire::ErrorCode::MAX) return "unknown";
  return wire::EnumNameErrorCode(v);
}

}  // namespace switchyard::protocol

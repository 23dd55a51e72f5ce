// The client library's error codes: names and messages (switchyard/error.hpp).

#include "protocol/errc.hpp"
#include "switchyard/error.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <string_view>

using switchyard::errc;

TEST_CASE("a server-reported code has the protocol's name and message", "[client-lib]") {
  namespace protocol = switchyard::protocol;
  for (int v = 1; v <= static_cast<int>(protocol::last_known_errc); ++v) {
    INFO("code " << v);
    const auto code = static_cast<protocol::errc>(v);
    CHECK(switchyard::error_name(static_cast<errc>(v)) == protocol::errc_name(code));
    CHECK(std::error_code(static_cast<errc>(v)).message() == protocol::make_error_code(code).message());
  }
}

TEST_CASE("each of the library's own codes has a name and a message of its own", "[client-lib]") {
  const errc own[] = {errc::not_connected,     errc::timeout,         errc::invalid_channel,    errc::invalid_pattern,
                      errc::payload_too_large, errc::would_deadlock,  errc::protocol_violation, errc::not_supported,
                      errc::invalid_position,  errc::connection_lost, errc::buffer_full,        errc::reconnect_failed,
                      errc::tls_failed};
  std::set<std::string_view> names;
  std::set<std::string> messages;
  for (const errc e : own) {
    INFO("code " << static_cast<int>(e));
    CHECK(switchyard::error_name(e) != "unknown");
    names.insert(switchyard::error_name(e));
    messages.insert(std::error_code(e).message());
  }
  CHECK(names.size() == std::size(own));
  CHECK(messages.size() == std::size(own));
  CHECK(switchyard::error_name(errc::would_deadlock) == "would_deadlock");
  CHECK(switchyard::error_name(static_cast<errc>(999)) == "unknown");
}

// Unit tests for broker::wire_code, the one mapping from internal errors
// to the wire codes a client sees.

#include "broker/requests/wire_error.hpp"
#include "storage/errc.hpp"

#include <catch2/catch.hpp>

#include <system_error>

using switchyard::broker::wire_code;
namespace protocol = switchyard::protocol;
namespace storage = switchyard::storage;

TEST_CASE("a protocol error keeps its code on the wire", "[broker][errors]") {
  for (int v = 1; v <= static_cast<int>(protocol::last_known_errc); ++v) {
    const auto e = static_cast<protocol::errc>(v);
    CHECK(wire_code(protocol::make_error_code(e)) == e);
  }
}

TEST_CASE("storage errors map to the wire codes a client can act on, the rest to internal", "[broker][errors]") {
  CHECK(wire_code(storage::errc::not_found) == protocol::errc::not_found);
  CHECK(wire_code(storage::errc::trimmed) == protocol::errc::trimmed);
  CHECK(wire_code(storage::errc::storage_full) == protocol::errc::storage_full);
  CHECK(wire_code(storage::errc::corrupted) == protocol::errc::corrupted);
  CHECK(wire_code(storage::errc::invalid_argument) == protocol::errc::bad_request);
  CHECK(wire_code(storage::errc::io_error) == protocol::errc::internal);
  CHECK(wire_code(storage::errc::locked) == protocol::errc::internal);
}

TEST_CASE("an error of another category, or an unknown protocol value, is internal", "[broker][errors]") {
  // Same numeric values as protocol codes, other categories: never taken
  // for them (value 15 is not_found in the protocol).
  CHECK(wire_code(std::make_error_code(std::errc::no_space_on_device)) == protocol::errc::internal);
  CHECK(wire_code(std::error_code(15, std::generic_category())) == protocol::errc::internal);
  CHECK(wire_code(std::error_code(15, std::system_category())) == protocol::errc::internal);
  CHECK(wire_code(std::error_code(999, protocol::protocol_category())) == protocol::errc::internal);
}

// Unit tests for switchyard-cli's output helpers (admin/format.hpp): base64,
// columns, times and error names.

#include "admin/format.hpp"
#include "protocol/errc.hpp"

#include <switchyard/error.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace switchyard::admin;
using namespace std::string_literals;

TEST_CASE("base64 encodes the RFC 4648 test vectors", "[admin]") {
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64("foob") == "Zm9vYg==");
  CHECK(base64("fooba") == "Zm9vYmE=");
  CHECK(base64("foobar") == "Zm9vYmFy");
  CHECK(base64("\x00\xFF\x10"s) == "AP8Q");
}

TEST_CASE("format_table aligns columns, numbers to the right, without trailing blanks", "[admin]") {
  const auto t =
      format_table({{"NAME", "COUNT", "NOTE"}, {"a", "1", ""}, {"longer", "100", "x"}}, {false, true, false});
  CHECK(t ==
        "NAME    COUNT  NOTE\n"
        "a           1\n"
        "longer    100  x\n");
}

TEST_CASE("format_utc and format_duration_ms", "[admin]") {
  CHECK(format_utc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(format_utc(1'796'000'000'123ull) == "2026-11-30T00:53:20.123Z");
  CHECK(format_duration_ms(0) == "0ms");
  CHECK(format_duration_ms(1500) == "1500ms");
  CHECK(format_duration_ms(90'000) == "90s");
  CHECK(format_duration_ms(3'600'000) == "1h");
  CHECK(format_duration_ms(120'000) == "2min");
  CHECK(format_duration_ms(7 * 86'400'000ull) == "7d");
}

TEST_CASE("every protocol error code has the protocol's name in the CLI's JSON", "[admin]") {
  for (int v = 1; v <= static_cast<int>(switchyard::protocol::last_known_errc); ++v) {
    INFO("code " << v);
    CHECK(error_code_name({v, switchyard::client_category()}) ==
          switchyard::protocol::errc_name(static_cast<switchyard::protocol::errc>(v)));
  }
}

TEST_CASE("the CLI's JSON names the library's own errors by their enumerators and system errors connection_failed",
          "[admin]") {
  using switchyard::errc;
  CHECK(error_code_name(errc::not_connected) == "not_connected");
  CHECK(error_code_name(errc::timeout) == "timeout");
  CHECK(error_code_name(errc::not_supported) == "not_supported");
  CHECK(error_code_name(errc::protocol_violation) == "protocol_violation");
  CHECK(error_code_name(errc::payload_too_large) == "payload_too_large");
  CHECK(error_code_name(std::make_error_code(std::errc::connection_refused)) == "connection_failed");
}

TEST_CASE("an elapsed time is shown in its two largest units, rounded down") {
  CHECK(format_elapsed(0) == "0ms");
  CHECK(format_elapsed(999) == "999ms");
  CHECK(format_elapsed(1000) == "1.0s");
  CHECK(format_elapsed(4'567) == "4.5s");
  CHECK(format_elapsed(59'999) == "59.9s");
  CHECK(format_elapsed(60'000) == "1m00s");
  CHECK(format_elapsed(278'702) == "4m38s");
  CHECK(format_elapsed(3'600'000 + 5 * 60'000 + 59'000) == "1h05m");
  CHECK(format_elapsed(2 * 86'400'000ULL + 7 * 3'600'000 + 1) == "2d07h");
}

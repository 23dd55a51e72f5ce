// Unit tests for the UTF-8 checks (text/utf8.hpp).

#include "text/utf8.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace switchyard::text;
using namespace std::string_literals;

TEST_CASE("is_printable_utf8 accepts text and refuses controls and invalid UTF-8", "[text]") {
  CHECK(is_printable_utf8(""));
  CHECK(is_printable_utf8("order 42: {\"ok\":true}"));
  CHECK(is_printable_utf8("gr\xC3\xBC\xC3\x9F \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"));
  CHECK_FALSE(is_printable_utf8("two\nlines"));
  CHECK_FALSE(is_printable_utf8("tab\there"));
  CHECK_FALSE(is_printable_utf8("nul\0"s));
  CHECK_FALSE(is_printable_utf8("del\x7F"));
  CHECK_FALSE(is_printable_utf8("c1 \xC2\x85"));  // U+0085, a C1 control
  CHECK_FALSE(is_printable_utf8("\xFF\xFE"));
  CHECK_FALSE(is_printable_utf8("\xE2\x82"));          // truncated
  CHECK_FALSE(is_printable_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
}

// Unit tests for the JSON writer (text/json_writer.hpp): escaping and nesting.

#include "text/json_writer.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace switchyard::text;
using namespace std::string_literals;

TEST_CASE("json_quote escapes quotes, backslashes and control characters", "[text]") {
  CHECK(json_quote("plain") == R"("plain")");
  CHECK(json_quote(R"(say "hi" \ bye)") == R"("say \"hi\" \\ bye")");
  CHECK(json_quote("a\nb\tc\r\b\f") == R"("a\nb\tc\r\b\f")");
  CHECK(json_quote("\x01\x1f"s) == R"("\u0001\u001f")");
  CHECK(json_quote("nul\0byte"s) == R"("nul\u0000byte")");
  CHECK(json_quote("") == R"("")");
}

TEST_CASE("json_quote keeps valid UTF-8 and replaces invalid bytes with U+FFFD", "[text]") {
  CHECK(json_quote("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  CHECK(json_quote("a\xFF"
                   "b") ==
        "\"a\xEF\xBF\xBD"
        "b\"");
  CHECK(json_quote("\xC3") == "\"\xEF\xBF\xBD\"");                                  // truncated sequence
  CHECK(json_quote("\xC0\xAF") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                  // overlong '/'
  CHECK(json_quote("\xED\xA0\x80") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // a surrogate
}

TEST_CASE("json_writer nests objects and arrays and places commas", "[text]") {
  json_writer j;
  j.begin_object().string("name", "a\"b").number("n", 18446744073709551615ull).boolean("ok", false);
  j.key("list").begin_array().number(1).string("two").begin_object().end_object().begin_array().end_array();
  j.end_array();
  j.key("rtt").decimal(0.12345, 3);
  j.key("empty").begin_object().end_object();
  j.end_object();
  CHECK(j.str() ==
        R"({"name":"a\"b","n":18446744073709551615,"ok":false,"list":[1,"two",{},[]],"rtt":0.123,"empty":{}})");
}

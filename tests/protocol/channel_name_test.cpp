// Unit tests for protocol::is_valid_channel, is_valid_pattern,
// pattern_matches and next_token.

#include "protocol/channel_name.hpp"
#include "tests/support/reference_matcher.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::protocol;
using switchyard::test::random_names;
using switchyard::test::reference_match;

std::string tokens(std::size_t n, std::string_view token = "a") {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += '.';
    s += token;
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// Channel names

TEST_CASE("ordinary dotted channel names are valid", "[protocol]") {
  CHECK(is_valid_channel("orders"));
  CHECK(is_valid_channel("orders.eu.created"));
  CHECK(is_valid_channel("a.b.c.d"));
  CHECK(is_valid_channel("x"));
  CHECK(is_valid_channel("Orders-2024_v1.EU:west/created#1"));
  CHECK(is_valid_channel("!~"));
}

TEST_CASE("an empty channel name is invalid", "[protocol]") {
  CHECK_FALSE(is_valid_channel(""));
  CHECK_FALSE(is_valid_pattern(""));
}

TEST_CASE("channel names with empty tokens from leading, trailing or double dots are invalid", "[protocol]") {
  CHECK_FALSE(is_valid_channel("."));
  CHECK_FALSE(is_valid_channel(".."));
  CHECK_FALSE(is_valid_channel(".orders"));
  CHECK_FALSE(is_valid_channel("orders."));
  CHECK_FALSE(is_valid_channel("orders.eu."));
  CHECK_FALSE(is_valid_channel("orders..eu"));
  CHECK_FALSE(is_valid_channel("orders.eu..created"));
  CHECK_FALSE(is_valid_channel("a.b.c.d."));
}

TEST_CASE("channel names containing spaces are invalid", "[protocol]") {
  CHECK_FALSE(is_valid_channel(" "));
  CHECK_FALSE(is_valid_channel("orders eu"));
  CHECK_FALSE(is_valid_channel(" orders"));
  CHECK_FALSE(is_valid_channel("orders "));
  CHECK_FALSE(is_valid_channel("orders. eu"));
}

TEST_CASE("channel names containing control characters, DEL or non-ASCII bytes are invalid", "[protocol]") {
  CHECK_FALSE(is_valid_channel("orders\teu"));
  CHECK_FALSE(is_valid_channel("orders\n"));
  CHECK_FALSE(is_valid_channel(std::string_view("ord\0ers", 7)));
  CHECK_FALSE(is_valid_channel("orders\x1b"));
  CHECK_FALSE(is_valid_channel("orders\x7f"));
  CHECK_FALSE(is_valid_channel("caf\xc3\xa9"));
  CHECK_FALSE(is_valid_channel("\x80"));
  CHECK_FALSE(is_valid_channel("\xff"));
}

TEST_CASE("a printable stream name is 1 to 255 bytes of printable ASCII without spaces", "[protocol]") {
  CHECK(is_printable_stream_name("orders.eu"));
  CHECK(is_printable_stream_name("a..b*>"));  // not a channel name, but printable
  CHECK(is_printable_stream_name(std::string(255, 's')));
  CHECK_FALSE(is_printable_stream_name(std::string(256, 's')));
  CHECK_FALSE(is_printable_stream_name(""));
  CHECK_FALSE(is_printable_stream_name("bad name with spaces"));
  CHECK_FALSE(is_printable_stream_name("tab\there"));
  CHECK_FALSE(is_printable_stream_name(std::string_view("nul\0", 4)));
  CHECK_FALSE(is_printable_stream_name("del\x7f"));
  CHECK_FALSE(is_printable_stream_name("caf\xc3\xa9"));
}

TEST_CASE("wildcards are not allowed in a channel name", "[protocol]") {
  CHECK_FALSE(is_valid_channel("*"));
  CHECK_FALSE(is_valid_channel(">"));
  CHECK_FALSE(is_valid_channel("orders.*"));
  CHECK_FALSE(is_valid_channel("orders.>"));
  CHECK_FALSE(is_valid_channel("orders.*.created"));
  CHECK_FALSE(is_valid_channel("orders*"));
  CHECK_FALSE(is_valid_channel("or>ders"));
}

TEST_CASE("a channel name of 255 bytes is valid and one of 256 bytes is not", "[protocol]") {
  const std::string at_limit(max_channel_length, 'c');
  const std::string over(max_channel_length + 1, 'c');
  CHECK(is_valid_channel(at_limit));
  CHECK_FALSE(is_valid_channel(over));
  CHECK(is_valid_pattern(at_limit));
  CHECK_FALSE(is_valid_pattern(over));
  // Same limits with dots inside.
  std::string dotted = tokens(16, std::string(15, 'd'));  // 16*15 + 15 = 255
  REQUIRE(dotted.size() == 255);
  CHECK(is_valid_channel(dotted));
  dotted += 'd';
  CHECK_FALSE(is_valid_channel(dotted));
}

TEST_CASE("a channel name of 32 tokens is valid and one of 33 tokens is not", "[protocol]") {
  CHECK(is_valid_channel(tokens(max_channel_tokens)));
  CHECK_FALSE(is_valid_channel(tokens(max_channel_tokens + 1)));
  CHECK(is_valid_pattern(tokens(max_channel_tokens - 1) + ".>"));
  CHECK_FALSE(is_valid_pattern(tokens(max_channel_tokens) + ".>"));
  CHECK(is_valid_pattern(tokens(max_channel_tokens, "*")));
  CHECK_FALSE(is_valid_pattern(tokens(max_channel_tokens + 1, "*")));
}

// ---------------------------------------------------------------------------
// Patterns

TEST_CASE("every valid channel name is also a valid pattern", "[protocol]") {
  for (const char* s : {"orders", "orders.eu.created", "x.y", "A-b_c.D"}) {
    INFO(s);
    CHECK(is_valid_channel(s));
    CHECK(is_valid_pattern(s));
  }
}

TEST_CASE("a star is a valid pattern token at any position", "[protocol]") {
  CHECK(is_valid_pattern("*"));
  CHECK(is_valid_pattern("*.created"));
  CHECK(is_valid_pattern("orders.*"));
  CHECK(is_valid_pattern("orders.*.created"));
  CHECK(is_valid_pattern("*.*.*"));
  CHECK(is_valid_pattern("*.>"));
}

TEST_CASE("a greater-than is a valid pattern token only in last position", "[protocol]") {
  CHECK(is_valid_pattern(">"));
  CHECK(is_valid_pattern("orders.>"));
  CHECK(is_valid_pattern("orders.*.>"));
  CHECK_FALSE(is_valid_pattern(">.a"));
  CHECK_FALSE(is_valid_pattern("orders.>.created"));
  CHECK_FALSE(is_valid_pattern(">.>"));
}

TEST_CASE("wildcards that are only part of a token are invalid in a pattern", "[protocol]") {
  CHECK_FALSE(is_valid_pattern("a*"));
  CHECK_FALSE(is_valid_pattern("*a"));
  CHECK_FALSE(is_valid_pattern("orders.eu*"));
  CHECK_FALSE(is_valid_pattern("orders.**"));
  CHECK_FALSE(is_valid_pattern("orders.>>"));
  CHECK_FALSE(is_valid_pattern("orders.a>"));
  CHECK_FALSE(is_valid_pattern("*>"));
}

TEST_CASE("patterns with empty tokens, spaces or control characters are invalid", "[protocol]") {
  CHECK_FALSE(is_valid_pattern("."));
  CHECK_FALSE(is_valid_pattern(".*"));
  CHECK_FALSE(is_valid_pattern("*."));
  CHECK_FALSE(is_valid_pattern("orders..>"));
  CHECK_FALSE(is_valid_pattern("orders.>."));
  CHECK_FALSE(is_valid_pattern("orders.* "));
  CHECK_FALSE(is_valid_pattern("orders.\t"));
}

// ---------------------------------------------------------------------------
// Matching

TEST_CASE("a literal pattern matches exactly its own channel", "[protocol]") {
  CHECK(pattern_matches("orders", "orders"));
  CHECK(pattern_matches("orders.eu.created", "orders.eu.created"));
  CHECK_FALSE(pattern_matches("orders", "orders.eu"));
  CHECK_FALSE(pattern_matches("orders.eu", "orders"));
  CHECK_FALSE(pattern_matches("orders.eu", "orders.us"));
  CHECK_FALSE(pattern_matches("order", "orders"));
  CHECK_FALSE(pattern_matches("orders", "order"));
  CHECK_FALSE(pattern_matches("orders.e", "orders.eu"));
  CHECK_FALSE(pattern_matches("a.b", "b.a"));
}

TEST_CASE("a star matches exactly one token", "[protocol]") {
  CHECK(pattern_matches("orders.*", "orders.eu"));
  CHECK_FALSE(pattern_matches("orders.*", "orders"));
  CHECK_FALSE(pattern_matches("orders.*", "orders.eu.created"));
  CHECK(pattern_matches("*.created", "orders.created"));
  CHECK_FALSE(pattern_matches("*.created", "orders.eu.created"));
  CHECK(pattern_matches("*.*", "a.b"));
  CHECK_FALSE(pattern_matches("*.*", "a"));
  CHECK_FALSE(pattern_matches("*.*", "a.b.c"));
}

TEST_CASE("a star in the middle matches one token and not two", "[protocol]") {
  CHECK(pattern_matches("orders.*.created", "orders.eu.created"));
  CHECK(pattern_matches("orders.*.created", "orders.us.created"));
  CHECK_FALSE(pattern_matches("orders.*.created", "orders.eu.west.created"));
  CHECK_FALSE(pattern_matches("orders.*.created", "orders.created"));
  CHECK_FALSE(pattern_matches("orders.*.created", "orders.eu.deleted"));
  CHECK_FALSE(pattern_matches("orders.*.created", "billing.eu.created"));
}

TEST_CASE("a trailing greater-than matches one or more tokens but not zero", "[protocol]") {
  CHECK(pattern_matches("orders.>", "orders.eu"));
  CHECK(pattern_matches("orders.>", "orders.eu.created"));
  CHECK(pattern_matches("orders.>", "orders.eu.west.created.v2"));
  CHECK_FALSE(pattern_matches("orders.>", "orders"));
  CHECK_FALSE(pattern_matches("orders.>", "billing.eu"));
  CHECK_FALSE(pattern_matches("orders.>", "ordersx.eu"));
  CHECK(pattern_matches("orders.*.>", "orders.eu.created"));
  CHECK_FALSE(pattern_matches("orders.*.>", "orders.eu"));
}

TEST_CASE("a lone greater-than matches every channel", "[protocol]") {
  CHECK(pattern_matches(">", "a"));
  CHECK(pattern_matches(">", "orders"));
  CHECK(pattern_matches(">", "orders.eu.created"));
  CHECK(pattern_matches(">", tokens(max_channel_tokens)));
}

TEST_CASE("a lone star matches single-token channels only", "[protocol]") {
  CHECK(pattern_matches("*", "a"));
  CHECK(pattern_matches("*", "orders"));
  CHECK_FALSE(pattern_matches("*", "orders.eu"));
  CHECK_FALSE(pattern_matches("*", "a.b.c"));
}

TEST_CASE("pattern_matches agrees with a reference matcher on random patterns and channels", "[protocol]") {
  std::mt19937 rng(7);
  random_names names{.rng = rng, .alphabet = {"a", "b", "ab"}, .max_tokens = 5, .wildcard_odds = 6};
  int matches = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string p = names.pattern();
    const std::string c = names.channel();
    REQUIRE(is_valid_pattern(p));
    REQUIRE(is_valid_channel(c));
    const bool expected = reference_match(p, c);
    INFO("pattern " << p << " channel " << c);
    CHECK(pattern_matches(p, c) == expected);
    matches += expected;
  }
  CHECK(matches > 100);  // the sample is not trivially all-false
}

TEST_CASE("next_token splits off one token and advances past its dot", "[protocol]") {
  std::string_view rest = "orders.eu.created";
  CHECK(next_token(rest) == "orders");
  CHECK(rest == "eu.created");
  CHECK(next_token(rest) == "eu");
  CHECK(rest == "created");
  CHECK(next_token(rest) == "created");
  CHECK(rest.empty());

  std::string_view trailing = "a.";
  CHECK(next_token(trailing) == "a");
  CHECK(trailing.empty());
}

// Unit tests for auth/permission.hpp: operation names, the pattern
// arithmetic (matches, covers, overlap) and permission_rule.

#include "auth/permission.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::auth;
using verdict = permission_rule::subscribe_verdict;

struct pair_case {
  std::string_view a;
  std::string_view b;
  bool expected;
};

}  // namespace

TEST_CASE("every operation name converts to the operation and back") {
  const std::vector<std::string_view> names{"publish",      "subscribe",     "send",
                                            "registry_put", "registry_get",  "registry_delete",
                                            "inbox",        "stream_append", "stream_read"};
  REQUIRE(names.size() == operation_count);
  for (std::size_t i = 0; i < names.size(); ++i) {
    operation op{};
    REQUIRE(from_string(names[i], op));
    CHECK(op == static_cast<operation>(i));
    CHECK(to_string(op) == names[i]);
  }
}

TEST_CASE("an unknown operation name is refused") {
  operation op = operation::inbox;
  CHECK_FALSE(from_string("Publish", op));
  CHECK_FALSE(from_string("", op));
  CHECK_FALSE(from_string("publish ", op));
  CHECK(op == operation::inbox);
}

TEST_CASE("a pattern matches names token by token with * for one token and > for one or more") {
  const std::vector<pair_case> cases{
      {"a", "a", true},         {"a", "b", false},         {"a.b", "a.b", true},
      {"a.b", "a", false},      {"a", "a.b", false},       {"*", "a", true},
      {"*", "a.b", false},      {"a.*", "a.b", true},      {"a.*", "a", false},
      {"a.*.c", "a.b.c", true}, {"a.*.c", "a.b.d", false}, {">", "a", true},
      {">", "a.b.c", true},     {"a.>", "a", false},       {"a.>", "a.b", true},
      {"a.>", "a.b.c", true},   {"a.>", "b.c", false},     {"*.>", "a.b", true},
      {"*.>", "a", false},      {"ab", "a", false},        {"a", "ab", false},
      {"a.b", "a.bc", false},   {"a", "a.", false},        {"orders.>", "orders.eu.created", true},
  };
  for (const auto& c : cases) {
    INFO(c.a << " vs " << c.b);
    CHECK(pattern_matches(c.a, c.b) == c.expected);
  }
}

TEST_CASE("wildcard characters in a name are plain tokens") {
  CHECK(pattern_matches("a.*", "a.*"));
  CHECK(pattern_matches("a.*", "a.>"));
  CHECK_FALSE(pattern_matches("a.b", "a.*"));
  CHECK_FALSE(pattern_matches("a.b", "a.>"));
  CHECK(pattern_matches("a.>", "a.>"));
}

TEST_CASE("empty patterns and names match nothing") {
  CHECK_FALSE(pattern_matches("", ""));
  CHECK_FALSE(pattern_matches(">", ""));
  CHECK_FALSE(pattern_matches("", "a"));
}

TEST_CASE("a pattern covers another when it matches every name the other matches") {
  const std::vector<pair_case> cases{
      {"a", "a", true},        {"a", "b", false},
      {"*", "a", true},        {"a", "*", false},
      {"*", "*", true},        {">", "a", true},
      {">", "*", true},        {">", ">", true},
      {">", "a.b.>", true},    {"*", ">", false},
      {"a.*", "a.>", false},   {"a.>", "a.>", true},
      {"a.>", "a.*", true},    {"a.>", "a.*.created", true},
      {"a.>", "a.b.>", true},  {"a.b.>", "a.>", false},
      {"a.>", "a", false},     {"a.>", "b.>", false},
      {"a.*", "a.b", true},    {"a.*", "a.b.c", false},
      {"a.b", "a.*", false},   {"*.b", "a.b", true},
      {"*.b", "*.b", true},    {"*.b", "*.c", false},
      {"a.b", "a.b.c", false}, {"a.b.c", "a.b", false},
      {"*.*", "a.>", false},   {"orders.>", "orders.*.created", true},
  };
  for (const auto& c : cases) {
    INFO(c.a << " covers " << c.b);
    CHECK(pattern_covers(c.a, c.b) == c.expected);
  }
}

TEST_CASE("two patterns overlap exactly when some name matches both") {
  const std::vector<pair_case> cases{
      {"a", "a", true},
      {"a", "b", false},
      {"a.>", "*.b", true},
      {"a.*", "a.b.c", false},
      {"a.>", "a", false},
      {">", "a", true},
      {">", ">", true},
      {"*", "a.b", false},
      {"*", ">", true},
      {"a.*", "*.b", true},
      {"a.*", "b.*", false},
      {"a.b.>", "a.>", true},
      {"a.b.>", "a.c.>", false},
      {"*.*.c", "a.>", true},
      {"*.*", "a.b.c", false},
      {"a.*.c", "a.b.d", false},
      {"a.*.c", "*.b.*", true},
      {"admin.>", ">", true},
      {"admin.>", "orders.>", false},
  };
  for (const auto& c : cases) {
    INFO(c.a << " overlaps " << c.b);
    CHECK(patterns_overlap(c.a, c.b) == c.expected);
    CHECK(patterns_overlap(c.b, c.a) == c.expected);
  }
}

TEST_CASE("a rule pattern is 1 to 255 bytes of non-empty printable tokens with > last") {
  CHECK(is_valid_rule_pattern("a"));
  CHECK(is_valid_rule_pattern(">"));
  CHECK(is_valid_rule_pattern("*"));
  CHECK(is_valid_rule_pattern("orders.*.created"));
  CHECK(is_valid_rule_pattern("gw-eu-1.>"));
  CHECK(is_valid_rule_pattern(std::string(255, 'x')));
  CHECK_FALSE(is_valid_rule_pattern(std::string(256, 'x')));
  CHECK_FALSE(is_valid_rule_pattern(""));
  CHECK_FALSE(is_valid_rule_pattern("."));
  CHECK_FALSE(is_valid_rule_pattern("a."));
  CHECK_FALSE(is_valid_rule_pattern(".a"));
  CHECK_FALSE(is_valid_rule_pattern("a..b"));
  CHECK_FALSE(is_valid_rule_pattern(">.a"));
  CHECK_FALSE(is_valid_rule_pattern("a.>.b"));
  CHECK_FALSE(is_valid_rule_pattern("a b"));
  CHECK_FALSE(is_valid_rule_pattern("a\tb"));
  CHECK_FALSE(is_valid_rule_pattern(std::string_view("a\0b", 3)));
  CHECK_FALSE(is_valid_rule_pattern("a\x7f"));
  CHECK_FALSE(is_valid_rule_pattern("caf\xc3\xa9"));
}

TEST_CASE("a name is allowed when an allow pattern matches and no deny pattern does") {
  const permission_rule rule({"orders.>", "audit.*"}, {"orders.secret.>"});
  CHECK(rule.allows("orders.eu.created"));
  CHECK(rule.allows("audit.x"));
  CHECK_FALSE(rule.allows("audit.x.y"));
  CHECK_FALSE(rule.allows("admin.stop"));
  CHECK_FALSE(rule.allows("orders.secret.keys"));  // deny wins
  CHECK(rule.allows("orders.secret"));             // `orders.secret.>` needs one more token
  CHECK_FALSE(rule.allows_everything());
  CHECK_FALSE(rule.allows_nothing());
}

TEST_CASE("deny wins over an allow of everything") {
  const permission_rule rule({">"}, {"admin.>"});
  CHECK_FALSE(rule.allows_everything());
  CHECK(rule.allows("orders.x"));
  CHECK_FALSE(rule.allows("admin.x"));
}

TEST_CASE("an empty allow list allows nothing") {
  const permission_rule defaulted;
  CHECK(defaulted.allows_nothing());
  CHECK_FALSE(defaulted.allows("a"));
  const permission_rule deny_only({}, {"a"});
  CHECK(deny_only.allows_nothing());
  CHECK_FALSE(deny_only.allows("b"));
  CHECK(deny_only.check_subscribe("b") == verdict::denied);
}

TEST_CASE("an allow of > with no deny allows everything") {
  const permission_rule rule({"a", ">"}, {});
  CHECK(rule.allows_everything());
  CHECK(rule.allows("anything.at.all"));
  CHECK_FALSE(permission_rule({"*"}, {}).allows_everything());
}

TEST_CASE("a rule answers for every shape of pattern exactly as pattern_matches does") {
  // allows() sorts patterns by shape (>, *, literal, literal with a > tail,
  // the rest) to match without splitting names; each shape, alone as the
  // allow list, must agree with the token-by-token matcher on every name.
  const std::vector<std::string> patterns{">",    "*",     "a",        "a.b",    "a.>",    "a.b.>",
                                          "ab.>", "a.*",   "*.b",      "*.>",    "a.*.c",  "a.*.>",
                                          "x",    "a.b.c", "orders.>", "user:1", "a-b.c_d"};
  const std::vector<std::string> names{"a",       "a.",       "a.b",    "a.b.",    "a.b.c",   "a.bc",     "ab",
                                       "ab.c",    "b",        ".a",     "a..b",    ".",       "..",       "a.*",
                                       "a.>",     "*",        ">",      "x.a.b",   "a.b.c.d", "aa.b",     "orders",
                                       "orders.", "orders.x", "user:1", "user:10", "a-b.c_d", "a-b.c_d.e"};
  for (const auto& p : patterns) {
    const permission_rule alone({p}, {});
    const permission_rule denied({">"}, {p});
    for (const auto& n : names) {
      INFO("pattern '" << p << "', name '" << n << "'");
      CHECK(alone.allows(n) == pattern_matches(p, n));
      CHECK(denied.allows(n) == !pattern_matches(p, n));
    }
  }
}

TEST_CASE("cached answers stay right past max_cached distinct names") {
  // More patterns than direct_match_limit, so answers go through the cache.
  std::vector<std::string> allow{"n.>"};
  for (std::size_t i = 0; i < permission_rule::direct_match_limit; ++i) allow.push_back("filler." + std::to_string(i));
  const permission_rule rule(allow, {"n.*.odd"});
  // Three rounds over more names than the cache holds: every answer, fresh
  // or cached, agrees with the rule.
  const std::size_t names = permission_rule::max_cached + 100;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < names; ++i) {
      const std::string even = "n." + std::to_string(i) + ".even";
      const std::string odd = "n." + std::to_string(i) + ".odd";
      const std::string other = "m." + std::to_string(i);
      REQUIRE(rule.allows(even));
      REQUIRE_FALSE(rule.allows(odd));
      REQUIRE_FALSE(rule.allows(other));
    }
  }
}

TEST_CASE("a subscription covered by a deny pattern is denied") {
  const permission_rule rule({">"}, {"admin.>"});
  CHECK(rule.check_subscribe("admin.>") == verdict::denied);
  CHECK(rule.check_subscribe("admin.*") == verdict::denied);
  CHECK(rule.check_subscribe("admin.stop") == verdict::denied);
}

TEST_CASE("a subscription no allow pattern covers is denied") {
  const permission_rule rule({"orders.>", "audit.*"}, {});
  CHECK(rule.check_subscribe(">") == verdict::denied);
  CHECK(rule.check_subscribe("orders") == verdict::denied);
  CHECK(rule.check_subscribe("audit.>") == verdict::denied);  // `audit.*` covers one token only
  CHECK(rule.check_subscribe("*.x") == verdict::denied);
}

TEST_CASE("a subscription covered by an allow pattern and overlapping no deny is allowed") {
  const permission_rule rule({"orders.>"}, {"orders.secret.>"});
  CHECK(rule.check_subscribe("orders.eu.>") == verdict::allowed);
  CHECK(rule.check_subscribe("orders.*") == verdict::allowed);  // the deny needs three tokens
  CHECK(rule.check_subscribe("orders.secret") == verdict::allowed);
  CHECK(rule.check_subscribe("orders.*.created") == verdict::allowed_filtered);  // orders.secret.created
}

TEST_CASE("an allowed subscription overlapping a deny pattern is filtered") {
  const permission_rule rule({">"}, {"admin.>", "orders.secret.*"});
  CHECK(rule.check_subscribe(">") == verdict::allowed_filtered);
  CHECK(rule.check_subscribe("*.stop") == verdict::allowed_filtered);
  CHECK(rule.check_subscribe("orders.*.keys") == verdict::allowed_filtered);
  CHECK(rule.check_subscribe("orders.eu.keys") == verdict::allowed);
}

// Unit tests for broker::subscription_index.

#include "broker/tables/subscription_index.hpp"
#include "protocol/channel_name.hpp"
#include "tests/support/reference_matcher.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using switchyard::broker::subscription_index;
using switchyard::protocol::pattern_matches;
using switchyard::test::random_names;

std::vector<int> match(subscription_index<int>& idx, std::string_view channel) {
  std::vector<int> v = idx.match(channel);  // copy: the reference dies on the next call
  std::sort(v.begin(), v.end());
  return v;
}

using ints = std::vector<int>;

}  // namespace

TEST_CASE("subscription index add reports whether the pair was new", "[broker]") {
  subscription_index<int> idx;
  CHECK(idx.add("orders.eu", 1));
  CHECK_FALSE(idx.add("orders.eu", 1));
  CHECK(idx.add("orders.eu", 2));
  CHECK(idx.add("orders.*", 1));
  CHECK_FALSE(idx.add("orders.*", 1));
  CHECK(idx.add("orders.>", 1));
  CHECK_FALSE(idx.add("orders.>", 1));
  CHECK(idx.add(">", 1));
  CHECK_FALSE(idx.add(">", 1));
  CHECK(idx.size() == 5);
}

TEST_CASE("subscription index remove reports whether the pair was present", "[broker]") {
  subscription_index<int> idx;
  CHECK_FALSE(idx.remove("orders.eu", 1));
  REQUIRE(idx.add("orders.eu", 1));
  REQUIRE(idx.add("orders.>", 1));
  REQUIRE(idx.add("orders.*", 1));
  CHECK_FALSE(idx.remove("orders.eu", 2));    // other subscriber
  CHECK_FALSE(idx.remove("orders", 1));       // prefix of a pattern
  CHECK_FALSE(idx.remove("orders.eu.x", 1));  // longer than a pattern
  CHECK_FALSE(idx.remove("orders.us", 1));    // sibling
  CHECK_FALSE(idx.remove("*.eu", 1));         // star where a literal was added
  CHECK_FALSE(idx.remove(">", 1));            // tail at the wrong level
  CHECK(idx.size() == 3);
  CHECK(idx.remove("orders.eu", 1));
  CHECK_FALSE(idx.remove("orders.eu", 1));
  CHECK(idx.remove("orders.>", 1));
  CHECK_FALSE(idx.remove("orders.>", 1));
  CHECK(idx.remove("orders.*", 1));
  CHECK_FALSE(idx.remove("orders.*", 1));
  CHECK(idx.size() == 0);
}

TEST_CASE("subscription index size counts pattern-subscriber pairs", "[broker]") {
  subscription_index<int> idx;
  CHECK(idx.size() == 0);
  idx.add("a", 1);
  idx.add("a", 2);
  idx.add("a.b", 1);
  idx.add("a", 1);  // duplicate, not counted
  CHECK(idx.size() == 3);
  idx.remove("a", 2);
  idx.remove("a", 2);  // absent, not counted
  CHECK(idx.size() == 2);
}

TEST_CASE("subscription index matches exact patterns only on the same channel", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.eu", 1);
  idx.add("orders.eu", 2);
  idx.add("orders", 3);
  idx.add("orders.eu.created", 4);
  CHECK(match(idx, "orders.eu") == ints{1, 2});
  CHECK(match(idx, "orders") == ints{3});
  CHECK(match(idx, "orders.eu.created") == ints{4});
  CHECK(match(idx, "orders.us").empty());
  CHECK(match(idx, "billing").empty());
}

TEST_CASE("subscription index star patterns match exactly one token", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.*", 1);
  idx.add("orders.*.created", 2);
  idx.add("*", 3);
  idx.add("*.eu", 4);
  CHECK(match(idx, "orders.eu") == ints{1, 4});
  CHECK(match(idx, "orders") == ints{3});
  CHECK(match(idx, "orders.eu.created") == ints{2});
  CHECK(match(idx, "orders.eu.west.created").empty());
  CHECK(match(idx, "billing.eu") == ints{4});
}

TEST_CASE("subscription index greater-than patterns match one or more trailing tokens", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.>", 1);
  idx.add(">", 2);
  idx.add("orders.*.>", 3);
  CHECK(match(idx, "orders") == ints{2});
  CHECK(match(idx, "orders.eu") == ints{1, 2});
  CHECK(match(idx, "orders.eu.created") == ints{1, 2, 3});
  CHECK(match(idx, "orders.eu.west.created") == ints{1, 2, 3});
  CHECK(match(idx, "billing.eu") == ints{2});
}

TEST_CASE("a subscriber matching through several patterns appears once", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.eu.created", 1);
  idx.add("orders.*.created", 1);
  idx.add("orders.>", 1);
  idx.add(">", 1);
  idx.add("*.eu.*", 1);
  idx.add("orders.>", 2);
  const auto& r = idx.match("orders.eu.created");
  CHECK(r.size() == 2);
  CHECK(std::count(r.begin(), r.end(), 1) == 1);
  CHECK(std::count(r.begin(), r.end(), 2) == 1);
}

TEST_CASE("a removed pattern stops matching while other subscribers on it still match", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.*.created", 1);
  idx.add("orders.*.created", 2);
  idx.add("orders.>", 3);
  CHECK(match(idx, "orders.eu.created") == ints{1, 2, 3});
  REQUIRE(idx.remove("orders.*.created", 1));
  CHECK(match(idx, "orders.eu.created") == ints{2, 3});
  REQUIRE(idx.remove("orders.*.created", 2));
  CHECK(match(idx, "orders.eu.created") == ints{3});
  REQUIRE(idx.remove("orders.>", 3));
  CHECK(match(idx, "orders.eu.created").empty());
  // The pruned path can be added again.
  CHECK(idx.add("orders.*.created", 1));
  CHECK(match(idx, "orders.eu.created") == ints{1});
}

TEST_CASE("removing a long pattern keeps a shorter pattern on the same path", "[broker]") {
  subscription_index<int> idx;
  idx.add("a.b.c", 1);
  idx.add("a.b", 2);
  idx.add("a.>", 3);
  REQUIRE(idx.remove("a.b.c", 1));
  CHECK(match(idx, "a.b") == ints{2, 3});
  CHECK(match(idx, "a.b.c") == ints{3});
  CHECK(idx.size() == 2);
}

TEST_CASE("removing a short pattern keeps longer patterns below it", "[broker]") {
  subscription_index<int> idx;
  idx.add("a.b", 2);
  idx.add("a.b.c", 1);
  idx.add("a.*.c", 4);
  idx.add("a.>", 3);
  REQUIRE(idx.remove("a.b", 2));
  REQUIRE(idx.remove("a.>", 3));
  CHECK(match(idx, "a.b").empty());
  CHECK(match(idx, "a.b.c") == ints{1, 4});
  CHECK(match(idx, "a.x.c") == ints{4});
}

TEST_CASE("a match after adding a matching pattern sees the new subscriber", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.eu", 1);
  CHECK(match(idx, "orders.eu") == ints{1});  // now cached
  idx.add("orders.*", 2);
  CHECK(match(idx, "orders.eu") == ints{1, 2});
  idx.add(">", 3);
  CHECK(match(idx, "orders.eu") == ints{1, 2, 3});
  CHECK(match(idx, "billing") == ints{3});
}

TEST_CASE("a match after removing a pattern no longer sees the subscriber", "[broker]") {
  subscription_index<int> idx;
  idx.add("orders.>", 1);
  idx.add("orders.eu", 2);
  CHECK(match(idx, "orders.eu") == ints{1, 2});  // now cached
  CHECK(match(idx, "orders.us") == ints{1});
  idx.remove("orders.>", 1);
  CHECK(match(idx, "orders.eu") == ints{2});
  CHECK(match(idx, "orders.us").empty());
}

TEST_CASE("a failed add or remove leaves cached matches correct", "[broker]") {
  subscription_index<int> idx;
  idx.add("a.*", 1);
  CHECK(match(idx, "a.b") == ints{1});
  CHECK_FALSE(idx.add("a.*", 1));
  CHECK_FALSE(idx.remove("a.b", 1));
  CHECK(match(idx, "a.b") == ints{1});
}

TEST_CASE("subscription index stays correct after its result cache overflows", "[broker]") {
  using sidx = subscription_index<int>;
  subscription_index<int> idx;
  idx.add("load.*", 1);
  idx.add("load.7", 2);
  const int n = static_cast<int>(sidx::max_cache_entries) + 100;
  for (int i = 0; i < n; ++i) {
    const std::string channel = "load." + std::to_string(i);
    const auto& r = idx.match(channel);
    if (i == 7) {
      CHECK(std::vector<int>(r.begin(), r.end()) == ints{1, 2});
    } else if (r.size() != 1 || r[0] != 1) {
      FAIL("wrong result for " << channel);
    }
  }
  CHECK(match(idx, "load.7") == ints{1, 2});
  CHECK(match(idx, "load.8") == ints{1});
  CHECK(match(idx, "load") == ints{});
}

TEST_CASE("subscription index works with pointer subscribers", "[broker]") {
  int a = 0, b = 0;
  subscription_index<int*> idx;
  CHECK(idx.add("x.>", &a));
  CHECK(idx.add("x.y", &b));
  CHECK_FALSE(idx.add("x.y", &b));
  auto r = idx.match("x.y");
  std::sort(r.begin(), r.end());
  std::vector<int*> expected{&a, &b};
  std::sort(expected.begin(), expected.end());
  CHECK(r == expected);
  CHECK(idx.remove("x.>", &a));
  CHECK(idx.match("x.y") == std::vector<int*>{&b});
}

TEST_CASE("subscription index agrees with brute-force pattern matching on random data", "[broker]") {
  std::mt19937 rng(1234);
  random_names names{.rng = rng, .alphabet = {"a", "b", "c"}, .max_tokens = 4, .wildcard_odds = 5};

  subscription_index<int> idx;
  std::set<std::pair<std::string, int>> pairs;
  for (int i = 0; i < 200; ++i) {
    std::string p = names.pattern();
    REQUIRE(switchyard::protocol::is_valid_pattern(p));
    const int sub = static_cast<int>(rng() % 40);
    const bool inserted = pairs.emplace(p, sub).second;
    INFO("add " << p << " for " << sub);
    CHECK(idx.add(p, sub) == inserted);
  }
  REQUIRE(idx.size() == pairs.size());

  std::vector<std::string> channels;
  for (int i = 0; i < 500; ++i) channels.push_back(names.channel());

  auto brute = [&](const std::string& channel) {
    std::set<int> s;
    for (const auto& [p, sub] : pairs)
      if (pattern_matches(p, channel)) s.insert(sub);
    return std::vector<int>(s.begin(), s.end());
  };
  auto cross_check = [&] {
    std::size_t non_empty = 0;
    for (const auto& c : channels) {
      const auto expected = brute(c);
      non_empty += !expected.empty();
      const auto got = match(idx, c);
      if (got != expected) FAIL_CHECK("channel " << c << ": index and brute force disagree");
    }
    return non_empty;
  };
  CHECK(cross_check() > 100);

  // Remove about half of the pairs (plus some absent ones) and compare again.
  std::vector<std::pair<std::string, int>> all(pairs.begin(), pairs.end());
  for (std::size_t i = 0; i < all.size(); i += 2) {
    CHECK(idx.remove(all[i].first, all[i].second));
    pairs.erase(all[i]);
  }
  for (int i = 0; i < 50; ++i) {
    const std::string p = names.pattern();
    const int sub = 100 + i;  // never added
    CHECK_FALSE(idx.remove(p, sub));
  }
  CHECK(idx.size() == pairs.size());
  cross_check();

  // Remove everything: nothing matches any more.
  for (const auto& [p, sub] : std::vector<std::pair<std::string, int>>(pairs.begin(), pairs.end()))
    CHECK(idx.remove(p, sub));
  pairs.clear();
  CHECK(idx.size() == 0);
  CHECK(cross_check() == 0);
}

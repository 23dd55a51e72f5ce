// Unit tests for broker::flat_index, with a real and a colliding hash.

#include "broker/tables/flat_index.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct node {
  std::string key;
  int value = 0;
};

// Every key hashes to one of 4 values, three of them at the very end of any
// slot array: long runs that wrap around to the start, where they meet the
// run of the fourth, are the normal case.
struct colliding_hash {
  std::size_t operator()(std::string_view s) const noexcept {
    static constexpr std::size_t homes[4] = {~std::size_t{0}, ~std::size_t{0} - 6, ~std::size_t{0} - 12, 2};
    return s.empty() ? 0 : homes[static_cast<unsigned char>(s.back()) % 4];
  }
};

template <class Index>
std::vector<std::unique_ptr<node>> fill(Index& index, int n, const std::string& prefix = "user:") {
  std::vector<std::unique_ptr<node>> nodes;
  for (int i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<node>(node{prefix + std::to_string(i), i}));
    index.insert(nodes.back().get());
  }
  return nodes;
}

// Checks the index holds exactly `live` (by key and identity).
template <class Index>
void check_holds(const Index& index, const std::vector<node*>& live, const std::vector<std::string>& absent) {
  REQUIRE(index.size() == live.size());
  for (const node* n : live) REQUIRE(index.find(n->key) == n);
  for (const auto& k : absent) REQUIRE(index.find(k) == nullptr);
  std::size_t seen = 0;
  index.for_each([&](const node& n) {
    ++seen;
    REQUIRE(std::find(live.begin(), live.end(), &n) != live.end());
  });
  REQUIRE(seen == live.size());
}

}  // namespace

using switchyard::broker::flat_index;

TEST_CASE("flat index finds what was inserted and nothing else", "[broker]") {
  flat_index<node, &node::key> index;
  CHECK(index.find("user:1") == nullptr);
  auto nodes = fill(index, 1000);
  CHECK(index.size() == 1000);
  CHECK(index.capacity() >= 2000);  // at most half full
  for (const auto& n : nodes) REQUIRE(index.find(n->key) == n.get());
  CHECK(index.find("user:1000") == nullptr);
  CHECK(index.find("user:") == nullptr);
  CHECK(index.find("") == nullptr);
  CHECK(index.find("user:10000") == nullptr);
}

TEST_CASE("flat index erase keeps every other key reachable, through colliding runs", "[broker]") {
  flat_index<node, &node::key, colliding_hash> index;
  auto nodes = fill(index, 300);
  std::vector<node*> live;
  for (auto& n : nodes) live.push_back(n.get());
  std::vector<std::string> absent;
  std::mt19937 rng(11);
  // Erase in a random order, checking everything after each step for the
  // first hundred, then in bulk: a wrong backward shift strands a key.
  std::shuffle(live.begin(), live.end(), rng);
  for (int step = 0; step < 250; ++step) {
    node* gone = live.back();
    live.pop_back();
    index.erase(gone);
    absent.push_back(gone->key);
    if (step < 100 || step % 25 == 0) check_holds(index, live, absent);
  }
  check_holds(index, live, absent);
}

TEST_CASE("flat index erase and reinsert of the same keys leaves no stale slots", "[broker]") {
  flat_index<node, &node::key> index;
  auto nodes = fill(index, 64);
  for (int round = 0; round < 50; ++round) {
    for (int i = round % 3; i < 64; i += 3) index.erase(nodes[static_cast<std::size_t>(i)].get());
    for (int i = round % 3; i < 64; i += 3) index.insert(nodes[static_cast<std::size_t>(i)].get());
  }
  std::vector<node*> live;
  for (auto& n : nodes) live.push_back(n.get());
  check_holds(index, live, {"user:64", "user:-1"});
}

TEST_CASE("flat index gives memory back after a mass erase", "[broker]") {
  flat_index<node, &node::key> index;
  auto nodes = fill(index, 100000);
  const std::size_t full = index.capacity();
  for (std::size_t i = 10; i < nodes.size(); ++i) index.erase(nodes[i].get());
  CHECK(index.size() == 10);
  CHECK(index.capacity() < full / 1000);
  std::vector<node*> live;
  for (std::size_t i = 0; i < 10; ++i) live.push_back(nodes[i].get());
  check_holds(index, live, {"user:10", "user:99999"});
}

TEST_CASE("flat index compares keys, not only hash bits", "[broker]") {
  // All keys share a hash: only the key comparison tells them apart.
  struct one_hash {
    std::size_t operator()(std::string_view) const noexcept { return 42; }
  };
  flat_index<node, &node::key, one_hash> index;
  auto nodes = fill(index, 20, "k");
  for (const auto& n : nodes) REQUIRE(index.find(n->key) == n.get());
  CHECK(index.find("k20") == nullptr);
  CHECK(index.find("x") == nullptr);
}

TEST_CASE("flat index prefetch hints are safe on any key, present or not", "[broker]") {
  flat_index<node, &node::key> index;
  index.prefetch_slot("user:1");  // empty: no slots to touch
  index.prefetch_node("user:1");
  auto nodes = fill(index, 100);
  for (const std::string_view k : {"user:1", "user:99", "nobody", ""}) {
    index.prefetch_slot(k);
    index.prefetch_node(k);
  }
  CHECK(index.find("user:99") == nodes[99].get());
  CHECK(index.find("nobody") == nullptr);
}

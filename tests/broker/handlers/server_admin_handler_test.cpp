// Unit tests for broker/handlers/server_admin_handler.hpp: the paging rule of
// ConnList (page_connections).

#include "broker/handlers/server_admin_handler.hpp"
#include "protocol/switchyard_generated.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <vector>

using namespace switchyard::broker;
using sort = switchyard::protocol::wire::ConnSort;

namespace {

std::uint8_t by(sort s) { return static_cast<std::uint8_t>(s); }

// Connections 1..n (shuffled order in), each with pending bytes id % 4.
std::vector<conn_key> keys(std::uint64_t n) {
  std::vector<conn_key> out;
  for (std::uint64_t i = n; i >= 1; --i) {
    conn_key k;
    k.id = i;
    k.pending_bytes = i % 4;
    out.push_back(k);
  }
  return out;
}

}  // namespace

TEST_CASE("connections by id come oldest first, a page at a time, each cursor the last id of its page") {
  const auto first = page_connections(keys(5), by(sort::id), 2, 0);
  CHECK(first.ids == std::vector<std::uint64_t>{1, 2});
  CHECK(first.next_cursor == 2);
  const auto second = page_connections(keys(5), by(sort::id), 2, first.next_cursor);
  CHECK(second.ids == std::vector<std::uint64_t>{3, 4});
  const auto last = page_connections(keys(5), by(sort::id), 2, second.next_cursor);
  CHECK(last.ids == std::vector<std::uint64_t>{5});
  CHECK(last.next_cursor == 0);
}

TEST_CASE("an id cursor skips connections closed since: the walk goes on after it") {
  auto k = keys(6);
  std::erase_if(k, [](const conn_key& c) { return c.id == 3 || c.id == 4; });  // closed between pages
  const auto page = page_connections(k, by(sort::id), 2, 2);
  CHECK(page.ids == std::vector<std::uint64_t>{5, 6});
  CHECK(page.next_cursor == 0);
}

TEST_CASE("other orders put the largest first, ties by id, and the cursor counts entries") {
  // pending_bytes: 1->1 2->2 3->3 4->0 5->1 6->2 7->3
  const auto first = page_connections(keys(7), by(sort::pending_bytes), 3, 0);
  CHECK(first.ids == std::vector<std::uint64_t>{3, 7, 2});
  CHECK(first.next_cursor == 3);
  const auto second = page_connections(keys(7), by(sort::pending_bytes), 3, first.next_cursor);
  CHECK(second.ids == std::vector<std::uint64_t>{6, 1, 5});
  const auto last = page_connections(keys(7), by(sort::pending_bytes), 3, second.next_cursor);
  CHECK(last.ids == std::vector<std::uint64_t>{4});
  CHECK(last.next_cursor == 0);
}

TEST_CASE("every connection appears exactly once across the pages of any order") {
  for (std::uint8_t s = 0; s <= by(sort::MAX); ++s) {
    std::set<std::uint64_t> seen;
    std::uint64_t cursor = 0;
    for (int page = 0; page < 100; ++page) {  // bounded: 25 entries, 4 a page
      const auto p = page_connections(keys(25), s, 4, cursor);
      for (const auto id : p.ids) CHECK(seen.insert(id).second);
      cursor = p.next_cursor;
      if (cursor == 0) break;
    }
    CHECK(seen.size() == 25);
  }
}

TEST_CASE("a cursor past the end, or an empty server, gives an empty last page") {
  CHECK(page_connections(keys(3), by(sort::id), 10, 99).ids.empty());
  CHECK(page_connections(keys(3), by(sort::dropped), 10, 99).ids.empty());
  const auto none = page_connections({}, by(sort::idle), 10, 0);
  CHECK(none.ids.empty());
  CHECK(none.next_cursor == 0);
}

TEST_CASE("an unknown sort value lists by id") {
  const auto page = page_connections(keys(3), 200, 10, 0);
  CHECK(page.ids == std::vector<std::uint64_t>{1, 2, 3});
}

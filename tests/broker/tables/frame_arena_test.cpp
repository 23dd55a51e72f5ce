// Unit tests for broker::frame_arena and broker::frame_ref.

#include "broker/tables/frame_arena.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using switchyard::broker::frame_arena;
using switchyard::broker::frame_ref;

std::vector<std::uint8_t> pattern_bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

bool holds(const frame_ref& r, const std::vector<std::uint8_t>& expected) {
  return r && r.size() == expected.size() && std::equal(expected.begin(), expected.end(), r.data());
}

constexpr std::size_t chunk = frame_arena::chunk_size;

}  // namespace

TEST_CASE("frame arena stores a copy of the bytes it is given", "[broker]") {
  frame_arena arena;
  auto input = pattern_bytes(64, 3);
  const frame_ref r = arena.store(input);
  REQUIRE(r);
  CHECK(r.size() == 64);
  CHECK(r.data() != input.data());
  CHECK(std::vector<std::uint8_t>(r.bytes().begin(), r.bytes().end()) == pattern_bytes(64, 3));
  // It is a copy: changing the source does not change the stored frame.
  std::fill(input.begin(), input.end(), 0);
  CHECK(holds(r, pattern_bytes(64, 3)));
}

TEST_CASE("frame arena returns 8-byte aligned frame data", "[broker]") {
  frame_arena arena;
  for (std::size_t n : {8u, 16u, 24u, 4096u, 8u}) {
    const frame_ref r = arena.store(pattern_bytes(n, 1));
    CHECK(reinterpret_cast<std::uintptr_t>(r.data()) % 8 == 0);
  }
  const frame_ref big = arena.store(pattern_bytes(chunk / 2, 1));
  CHECK(reinterpret_cast<std::uintptr_t>(big.data()) % 8 == 0);
}

TEST_CASE("a default frame_ref is empty", "[broker]") {
  frame_ref r;
  CHECK_FALSE(r);
  CHECK(r.size() == 0);
}

TEST_CASE("consecutive stores are adjacent in memory", "[broker]") {
  frame_arena arena;
  const frame_ref a = arena.store(pattern_bytes(48, 1));
  const frame_ref b = arena.store(pattern_bytes(16, 2));
  const frame_ref c = arena.store(pattern_bytes(8, 3));
  CHECK(a.adjacent(b));
  CHECK(b.adjacent(c));
  CHECK(b.data() == a.data() + a.size());
  CHECK(c.data() == b.data() + b.size());
  CHECK_FALSE(b.adjacent(a));
  CHECK_FALSE(a.adjacent(c));
  CHECK_FALSE(a.adjacent(a));
}

TEST_CASE("frames from different arenas are never adjacent", "[broker]") {
  frame_arena one, two;
  const frame_ref a = one.store(pattern_bytes(16, 1));
  const frame_ref b = two.store(pattern_bytes(16, 2));
  CHECK_FALSE(a.adjacent(b));
  CHECK_FALSE(b.adjacent(a));
}

TEST_CASE("a frame_ref keeps its bytes alive after the arena moved on to other chunks", "[broker]") {
  frame_arena arena;
  const auto early_bytes = pattern_bytes(1024, 42);
  frame_ref early = arena.store(early_bytes);
  const std::size_t frame = 8192;
  // Fill (and release) several chunks' worth after the early frame; a chunk
  // recycled while still referenced would overwrite the early bytes.
  for (std::size_t stored = 0; stored < 4 * chunk; stored += frame) {
    const frame_ref tmp = arena.store(std::vector<std::uint8_t>(frame, 0xee));
    REQUIRE(tmp.data() != early.data());
  }
  CHECK(holds(early, early_bytes));
  CHECK(arena.chunks_allocated() >= 2);
}

TEST_CASE("a copied frame_ref keeps the bytes alive after the original is reset", "[broker]") {
  frame_arena arena;
  const auto bytes = pattern_bytes(256, 9);
  frame_ref original = arena.store(bytes);
  frame_ref copy = original;
  CHECK(copy.data() == original.data());
  original.reset();
  CHECK_FALSE(original);
  for (std::size_t stored = 0; stored < 3 * chunk; stored += 4096) arena.store(std::vector<std::uint8_t>(4096, 0));
  CHECK(holds(copy, bytes));

  frame_ref moved = std::move(copy);
  CHECK_FALSE(copy);  // NOLINT(bugprone-use-after-move): moved-from is documented empty
  CHECK(holds(moved, bytes));
  frame_ref assigned;
  assigned = moved;
  CHECK(holds(assigned, bytes));
  CHECK(assigned.adjacent(frame_ref{}) == false);
}

TEST_CASE("a frame larger than a quarter chunk gets a chunk of its own and stays readable", "[broker]") {
  frame_arena arena;
  const frame_ref small = arena.store(pattern_bytes(64, 1));
  const std::size_t before = arena.chunks_allocated();
  const auto big_bytes = pattern_bytes(chunk / 4 + 8, 5);
  {
    const frame_ref big = arena.store(big_bytes);
    CHECK(arena.chunks_allocated() == before + 1);
    CHECK(holds(big, big_bytes));
    CHECK_FALSE(small.adjacent(big));
    // The shared chunk is not used up by the big frame.
    const frame_ref next_small = arena.store(pattern_bytes(64, 2));
    CHECK(small.adjacent(next_small));
    CHECK(holds(big, big_bytes));
  }
  // Its own chunk is freed when its last reference goes.
  CHECK(arena.chunks_allocated() == before);
  CHECK(holds(small, pattern_bytes(64, 1)));
}

TEST_CASE("a frame of exactly a quarter chunk still goes into the shared chunk", "[broker]") {
  frame_arena arena;
  const frame_ref a = arena.store(pattern_bytes(64, 1));
  const frame_ref b = arena.store(pattern_bytes(chunk / 4, 2));
  CHECK(a.adjacent(b));
  CHECK(arena.chunks_allocated() == 1);
  CHECK(holds(b, pattern_bytes(chunk / 4, 2)));
}

TEST_CASE("a frame larger than a whole chunk is stored intact", "[broker]") {
  frame_arena arena;
  const auto bytes = pattern_bytes(4 * chunk + 16, 77);
  const frame_ref r = arena.store(bytes);
  CHECK(holds(r, bytes));
}

TEST_CASE("frame arena recycles chunks once their frames are released", "[broker]") {
  frame_arena arena;
  const std::vector<std::uint8_t> frame(8192, 0x11);
  for (std::size_t stored = 0; stored < 10 * chunk; stored += frame.size()) {
    const frame_ref r = arena.store(frame);
    REQUIRE(holds(r, frame));
  }
  CHECK(arena.chunks_allocated() <= 3);
}

TEST_CASE("frame arena reuses freed chunks instead of allocating new ones", "[broker]") {
  frame_arena arena;
  const std::vector<std::uint8_t> frame(16384, 0x22);
  std::vector<frame_ref> held;
  for (std::size_t stored = 0; stored < 3 * chunk; stored += frame.size()) held.push_back(arena.store(frame));
  const std::size_t peak = arena.chunks_allocated();
  CHECK(peak >= 3);
  held.clear();
  for (std::size_t stored = 0; stored < 3 * chunk; stored += frame.size()) held.push_back(arena.store(frame));
  CHECK(arena.chunks_allocated() <= peak);
  for (const auto& r : held) CHECK(holds(r, frame));
}

TEST_CASE("frame arena bounds the number of cached free chunks", "[broker]") {
  frame_arena arena;
  const std::vector<std::uint8_t> frame(chunk / 4, 0x33);  // four frames fill a chunk
  std::vector<frame_ref> held;
  const std::size_t chunks = frame_arena::max_free_chunks + 8;
  for (std::size_t i = 0; i < 4 * chunks; ++i) held.push_back(arena.store(frame));
  CHECK(arena.chunks_allocated() == chunks);
  held.clear();
  // Released chunks beyond the free-list bound go back to the system; the
  // current chunk stays with the arena.
  CHECK(arena.chunks_allocated() <= frame_arena::max_free_chunks + 1);
  CHECK(arena.chunks_allocated() >= 1);
}

using switchyard::broker::frame_lane;

TEST_CASE("frames stored through a lane are adjacent however shared stores interleave", "[broker]") {
  frame_arena arena;
  frame_lane gw1, gw2;
  // One service's sends to two gateways, interleaved in time, with a shared
  // delivery between them.
  const frame_ref a1 = arena.store(pattern_bytes(40, 1), gw1);
  const frame_ref b1 = arena.store(pattern_bytes(24, 2), gw2);
  const frame_ref shared = arena.store(pattern_bytes(16, 3));
  const frame_ref a2 = arena.store(pattern_bytes(48, 4), gw1);
  const frame_ref b2 = arena.store(pattern_bytes(8, 5), gw2);
  CHECK(a1.adjacent(a2));
  CHECK(b1.adjacent(b2));
  CHECK_FALSE(a1.adjacent(b1));
  CHECK_FALSE(a1.adjacent(shared));
  CHECK(holds(a1, pattern_bytes(40, 1)));
  CHECK(holds(a2, pattern_bytes(48, 4)));
  CHECK(holds(b2, pattern_bytes(8, 5)));
  CHECK(holds(shared, pattern_bytes(16, 3)));
}

TEST_CASE("a reset lane holds no chunk: its chunk returns once its frames are released", "[broker]") {
  frame_arena arena;
  frame_lane lane;
  frame_ref f = arena.store(pattern_bytes(64, 7), lane);
  lane.reset();
  // The frame keeps its bytes while referenced.
  CHECK(holds(f, pattern_bytes(64, 7)));
  // The next store starts a fresh chunk: not adjacent to the old frame.
  frame_ref g = arena.store(pattern_bytes(64, 8), lane);
  CHECK_FALSE(f.adjacent(g));
  CHECK(arena.chunks_allocated() == 2);
  f.reset();
  lane.reset();
  g.reset();
  // Both chunks are cached, none in use: storing again reuses one.
  const std::size_t cached = arena.chunks_allocated();
  const frame_ref h = arena.store(pattern_bytes(64, 9), lane);
  CHECK(arena.chunks_allocated() == cached);
  CHECK(holds(h, pattern_bytes(64, 9)));
}

TEST_CASE("a lane moves to a new chunk when its chunk is full and keeps frames intact", "[broker]") {
  frame_arena arena;
  frame_lane lane;
  std::vector<frame_ref> held;
  std::vector<std::vector<std::uint8_t>> expected;
  const std::size_t frame = frame_arena::lane_chunk_size / 8;  // eight fill a lane chunk
  for (std::size_t i = 0; i < 3 * frame_arena::lane_chunk_size / frame; ++i) {
    expected.push_back(pattern_bytes(frame, static_cast<std::uint8_t>(i)));
    held.push_back(arena.store(expected.back(), lane));
  }
  std::size_t breaks = 0;
  for (std::size_t i = 1; i < held.size(); ++i) breaks += held[i - 1].adjacent(held[i]) ? 0 : 1;
  CHECK(breaks == 2);
  for (std::size_t i = 0; i < held.size(); ++i) CHECK(holds(held[i], expected[i]));
}

TEST_CASE("a frame larger than a quarter lane chunk goes to the shared chunks, not the lane's", "[broker]") {
  frame_arena arena;
  frame_lane lane;
  const frame_ref shared = arena.store(pattern_bytes(64, 9));
  const frame_ref a = arena.store(pattern_bytes(64, 1), lane);
  const auto big = pattern_bytes(frame_arena::lane_chunk_size / 4 + 8, 2);
  const frame_ref b = arena.store(big, lane);
  const frame_ref c = arena.store(pattern_bytes(64, 3), lane);
  CHECK(shared.adjacent(b));  // right after the last shared frame
  CHECK_FALSE(a.adjacent(b));
  CHECK(a.adjacent(c));  // the lane's chunk was not used up
  CHECK(holds(b, big));
  // Exactly a quarter still goes through the lane.
  const frame_ref d = arena.store(pattern_bytes(frame_arena::lane_chunk_size / 4, 4), lane);
  CHECK(c.adjacent(d));
}

TEST_CASE("frame arena bounds the number of cached free lane chunks", "[broker]") {
  frame_arena arena;
  const std::size_t lanes = frame_arena::max_free_lane_chunks + 8;
  std::vector<frame_lane> many(lanes);
  std::vector<frame_ref> held;
  for (auto& lane : many) held.push_back(arena.store(pattern_bytes(64, 1), lane));
  CHECK(arena.chunks_allocated() == lanes);
  held.clear();
  for (auto& lane : many) lane.reset();
  CHECK(arena.chunks_allocated() == frame_arena::max_free_lane_chunks);
}

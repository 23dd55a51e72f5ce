// Unit tests for broker::outbound_queue (with real frame_arena frames).

#include "broker/tables/frame_arena.hpp"
#include "broker/tables/outbound_queue.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace {

using switchyard::broker::frame_arena;
using switchyard::broker::frame_ref;
using switchyard::broker::outbound_queue;

using spans = std::vector<std::span<const std::uint8_t>>;

// A frame of `size` bytes (a multiple of 8) filled with `fill`.
frame_ref make(frame_arena& arena, std::size_t size, std::uint8_t fill = 0xab) {
  REQUIRE(size % 8 == 0);
  return arena.store(std::vector<std::uint8_t>(size, fill));
}

std::size_t total(const spans& s) {
  std::size_t n = 0;
  for (const auto& x : s) n += x.size();
  return n;
}

}  // namespace

TEST_CASE("outbound queue starts empty", "[broker]") {
  outbound_queue q(100);
  CHECK(q.max_bytes() == 100);
  CHECK(q.queued_bytes() == 0);
  CHECK_FALSE(q.has_pending());
  CHECK_FALSE(q.writing());
  CHECK(q.dropped() == 0);
  CHECK(q.dropped_total() == 0);
  CHECK_FALSE(q.notice_due());
}

TEST_CASE("droppable frames under the limit are queued", "[broker]") {
  frame_arena arena;
  outbound_queue q(100);
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.queued_bytes() == 96);
  CHECK(q.has_pending());
  CHECK(q.dropped() == 0);
  CHECK(q.dropped_total() == 0);
}

TEST_CASE("a droppable frame that fills the queue exactly to the limit is queued", "[broker]") {
  frame_arena arena;
  outbound_queue q(64);
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.queued_bytes() == 64);
  CHECK(q.dropped() == 0);
  CHECK_FALSE(q.push_droppable(make(arena, 8)));
  CHECK(q.dropped() == 1);
}

TEST_CASE("a droppable frame over the limit is dropped and counted", "[broker]") {
  frame_arena arena;
  outbound_queue q(100);
  REQUIRE(q.push_droppable(make(arena, 64)));
  CHECK_FALSE(q.push_droppable(make(arena, 40)));
  CHECK(q.queued_bytes() == 64);
  CHECK(q.dropped() == 1);
  CHECK(q.dropped_total() == 1);
  // A smaller one still fits.
  CHECK(q.push_droppable(make(arena, 32)));
  CHECK(q.queued_bytes() == 96);
  CHECK_FALSE(q.push_droppable(make(arena, 8)));
  CHECK(q.dropped() == 2);
  CHECK(q.dropped_total() == 2);

  // Only the queued frames are written.
  spans out;
  q.begin_write(out);
  CHECK(total(out) == 96);
}

TEST_CASE("a single droppable frame larger than the whole limit is dropped", "[broker]") {
  frame_arena arena;
  outbound_queue q(64);
  CHECK_FALSE(q.push_droppable(make(arena, 72)));
  CHECK(q.queued_bytes() == 0);
  CHECK_FALSE(q.has_pending());
  CHECK(q.dropped() == 1);
}

TEST_CASE("take_dropped resets dropped but not dropped_total", "[broker]") {
  frame_arena arena;
  outbound_queue q(16);
  REQUIRE(q.push_droppable(make(arena, 16)));
  q.push_droppable(make(arena, 8));
  q.push_droppable(make(arena, 8));
  q.push_droppable(make(arena, 8));
  CHECK(q.dropped() == 3);
  CHECK(q.take_dropped() == 3);
  CHECK(q.dropped() == 0);
  CHECK(q.dropped_total() == 3);
  CHECK(q.take_dropped() == 0);
  q.push_droppable(make(arena, 8));
  CHECK(q.dropped() == 1);
  CHECK(q.dropped_total() == 4);
}

TEST_CASE("control frames are never dropped even past the limit", "[broker]") {
  frame_arena arena;
  outbound_queue q(64);
  REQUIRE(q.push_droppable(make(arena, 64)));
  q.push(make(arena, 32));
  q.push(make(arena, 128));
  CHECK(q.queued_bytes() == 224);
  CHECK(q.dropped() == 0);
  CHECK(q.dropped_total() == 0);
  spans out;
  q.begin_write(out);
  CHECK(total(out) == 224);
  // While over the limit every delivery is dropped.
  CHECK_FALSE(q.push_droppable(make(arena, 8)));
  CHECK(q.dropped() == 1);
}

TEST_CASE("begin_write moves every pending frame in flight", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  q.push_droppable(make(arena, 16));
  q.push(make(arena, 24));
  REQUIRE(q.has_pending());
  spans out;
  q.begin_write(out);
  CHECK_FALSE(q.has_pending());
  CHECK(q.writing());
  CHECK(total(out) == 40);
  q.end_write();
  CHECK_FALSE(q.writing());
  CHECK_FALSE(q.has_pending());
}

TEST_CASE("begin_write merges frames that are adjacent in memory into one span", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  const frame_ref a = make(arena, 32, 0x01);
  const frame_ref b = make(arena, 48, 0x02);
  const frame_ref c = make(arena, 8, 0x03);
  REQUIRE(a.adjacent(b));
  REQUIRE(b.adjacent(c));
  q.push_droppable(a);
  q.push(b);
  q.push_droppable(c);
  spans out;
  q.begin_write(out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].data() == a.data());
  CHECK(out[0].size() == 88);
  CHECK(out[0][0] == 0x01);
  CHECK(out[0][32] == 0x02);
  CHECK(out[0][80] == 0x03);
}

TEST_CASE("begin_write keeps frames that are not adjacent in separate spans", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  const frame_ref a = make(arena, 32, 0x01);
  const frame_ref gap = make(arena, 16, 0x09);  // stored but not queued
  const frame_ref b = make(arena, 32, 0x02);
  const frame_ref c = make(arena, 16, 0x03);
  q.push_droppable(a);
  q.push_droppable(b);
  q.push_droppable(c);
  spans out;
  q.begin_write(out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].data() == a.data());
  CHECK(out[0].size() == 32);
  CHECK(out[1].data() == b.data());
  CHECK(out[1].size() == 48);  // b and c are adjacent
}

TEST_CASE("begin_write does not merge frames queued in reverse memory order", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  const frame_ref a = make(arena, 16, 0x01);
  const frame_ref b = make(arena, 16, 0x02);
  q.push_droppable(b);
  q.push_droppable(a);
  spans out;
  q.begin_write(out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].data() == b.data());
  CHECK(out[1].data() == a.data());
  CHECK(out[0].size() == 16);
  CHECK(out[1].size() == 16);
}

TEST_CASE("begin_write does not merge frames from different arenas", "[broker]") {
  frame_arena one, two;
  outbound_queue q(1000);
  q.push_droppable(make(one, 16));
  q.push_droppable(make(two, 16));
  spans out;
  q.begin_write(out);
  CHECK(out.size() == 2);
  CHECK(total(out) == 32);
}

TEST_CASE("begin_write appends to the spans already in the output", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  const std::vector<std::uint8_t> other(8, 0x77);
  const frame_ref a = make(arena, 16);
  const frame_ref b = make(arena, 16);
  q.push(a);
  q.push(b);
  spans out{std::span<const std::uint8_t>(other)};
  q.begin_write(out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].data() == other.data());
  CHECK(out[0].size() == 8);
  CHECK(out[1].data() == a.data());
  CHECK(out[1].size() == 32);
}

TEST_CASE("queued bytes cover frames both pending and in flight until end_write", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  q.push_droppable(make(arena, 32));
  q.push(make(arena, 64));
  CHECK(q.queued_bytes() == 96);
  spans out;
  q.begin_write(out);
  CHECK(q.queued_bytes() == 96);  // in flight still counts
  q.end_write();
  CHECK(q.queued_bytes() == 0);
  CHECK_FALSE(q.writing());
}

TEST_CASE("frames pushed during a write wait as pending and are counted", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  const frame_ref first = make(arena, 32, 0x01);
  q.push_droppable(first);
  spans out;
  q.begin_write(out);
  REQUIRE(out.size() == 1);

  const frame_ref second = make(arena, 16, 0x02);
  const frame_ref third = make(arena, 8, 0x03);
  CHECK(q.push_droppable(second));
  q.push(third);
  CHECK(q.writing());
  CHECK(q.has_pending());
  CHECK(q.queued_bytes() == 56);

  q.end_write();
  CHECK(q.queued_bytes() == 24);
  CHECK(q.has_pending());
  CHECK_FALSE(q.writing());

  spans next;
  q.begin_write(next);
  REQUIRE(next.size() == 1);  // second and third are adjacent
  CHECK(next[0].data() == second.data());
  CHECK(next[0].size() == 24);
  q.end_write();
  CHECK(q.queued_bytes() == 0);
}

TEST_CASE("bytes in flight count toward the limit for droppable frames", "[broker]") {
  frame_arena arena;
  outbound_queue q(100);
  q.push_droppable(make(arena, 64));
  spans out;
  q.begin_write(out);
  CHECK_FALSE(q.has_pending());
  CHECK_FALSE(q.push_droppable(make(arena, 40)));
  CHECK(q.dropped() == 1);
  q.end_write();
  CHECK(q.push_droppable(make(arena, 40)));
}

TEST_CASE("end_write releases the queue's references to the written frames", "[broker]") {
  frame_arena arena;
  outbound_queue q(1u << 20);
  const std::size_t base = arena.chunks_allocated();
  // A frame above a quarter chunk has a chunk of its own, freed with its
  // last reference.
  q.push(make(arena, frame_arena::chunk_size / 2));
  CHECK(arena.chunks_allocated() == base + 1);
  spans out;
  q.begin_write(out);
  CHECK(arena.chunks_allocated() == base + 1);  // in flight keeps it alive
  REQUIRE(out.size() == 1);
  CHECK(out[0][0] == 0xab);
  CHECK(out[0][out[0].size() - 1] == 0xab);
  q.end_write();
  CHECK(arena.chunks_allocated() == base);
}

TEST_CASE("clear empties the queue and resets the byte count", "[broker]") {
  frame_arena arena;
  outbound_queue q(1000);
  q.push(make(arena, 32));
  spans out;
  q.begin_write(out);
  q.push(make(arena, 16));
  q.clear();
  CHECK(q.queued_bytes() == 0);
  CHECK_FALSE(q.has_pending());
  CHECK_FALSE(q.writing());
}

TEST_CASE("a drop notice is due only after drops once the queue is at most half full", "[broker]") {
  frame_arena arena;
  outbound_queue q(128);
  CHECK_FALSE(q.notice_due());  // no drops, empty

  REQUIRE(q.push_droppable(make(arena, 128)));
  REQUIRE_FALSE(q.push_droppable(make(arena, 8)));
  CHECK(q.dropped() == 1);
  CHECK_FALSE(q.notice_due());  // dropped, but still full

  spans out;
  q.begin_write(out);
  CHECK_FALSE(q.notice_due());  // in flight still counts
  q.push(make(arena, 64));      // exactly half after the write completes
  q.end_write();
  CHECK(q.queued_bytes() == 64);
  CHECK(q.notice_due());

  q.push(make(arena, 8));  // just above half
  CHECK_FALSE(q.notice_due());

  spans more;
  q.begin_write(more);
  q.end_write();
  CHECK(q.queued_bytes() == 0);
  CHECK(q.notice_due());
  q.take_dropped();
  CHECK_FALSE(q.notice_due());
}

TEST_CASE("one write takes at most max_write_bytes and the next writes take the rest in order", "[broker]") {
  frame_arena arena;
  outbound_queue q(64u << 20);
  constexpr std::size_t frame = 4096;
  const std::size_t n = 3 * outbound_queue::max_write_bytes / frame + 5;  // three full writes and a bit
  for (std::size_t i = 0; i < n; ++i) q.push(make(arena, frame, static_cast<std::uint8_t>(i)));
  std::size_t written = 0, writes = 0;
  while (q.has_pending() && writes < 100) {
    spans s;
    q.begin_write(s);
    const std::size_t bytes = total(s);
    CHECK(bytes <= outbound_queue::max_write_bytes);
    CHECK(bytes > 0);
    // Frames leave in push order: the first byte of each is its index.
    for (const auto& span : s)
      for (std::size_t off = 0; off < span.size(); off += frame)
        CHECK(span[off] == static_cast<std::uint8_t>(written++));
    q.end_write();
    ++writes;
  }
  CHECK(written == n);
  CHECK(writes == 4);
  CHECK(q.queued_bytes() == 0);
}

TEST_CASE("a frame larger than max_write_bytes goes alone in one write", "[broker]") {
  frame_arena arena;
  outbound_queue q(64u << 20);
  q.push(make(arena, 64));
  q.push(make(arena, outbound_queue::max_write_bytes + 1024));
  q.push(make(arena, 64));
  spans s;
  q.begin_write(s);
  CHECK(total(s) == 64);
  q.end_write();
  s.clear();
  q.begin_write(s);
  CHECK(total(s) == outbound_queue::max_write_bytes + 1024);
  q.end_write();
  s.clear();
  q.begin_write(s);
  CHECK(total(s) == 64);
  q.end_write();
  CHECK_FALSE(q.has_pending());
}

TEST_CASE("drop_pending drops what waits and keeps the write in flight", "[broker]") {
  frame_arena arena;
  outbound_queue q(64u << 20);
  constexpr std::size_t frame = 8192;
  for (std::size_t i = 0; i < 2 * outbound_queue::max_write_bytes / frame; ++i) q.push(make(arena, frame));
  spans s;
  q.begin_write(s);
  const std::size_t in_flight = total(s);
  REQUIRE(in_flight == outbound_queue::max_write_bytes);
  REQUIRE(q.has_pending());
  CHECK(q.drop_pending() == outbound_queue::max_write_bytes / frame);
  CHECK_FALSE(q.has_pending());
  CHECK(q.writing());
  CHECK(q.queued_bytes() == in_flight);
  // A goodbye queued now is the next thing written.
  q.push(make(arena, 64, 0xee));
  q.end_write();
  CHECK(q.queued_bytes() == 64);
  s.clear();
  q.begin_write(s);
  REQUIRE(s.size() == 1);
  CHECK(s[0].size() == 64);
  CHECK(s[0][0] == 0xee);
}

// ---- Deadlines and offers (delivery_meta) ----

#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <chrono>
#include <string_view>

namespace {
using switchyard::broker::delivery_meta;
using namespace std::chrono_literals;
const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::time_point{} + 1000s;
}  // namespace

TEST_CASE("a frame whose deadline passed while queued is dropped, not written", "[broker][offers]") {
  frame_arena arena;
  outbound_queue q(1 << 20);
  REQUIRE(q.push_droppable(make(arena, 32, 1)));
  REQUIRE(q.push_droppable(make(arena, 32, 2), delivery_meta{t0 + 10ms, 0, false}));
  REQUIRE(q.push_droppable(make(arena, 32, 3), delivery_meta{t0 + 30ms, 0, false}));
  spans out;
  q.begin_write(out, t0 + 10ms);  // the second is due exactly now: expired
  CHECK(total(out) == 64);
  CHECK(q.take_expired() == 1);
  CHECK(q.take_expired() == 0);
  q.end_write();
  CHECK(q.queued_bytes() == 0);
  CHECK_FALSE(q.has_pending());
}

TEST_CASE("a queue whose frames all expired gives nothing to write", "[broker][offers]") {
  frame_arena arena;
  outbound_queue q(1 << 20);
  REQUIRE(q.push_droppable(make(arena, 64), delivery_meta{t0, 0, false}));
  spans out;
  q.begin_write(out, t0 + 1ms);
  CHECK(out.empty());
  q.end_write();
  CHECK(q.queued_bytes() == 0);
  CHECK(q.take_expired() == 1);
}

TEST_CASE("cancelling an offer drops its queued copies but not what is in flight", "[broker][offers]") {
  frame_arena arena;
  outbound_queue q(1 << 20);
  REQUIRE(q.push_droppable(make(arena, 32), delivery_meta{{}, 7, false}));
  spans out;
  q.begin_write(out, t0);  // offer 7's first copy is in flight now
  REQUIRE(q.push_droppable(make(arena, 32), delivery_meta{{}, 7, false}));
  REQUIRE(q.push_droppable(make(arena, 32), delivery_meta{{}, 8, false}));
  CHECK(q.cancel(7) == 1);
  CHECK(q.cancel(7) == 0);
  q.end_write();
  out.clear();
  q.begin_write(out, t0);
  CHECK(total(out) == 32);  // offer 8 only
  CHECK(q.take_cancelled() == 1);
  q.end_write();
  CHECK(q.queued_bytes() == 0);
}

TEST_CASE("a frame carrying its time left is rewritten with the time left when written", "[broker][offers]") {
  frame_arena arena;
  switchyard::protocol::frame_builder b;
  const std::string_view keys[] = {"user:a"};
  const std::uint8_t payload[] = {1, 2, 3};
  outbound_queue q(1 << 20);
  REQUIRE(q.push_droppable(arena.store(b.inbox_delivery("gw-1", keys, payload, {}, 0, 0, 15000, 9)),
                           delivery_meta{t0 + 15s, 9, true}));
  spans out;
  q.begin_write(out, t0 + 4200ms + 300us);
  REQUIRE(out.size() == 1);
  const auto* f = switchyard::protocol::wire::GetSizePrefixedFrame(out[0].data());
  REQUIRE(f->message_as_InboxDelivery());
  CHECK(f->message_as_InboxDelivery()->time_left_ms() == 10800);  // 10,799.7 ms rounded up
  CHECK(f->message_as_InboxDelivery()->offer_id() == 9);
}

TEST_CASE("expired frames are found among plain ones across writes cut by the write limit", "[broker][offers]") {
  frame_arena arena;
  outbound_queue q(std::size_t{16} << 20);
  constexpr std::size_t size = 100 * 1024;  // two per write (max_write_bytes is 256 KiB)
  for (int i = 0; i < 10; ++i) {
    const bool late = i == 3 || i == 7;
    REQUIRE(q.push_droppable(make(arena, size, static_cast<std::uint8_t>(i)),
                             late ? delivery_meta{t0, 0, false} : delivery_meta{}));
  }
  std::vector<std::uint8_t> written;  // the fill byte of each frame written, in order
  for (int round = 0; round < 20 && q.has_pending(); ++round) {
    spans out;
    q.begin_write(out, t0 + 1ms);
    for (const auto& s : out)
      for (std::size_t off = 0; off < s.size(); off += size) written.push_back(s[off]);
    q.end_write();
  }
  CHECK(written == std::vector<std::uint8_t>{0, 1, 2, 4, 5, 6, 8, 9});
  CHECK(q.take_expired() == 2);
  CHECK(q.queued_bytes() == 0);
}

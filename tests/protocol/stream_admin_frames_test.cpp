// Round trips of the stream administration messages (tags 34..38 and 47:
// StreamInfo, StreamInfoResult, StreamList, StreamListResult,
// SetRetention, StreamDelete) and of a LeaseList page through
// frame_builder and decode_frame, and the verifier's bound on the longest
// StreamListResult.

#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace switchyard::protocol;
namespace wire = switchyard::protocol::wire;

// The frame copied to 8-byte aligned storage, as a connection buffer holds it.
struct aligned_frame {
  std::vector<std::uint64_t> words;
  std::size_t size = 0;
  explicit aligned_frame(bytes_view b) : words((b.size() + 7) / 8), size(b.size()) {
    std::memcpy(words.data(), b.data(), b.size());
  }
  bytes_view view() const { return {reinterpret_cast<const std::uint8_t*>(words.data()), size}; }
};

const wire::Frame* decode_ok(const aligned_frame& f, std::uint32_t max_frame = default_max_frame) {
  auto r = decode_frame(f.view(), max_frame);
  if (!r) FAIL("decode_frame failed: " << r.error().message());
  return *r;
}

stream_info_fields sample(std::string_view name) {
  return {name, 0xFEDCBA9876543210ull, 11, 42, 32, 4096, 1'796'000'000'000ull, {100, 3'600'000, 1u << 20}, true};
}

}  // namespace

TEST_CASE("the stream administration messages take union tags 34 to 38", "[protocol]") {
  CHECK(static_cast<int>(wire::Message::StreamInfo) == 34);
  CHECK(static_cast<int>(wire::Message::StreamInfoResult) == 35);
  CHECK(static_cast<int>(wire::Message::StreamList) == 36);
  CHECK(static_cast<int>(wire::Message::StreamListResult) == 37);
  CHECK(static_cast<int>(wire::Message::SetRetention) == 38);
}

TEST_CASE("stream info and stream list requests round-trip", "[protocol]") {
  frame_builder b;
  const aligned_frame info(b.stream_info(7, "orders.eu"));
  const auto* f = decode_ok(info);
  CHECK(f->request_id() == 7);
  REQUIRE(f->message_as_StreamInfo());
  CHECK(f->message_as_StreamInfo()->stream()->str() == "orders.eu");

  const aligned_frame list(b.stream_list(8, "orders.", 25));
  f = decode_ok(list);
  REQUIRE(f->message_as_StreamList());
  CHECK(f->message_as_StreamList()->prefix()->str() == "orders.");
  CHECK(f->message_as_StreamList()->limit() == 25);

  const aligned_frame all(b.stream_list(9, "", 0));
  f = decode_ok(all);
  REQUIRE(f->message_as_StreamList());
  CHECK(f->message_as_StreamList()->prefix() == nullptr);  // absent = every stream
  CHECK(f->message_as_StreamList()->limit() == 0);
}

TEST_CASE("stream info result round-trips every field", "[protocol]") {
  frame_builder b;
  const aligned_frame frame(b.stream_info_result(3, sample("orders")));
  const auto* f = decode_ok(frame);
  CHECK(f->request_id() == 3);
  const auto* m = f->message_as_StreamInfoResult();
  REQUIRE(m);
  CHECK(m->stream()->str() == "orders");
  CHECK(m->epoch() == 0xFEDCBA9876543210ull);
  CHECK(m->first_seq() == 11);
  CHECK(m->last_seq() == 42);
  CHECK(m->records() == 32);
  CHECK(m->bytes() == 4096);
  CHECK(m->created_ms() == 1'796'000'000'000ull);
  CHECK(m->max_records() == 100);
  CHECK(m->max_age_ms() == 3'600'000);
  CHECK(m->max_bytes() == (1u << 20));
  CHECK(m->own_retention());
}

TEST_CASE("stream list result round-trips its streams in order and the more flag", "[protocol]") {
  frame_builder b;
  auto second = sample("b");
  second.own_retention = false;
  const std::vector<stream_info_fields> streams{sample("a"), second};
  const aligned_frame frame(b.stream_list_result(4, streams, true));
  const auto* m = decode_ok(frame)->message_as_StreamListResult();
  REQUIRE(m);
  REQUIRE(m->streams());
  REQUIRE(m->streams()->size() == 2);
  CHECK(m->streams()->Get(0)->stream()->str() == "a");
  CHECK(m->streams()->Get(0)->own_retention());
  CHECK(m->streams()->Get(1)->stream()->str() == "b");
  CHECK_FALSE(m->streams()->Get(1)->own_retention());
  CHECK(m->more());
}

TEST_CASE("set retention round-trips its limits and the clear flag", "[protocol]") {
  frame_builder b;
  const aligned_frame set(b.set_retention(5, "orders", {1, max_retention_limit, 3}));
  const auto* m = decode_ok(set)->message_as_SetRetention();
  REQUIRE(m);
  CHECK(m->stream()->str() == "orders");
  CHECK(m->max_records() == 1);
  CHECK(m->max_age_ms() == max_retention_limit);
  CHECK(m->max_bytes() == 3);
  CHECK_FALSE(m->clear());

  const aligned_frame clear(b.set_retention(6, "orders", {}, true));
  m = decode_ok(clear)->message_as_SetRetention();
  REQUIRE(m);
  CHECK(m->clear());
  CHECK(m->max_records() == 0);
}

TEST_CASE("stream delete takes union tag 47 and round-trips its stream", "[protocol]") {
  CHECK(static_cast<int>(wire::Message::StreamDelete) == 47);
  frame_builder b;
  const aligned_frame del(b.stream_delete(9, "orders.eu"));
  const auto* f = decode_ok(del);
  CHECK(f->request_id() == 9);
  REQUIRE(f->message_as_StreamDelete());
  CHECK(f->message_as_StreamDelete()->stream()->str() == "orders.eu");
}

TEST_CASE("a lease list page round-trips its cursor, and its answer the next cursor and the total", "[protocol]") {
  frame_builder b;
  const aligned_frame ask(b.lease_list(3, 50, 0xFEDCBA9876543210ull));
  const auto* m = decode_ok(ask)->message_as_LeaseList();
  REQUIRE(m);
  CHECK(m->limit() == 50);
  CHECK(m->after() == 0xFEDCBA9876543210ull);
  const lease_info_fields leases[] = {{11, 1000, 900}, {12, 2000, 1500}};
  const aligned_frame answer(b.lease_list_result(3, leases, 12, 77));
  const auto* r = decode_ok(answer)->message_as_LeaseListResult();
  REQUIRE(r);
  REQUIRE(r->leases()->size() == 2);
  CHECK(r->leases()->Get(1)->lease_id() == 12);
  CHECK(r->next_cursor() == 12);
  CHECK(r->total() == 77);
  // A request without a cursor (as an older client sends it) reads as the first page.
  const aligned_frame first(b.lease_list(4, 0));
  CHECK(decode_ok(first)->message_as_LeaseList()->after() == 0);
}

TEST_CASE("a stream list result of max_list_items streams passes the verifier", "[protocol]") {
  frame_builder b;
  std::vector<std::string> names;
  for (std::uint32_t i = 0; i < max_list_items; ++i) names.push_back("s" + std::to_string(i));
  std::vector<stream_info_fields> streams;
  for (const auto& n : names) streams.push_back(sample(n));
  const aligned_frame frame(b.stream_list_result(1, streams, false));
  const auto* m = decode_ok(frame, 64u << 20)->message_as_StreamListResult();
  REQUIRE(m);
  CHECK(m->streams()->size() == max_list_items);
}

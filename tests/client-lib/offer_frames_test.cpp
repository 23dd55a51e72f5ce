// The client library's side of capability "offers": the broker's frames,
// built with protocol::frame_builder as the broker builds them, turned
// into the public structs (client-lib/offer_frames.hpp), and the offer
// options checked and turned into the Send's fields. No broker, no socket.

#include "client-lib/offer_frames.hpp"

#include "protocol/limits.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace std::chrono_literals;
using switchyard::errc;
using switchyard::key_outcome;
using switchyard::offer_options;
using switchyard::receipt_outcome;
namespace detail = switchyard::detail;
namespace protocol = switchyard::protocol;
namespace wire = switchyard::protocol::wire;

namespace {

// A frame the builder made, kept (8-byte aligned) and verified.
class frame {
 public:
  explicit frame(protocol::bytes_view bytes) : words_((bytes.size() + 7) / 8) {
    std::memcpy(words_.data(), bytes.data(), bytes.size());
    auto f = protocol::decode_frame({reinterpret_cast<const std::uint8_t*>(words_.data()), bytes.size()},
                                    protocol::default_max_frame);
    REQUIRE(f);
    frame_ = *f;
  }
  const wire::Frame& operator*() const { return *frame_; }
  const wire::Frame* operator->() const { return frame_; }

 private:
  std::vector<std::uint64_t> words_;
  const wire::Frame* frame_ = nullptr;
};

protocol::bytes_view bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("an offer's answer gives every key's outcome, its gateway and the counts", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 3> gateways{"gw-1", "", ""};
  const std::array<std::uint8_t, 3> outcomes{static_cast<std::uint8_t>(wire::KeyOutcome::routed),
                                             static_cast<std::uint8_t>(wire::KeyOutcome::no_route),
                                             static_cast<std::uint8_t>(wire::KeyOutcome::capped)};
  const frame f(b.send_result(7, gateways, 1, 0, 0, outcomes, 1));
  const auto r = detail::parse_offer_result(*f, 3);
  REQUIRE(r);
  CHECK(r->gateways == std::vector<std::string>{"gw-1", "", ""});
  CHECK(r->outcomes == std::vector<key_outcome>{key_outcome::routed, key_outcome::no_route, key_outcome::capped});
  CHECK(r->routed == 1);
  CHECK(r->capped == 1);
}

TEST_CASE("a plain send with an expiry gets its outcomes from its gateways", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 2> gateways{"", "gw-2"};
  const frame f(b.send_result(7, gateways, 1));
  const auto r = detail::parse_offer_result(*f, 2);
  REQUIRE(r);
  CHECK(r->outcomes == std::vector<key_outcome>{key_outcome::no_route, key_outcome::routed});
  CHECK(r->routed == 1);
  CHECK(r->capped == 0);

  // One key without a route is answered with Error no_route: send_offer
  // reports it as that key's outcome.
  const auto none = detail::unrouted_result(1);
  CHECK(none.gateways == std::vector<std::string>{""});
  CHECK(none.outcomes == std::vector<key_outcome>{key_outcome::no_route});
  CHECK(none.routed == 0);
}

TEST_CASE("an outcome this library does not know reads as not delivered", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 1> gateways{""};
  const std::array<std::uint8_t, 1> outcomes{9};  // a later broker's
  const frame f(b.send_result(7, gateways, 0, 0, 0, outcomes, 0));
  const auto r = detail::parse_offer_result(*f, 1);
  REQUIRE(r);
  CHECK(r->outcomes == std::vector<key_outcome>{key_outcome::no_route});
}

TEST_CASE("an offer's answer that does not list every key once is a protocol violation", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 2> gateways{"gw-1", "gw-1"};
  const std::array<std::uint8_t, 1> outcomes{0};
  const frame short_outcomes(b.send_result(7, gateways, 2, 0, 0, outcomes, 0));
  CHECK(detail::parse_offer_result(*short_outcomes, 2).error() == errc::protocol_violation);
  const frame plain(b.send_result(7, gateways, 2));
  CHECK(detail::parse_offer_result(*plain, 3).error() == errc::protocol_violation);
  const frame other(b.ok(7));
  CHECK(detail::parse_offer_result(*other, 2).error() == errc::protocol_violation);
}

TEST_CASE("offer options the broker would refuse are refused before anything is sent", "[client-lib][offers]") {
  CHECK(detail::offer_fields_of({.offer_id = 5}).error() == errc::bad_request);  // an id needs an expiry
  CHECK(detail::offer_fields_of({.expires_in = 1s, .receipt_timeout = 1s}).error() == errc::bad_request);  // no id
  CHECK(detail::offer_fields_of({.offer_id = 5, .expires_in = -1ms}).error() == errc::bad_request);
  CHECK(detail::offer_fields_of({.offer_id = 5, .expires_in = 1s, .receipt_timeout = -1ms}).error() ==
        errc::bad_request);
  CHECK(detail::offer_fields_of({.expires_in = 1s, .cap_max = 2, .cap_window = -1ms}).error() == errc::bad_request);
  CHECK(detail::expiry_ms(-1ms).error() == errc::bad_request);
}

TEST_CASE("offer options become the Send's offer fields", "[client-lib][offers]") {
  const offer_options o{.offer_id = 42,
                        .expires_in = 30s,
                        .receipt_timeout = 5s,
                        .receipt_inbox = "dispatch-1",
                        .cap_max = 3,
                        .cap_window = 1h};
  const auto fields = detail::offer_fields_of(o);
  REQUIRE(fields);
  // As the broker reads them.
  protocol::frame_builder b;
  const std::array<std::string_view, 2> keys{"user:alice", "user:bob"};
  const frame f(b.send(9, keys, bytes_of("ride"), {}, &*fields));
  const auto* s = f->message_as_Send();
  REQUIRE(s);
  CHECK(s->expires_in_ms() == 30'000);
  CHECK(s->offer_id() == 42);
  CHECK(s->receipt_timeout_ms() == 5'000);
  REQUIRE(s->receipt_inbox());
  CHECK(s->receipt_inbox()->string_view() == "dispatch-1");
  CHECK(s->cap_max() == 3);
  CHECK(s->cap_window_ms() == 3'600'000);

  // Longer than the wire holds: the longest it holds.
  const auto far = detail::offer_fields_of({.expires_in = std::chrono::hours(24 * 365)});
  REQUIRE(far);
  CHECK(far->expires_in_ms == UINT32_MAX);
  CHECK(detail::expiry_ms(std::chrono::hours(24 * 365)).value() == UINT32_MAX);
  // A plain send with an expiry: no id, no receipts.
  const auto plain = detail::offer_fields_of({.expires_in = 10s});
  REQUIRE(plain);
  CHECK(plain->offer_id == 0);
  CHECK(plain->expires_in_ms == 10'000);
}

TEST_CASE("a receipt carries the offer, the key, the gateway, the outcome and the time", "[client-lib][offers]") {
  protocol::frame_builder b;
  const frame acked(b.receipt(42, "user:alice", "gw-1", static_cast<std::uint8_t>(wire::ReceiptOutcome::acked), 1500));
  REQUIRE(acked->message_as_Receipt());
  const auto r = detail::to_receipt(*acked->message_as_Receipt());
  CHECK(r.offer_id == 42);
  CHECK(r.route_key == "user:alice");
  CHECK(r.inbox_id == "gw-1");
  CHECK(r.outcome == receipt_outcome::acked);
  CHECK(r.elapsed == std::chrono::microseconds(1500));

  const frame timed_out(
      b.receipt(43, "user:bob", "gw-2", static_cast<std::uint8_t>(wire::ReceiptOutcome::timeout), 5'000'000));
  const auto t = detail::to_receipt(*timed_out->message_as_Receipt());
  CHECK(t.outcome == receipt_outcome::timeout);
  CHECK(t.elapsed == 5s);
}

TEST_CASE("a withdrawn notice names the offer, the inbox and the keys", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 2> keys{"user:alice", "user:bob"};
  const frame f(b.withdrawn(42, "gw-1", keys));
  REQUIRE(f->message_as_Withdrawn());
  const auto w = detail::to_withdrawn(*f->message_as_Withdrawn());
  CHECK(w.offer_id == 42);
  CHECK(w.inbox_id == "gw-1");
  CHECK(w.route_keys == std::vector<std::string>{"user:alice", "user:bob"});
}

TEST_CASE("a withdraw's answer gives what was dropped, notified and unpended", "[client-lib][offers]") {
  protocol::frame_builder b;
  const frame f(b.withdraw_result(7, 42, 1, 2, 3));
  const auto r = detail::parse_withdraw_result(*f);
  REQUIRE(r);
  CHECK(r->dropped == 1);
  CHECK(r->notified == 2);
  CHECK(r->pending == 3);
  const frame other(b.ok(7));
  CHECK(detail::parse_withdraw_result(*other).error() == errc::protocol_violation);
}

TEST_CASE("the pending offers of a key come with their payloads and times, oldest first", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::string second_payload("\x00\xff", 2);
  const std::array<protocol::pending_offer_fields, 2> offers{
      protocol::pending_offer_fields{41, bytes_of("ride to the airport"), 20'000, 10'000},
      protocol::pending_offer_fields{42, bytes_of(second_payload), 29'000, 1'000}};
  const frame f(b.pending_offers_result(7, "user:alice", offers));
  const auto r = detail::parse_pending_offers(*f);
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].offer_id == 41);
  CHECK((*r)[0].payload_text() == "ride to the airport");
  CHECK((*r)[0].time_left == 20s);
  CHECK((*r)[0].age == 10s);
  CHECK((*r)[1].offer_id == 42);
  CHECK((*r)[1].payload_text() == second_payload);
  CHECK((*r)[1].time_left == 29s);
  CHECK((*r)[1].age == 1s);

  const frame none(b.pending_offers_result(7, "user:bob", {}));
  const auto empty = detail::parse_pending_offers(*none);
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("an exposure answer gives one count per key, in key order", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::uint32_t, 3> counts{0, 4, 1};
  const frame f(b.exposure_result(7, counts));
  const auto r = detail::parse_exposure(*f, 3);
  REQUIRE(r);
  CHECK(*r == std::vector<std::uint32_t>{0, 4, 1});
  CHECK(detail::parse_exposure(*f, 2).error() == errc::protocol_violation);
}

TEST_CASE("flag answers give the name, the percentage and the connections on and off", "[client-lib][offers]") {
  protocol::frame_builder b;
  const frame one(b.flag_info(7, {"offers", 25, 3, 9}));
  const auto r = detail::parse_flag_info(*one);
  REQUIRE(r);
  CHECK(r->name == "offers");
  CHECK(r->percent == 25);
  CHECK(r->connections_on == 3);
  CHECK(r->connections_off == 9);

  const std::array<protocol::flag_info_fields, 2> flags{protocol::flag_info_fields{"offers", 100, 12, 0},
                                                        protocol::flag_info_fields{"other", 0, 0, 5}};
  const frame list(b.flag_list_result(7, flags));
  const auto all = detail::parse_flag_list(*list);
  REQUIRE(all);
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].name == "offers");
  CHECK((*all)[0].percent == 100);
  CHECK((*all)[0].connections_on == 12);
  CHECK((*all)[1].name == "other");
  CHECK((*all)[1].connections_off == 5);
  CHECK(detail::parse_flag_info(*list).error() == errc::protocol_violation);
}

TEST_CASE("a delivered offer carries its id and the time it had left", "[client-lib][offers]") {
  protocol::frame_builder b;
  const std::array<std::string_view, 2> keys{"user:alice", "user:bob"};
  const frame f(b.inbox_delivery("gw-1", keys, bytes_of("ride"), {}, 0, 0, 29'500, 42));
  std::vector<std::string_view> scratch{"left over"};
  const auto m = detail::to_inbox_message(*f->message_as_InboxDelivery(), scratch);
  CHECK(m.inbox == "gw-1");
  REQUIRE(m.route_keys.size() == 2);
  CHECK(m.route_keys[0] == "user:alice");
  CHECK(m.route_keys[1] == "user:bob");
  CHECK(m.payload_text() == "ride");
  CHECK(m.offer_id == 42);
  CHECK(m.time_left == 29'500ms);
  CHECK_FALSE(m.replayed);

  const frame plain(b.inbox_delivery("gw-1", keys, bytes_of("hello"), "chat", 3, 9));
  const auto p = detail::to_inbox_message(*plain->message_as_InboxDelivery(), scratch);
  CHECK(p.offer_id == 0);
  CHECK(p.time_left == 0ms);
  CHECK(p.stream == "chat");
  CHECK(p.seq == 3);
  CHECK(p.epoch == 9);
}

TEST_CASE("a delivered message with an expiry carries the time it had left", "[client-lib][offers]") {
  protocol::frame_builder b;
  const frame f(b.deliver("rides.eu", bytes_of("ride"), {}, 0, 0, 1'200));
  const auto m = detail::to_message(*f->message_as_Deliver());
  CHECK(m.channel == "rides.eu");
  CHECK(m.payload_text() == "ride");
  CHECK(m.time_left == 1'200ms);
  const frame plain(b.deliver("rides.eu", bytes_of("ride")));
  CHECK(detail::to_message(*plain->message_as_Deliver()).time_left == 0ms);
}

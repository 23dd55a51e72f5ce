#pragma once
// Internal: the frames of capability "offers" turned into the public
// structs and back (client_offers.cpp), and the deliveries that carry an
// offer's fields (client_connection.cpp's dispatch). Pure functions of a
// verified frame: no connection, no loop. Not installed.

#include "switchyard/client.hpp"

#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::detail {

namespace wire = protocol::wire;

// offer_options -> the Send's offer fields. bad_request: offer_id without
// expires_in, receipt_timeout without offer_id, a negative duration.
// Durations above 2^32 - 1 ms become that.
std::expected<protocol::offer_fields, std::error_code> offer_fields_of(const offer_options& o);

// A Publish's expires_in_ms; bad_request for a negative duration.
std::expected<std::uint32_t, std::error_code> expiry_ms(std::chrono::milliseconds expires_in);

// The answer to a send_offer of `keys` route keys: SendResult, with the
// broker's outcomes for an offer, or (a plain send with an expiry) the
// outcomes derived from its gateways: "" = no_route. protocol_violation:
// another message, or per-key lists whose length is not `keys`.
std::expected<offer_result, std::error_code> parse_offer_result(const wire::Frame& f, std::size_t keys);
// What a plain send (no offer id, no cap) of one key without a route is
// answered (Error no_route), as send_offer reports it.
offer_result unrouted_result(std::size_t keys);

receipt to_receipt(const wire::Receipt& m);
withdrawn_notice to_withdrawn(const wire::Withdrawn& m);

std::expected<withdraw_result, std::error_code> parse_withdraw_result(const wire::Frame& f);
std::expected<std::vector<pending_offer>, std::error_code> parse_pending_offers(const wire::Frame& f);
// protocol_violation unless there is one count per key.
std::expected<std::vector<std::uint32_t>, std::error_code> parse_exposure(const wire::Frame& f, std::size_t keys);
std::expected<flag_info, std::error_code> parse_flag_info(const wire::Frame& f);
std::expected<std::vector<flag_info>, std::error_code> parse_flag_list(const wire::Frame& f);

// A Deliver as the handlers see it; the views borrow the frame. (Inline:
// every delivery goes through it.)
inline message to_message(const wire::Deliver& d) {
  const auto* p = d.payload();
  message m{d.channel()->string_view(),
            p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{},
            d.stream() ? d.stream()->string_view() : std::string_view{}, d.seq(), d.epoch()};
  m.time_left = std::chrono::milliseconds(d.time_left_ms());
  return m;
}

// An InboxDelivery as the handlers see it; its route keys go into `keys`
// (cleared first), which the result's route_keys borrows, as the other
// views borrow the frame.
inline inbox_message to_inbox_message(const wire::InboxDelivery& d, std::vector<std::string_view>& keys) {
  keys.clear();
  if (d.route_keys())
    for (const auto* k : *d.route_keys()) keys.push_back(k->string_view());
  const auto* p = d.payload();
  inbox_message m{d.inbox_id() ? d.inbox_id()->string_view() : std::string_view{},
                  keys,
                  p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{},
                  d.stream() ? d.stream()->string_view() : std::string_view{},
                  d.seq(),
                  d.epoch()};
  m.time_left = std::chrono::milliseconds(d.time_left_ms());
  m.offer_id = d.offer_id();
  return m;
}

}  // namespace switchyard::detail

#include "protocol/frame_builder.hpp"

#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"

#include <vector>

namespace switchyard::protocol {
namespace {

using flatbuffers::Offset;
using flatbuffers::String;
using flatbuffers::Vector;

Offset<String> string_or_null(flatbuffers::FlatBufferBuilder& fbb, std::string_view s) {
  return s.empty() ? Offset<String>{} : fbb.CreateString(s.data(), s.size());
}

// `scratch` keeps its capacity between calls: no allocation once warm.
Offset<Vector<Offset<String>>> string_list(flatbuffers::FlatBufferBuilder& fbb, std::span<const std::string_view> items,
                                           std::vector<Offset<String>>& scratch) {
  if (items.empty()) return {};
  scratch.clear();
  for (const auto& item : items) scratch.push_back(fbb.CreateString(item.data(), item.size()));
  return fbb.CreateVector(scratch.data(), scratch.size());
}

}  // namespace

frame_builder::frame_builder(std::size_t initial_capacity) : fbb_(initial_capacity) {}

flatbuffers::FlatBufferBuilder& frame_builder::start() {
  fbb_.Clear();
  return fbb_;
}

bytes_view frame_builder::finish(std::uint64_t request_id, std::uint8_t message_type, Offset<void> message) {
  wire::FrameBuilder frame(fbb_);
  frame.add_request_id(request_id);
  frame.add_message(message);
  frame.add_message_type(static_cast<wire::Message>(message_type));
  // Padding every frame to frame_alignment keeps back-to-back frames aligned
  // in a reader's buffer, so it can verify them in place.
  fbb_.TrackMinAlign(frame_alignment);
  fbb_.FinishSizePrefixed(frame.Finish(), wire::FrameIdentifier());
  return {fbb_.GetBufferPointer(), fbb_.GetSize()};
}

bytes_view frame_builder::hello(std::uint64_t request_id, const hello_fields& f) {
  auto& fbb = start();
  const auto name = string_or_null(fbb, f.client_name);
  const auto version = string_or_null(fbb, f.client_version);
  const auto id = string_or_null(fbb, f.client_id);
  const auto credentials = string_or_null(fbb, f.credentials);
  const auto caps = string_list(fbb, f.capabilities, strings_);
  const auto key = f.public_key.empty() ? flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>>{}
                                        : fbb.CreateVector(f.public_key.data(), f.public_key.size());
  wire::HelloBuilder b(fbb);
  b.add_protocol_major(f.protocol_major);
  b.add_protocol_minor(f.protocol_minor);
  b.add_client_name(name);
  b.add_client_version(version);
  b.add_client_id(id);
  b.add_credentials(credentials);
  b.add_capabilities(caps);
  b.add_public_key(key);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Hello), b.Finish().Union());
}

bytes_view frame_builder::welcome(std::uint64_t request_id, const welcome_fields& f) {
  auto& fbb = start();
  const auto version = string_or_null(fbb, f.server_version);
  const auto caps = string_list(fbb, f.capabilities, strings_);
  wire::WelcomeBuilder b(fbb);
  b.add_protocol_major(f.protocol_major);
  b.add_protocol_minor(f.protocol_minor);
  b.add_server_version(version);
  b.add_session_id(f.session_id);
  b.add_heartbeat_ms(f.heartbeat_ms);
  b.add_max_frame(f.max_frame);
  b.add_capabilities(caps);
  b.add_server_instance(f.server_instance);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Welcome), b.Finish().Union());
}

bytes_view frame_builder::error(std::uint64_t request_id, errc code, std::string_view message,
                                std::uint32_t retry_after_ms, bool fatal, std::uint64_t first_seq) {
  auto& fbb = start();
  const auto text = string_or_null(fbb, message);
  wire::ErrorBuilder b(fbb);
  b.add_code(static_cast<wire::ErrorCode>(code));
  b.add_message(text);
  b.add_retry_after_ms(retry_after_ms);
  b.add_fatal(fatal);
  b.add_first_seq(first_seq);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Error), b.Finish().Union());
}

bytes_view frame_builder::ping(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Ping), wire::CreatePing(fbb).Union());
}

bytes_view frame_builder::pong(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Pong), wire::CreatePong(fbb).Union());
}

bytes_view frame_builder::ok(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Ok), wire::CreateOk(fbb).Union());
}

bytes_view frame_builder::subscribe(std::uint64_t request_id, std::string_view pattern) {
  auto& fbb = start();
  const auto p = fbb.CreateString(pattern.data(), pattern.size());
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Subscribe), wire::CreateSubscribe(fbb, p).Union());
}

bytes_view frame_builder::unsubscribe(std::uint64_t request_id, std::string_view pattern) {
  auto& fbb = start();
  const auto p = fbb.CreateString(pattern.data(), pattern.size());
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Unsubscribe),
                wire::CreateUnsubscribe(fbb, p).Union());
}

bytes_view frame_builder::publish(std::uint64_t request_id, std::string_view channel, bytes_view payload,
                                  std::string_view stream, std::uint32_t expires_in_ms) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto ch = fbb.CreateString(channel.data(), channel.size());
  const auto st = string_or_null(fbb, stream);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Publish),
                wire::CreatePublish(fbb, ch, data, st, expires_in_ms).Union());
}

bytes_view frame_builder::deliver(std::string_view channel, bytes_view payload, std::string_view stream,
                                  std::uint64_t seq, std::uint64_t epoch, std::uint32_t time_left_ms) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto ch = fbb.CreateString(channel.data(), channel.size());
  const auto st = string_or_null(fbb, stream);
  return finish(0, static_cast<std::uint8_t>(wire::Message::Deliver),
                wire::CreateDeliver(fbb, ch, data, st, seq, epoch, time_left_ms).Union());
}

template <class T>
bytes_view frame_builder::finish_as(std::uint64_t request_id, flatbuffers::Offset<T> message) {
  return finish(request_id, static_cast<std::uint8_t>(wire::MessageTraits<T>::enum_value), message.Union());
}

bytes_view frame_builder::lease_grant(std::uint64_t request_id, std::uint32_t ttl_ms) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseGrant(fbb, ttl_ms));
}

bytes_view frame_builder::lease_keepalive(std::uint64_t request_id, std::uint64_t lease_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseKeepAlive(fbb, lease_id));
}

bytes_view frame_builder::lease_revoke(std::uint64_t request_id, std::uint64_t lease_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseRevoke(fbb, lease_id));
}

bytes_view frame_builder::lease_time_to_live(std::uint64_t request_id, std::uint64_t lease_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseTimeToLive(fbb, lease_id));
}

bytes_view frame_builder::lease_list(std::uint64_t request_id, std::uint32_t limit, std::uint64_t after) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseList(fbb, limit, after));
}

bytes_view frame_builder::lease_info(std::uint64_t request_id, const lease_info_fields& f) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateLeaseInfo(fbb, f.lease_id, f.ttl_ms, f.remaining_ms));
}

bytes_view frame_builder::lease_list_result(std::uint64_t request_id, std::span<const lease_info_fields> leases,
                                            std::uint64_t next_cursor, std::uint64_t total) {
  auto& fbb = start();
  std::vector<Offset<wire::LeaseInfo>> items;
  items.reserve(leases.size());
  for (const auto& l : leases) items.push_back(wire::CreateLeaseInfo(fbb, l.lease_id, l.ttl_ms, l.remaining_ms));
  const auto list = fbb.CreateVector(items);
  return finish_as(request_id, wire::CreateLeaseListResult(fbb, list, next_cursor, total));
}

bytes_view frame_builder::registry_put(std::uint64_t request_id, std::string_view key, std::string_view value,
                                       std::uint64_t lease_id, std::uint32_t ttl_ms) {
  auto& fbb = start();
  const auto k = fbb.CreateString(key.data(), key.size());
  const auto v = string_or_null(fbb, value);
  return finish_as(request_id, wire::CreateRegistryPut(fbb, k, v, lease_id, ttl_ms));
}

bytes_view frame_builder::registry_get(std::uint64_t request_id, std::string_view key) {
  auto& fbb = start();
  const auto k = fbb.CreateString(key.data(), key.size());
  return finish_as(request_id, wire::CreateRegistryGet(fbb, k));
}

bytes_view frame_builder::registry_delete(std::uint64_t request_id, std::string_view key) {
  auto& fbb = start();
  const auto k = fbb.CreateString(key.data(), key.size());
  return finish_as(request_id, wire::CreateRegistryDelete(fbb, k));
}

bytes_view frame_builder::registry_list(std::uint64_t request_id, std::string_view prefix, std::uint32_t limit) {
  auto& fbb = start();
  const auto p = string_or_null(fbb, prefix);
  return finish_as(request_id, wire::CreateRegistryList(fbb, p, limit));
}

namespace {
Offset<wire::RegistryEntry> make_entry(flatbuffers::FlatBufferBuilder& fbb, const registry_entry_fields& f) {
  const auto k = fbb.CreateString(f.key.data(), f.key.size());
  const auto v = fbb.CreateString(f.value.data(), f.value.size());
  return wire::CreateRegistryEntry(fbb, k, v, f.version, f.lease_id, f.remaining_ms);
}
}  // namespace

bytes_view frame_builder::registry_entry(std::uint64_t request_id, const registry_entry_fields& f) {
  auto& fbb = start();
  return finish_as(request_id, make_entry(fbb, f));
}

bytes_view frame_builder::registry_list_result(std::uint64_t request_id, std::span<const registry_entry_fields> entries,
                                               bool more) {
  auto& fbb = start();
  std::vector<Offset<wire::RegistryEntry>> items;
  items.reserve(entries.size());
  for (const auto& e : entries) items.push_back(make_entry(fbb, e));
  const auto list = fbb.CreateVector(items);
  return finish_as(request_id, wire::CreateRegistryListResult(fbb, list, more));
}

bytes_view frame_builder::inbox_open(std::uint64_t request_id, std::string_view inbox_id, std::uint64_t lease_id) {
  auto& fbb = start();
  const auto id = fbb.CreateString(inbox_id.data(), inbox_id.size());
  return finish_as(request_id, wire::CreateInboxOpen(fbb, id, lease_id));
}

bytes_view frame_builder::inbox_close(std::uint64_t request_id, std::string_view inbox_id) {
  auto& fbb = start();
  const auto id = fbb.CreateString(inbox_id.data(), inbox_id.size());
  return finish_as(request_id, wire::CreateInboxClose(fbb, id));
}

bytes_view frame_builder::send(std::uint64_t request_id, std::span<const std::string_view> route_keys,
                               bytes_view payload, std::string_view stream, const offer_fields* offer) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  // A send always carries its key list, even when empty (required field).
  auto keys = string_list(fbb, route_keys, strings_);
  if (keys.IsNull()) keys = fbb.CreateVector(std::vector<Offset<String>>{});
  const auto st = string_or_null(fbb, stream);
  if (!offer) return finish_as(request_id, wire::CreateSend(fbb, keys, data, st));
  const auto reply = string_or_null(fbb, offer->receipt_inbox);
  return finish_as(request_id,
                   wire::CreateSend(fbb, keys, data, st, offer->expires_in_ms, offer->offer_id,
                                    offer->receipt_timeout_ms, reply, offer->cap_max, offer->cap_window_ms));
}

bytes_view frame_builder::send_result(std::uint64_t request_id, std::span<const std::string_view> gateways,
                                      std::uint32_t routed, std::uint64_t seq, std::uint64_t epoch,
                                      std::span<const std::uint8_t> outcomes, std::uint32_t capped) {
  auto& fbb = start();
  const auto list = string_list(fbb, gateways, strings_);
  Offset<Vector<wire::KeyOutcome>> out;
  if (!outcomes.empty())
    out = fbb.CreateVector(reinterpret_cast<const wire::KeyOutcome*>(outcomes.data()), outcomes.size());
  return finish_as(request_id, wire::CreateSendResult(fbb, list, routed, seq, epoch, out, capped));
}

bytes_view frame_builder::inbox_delivery(std::string_view inbox_id, std::span<const std::string_view> route_keys,
                                         bytes_view payload, std::string_view stream, std::uint64_t seq,
                                         std::uint64_t epoch, std::uint32_t time_left_ms, std::uint64_t offer_id) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto keys = string_list(fbb, route_keys, strings_);
  const auto id = fbb.CreateString(inbox_id.data(), inbox_id.size());
  const auto st = string_or_null(fbb, stream);
  return finish_as(0, wire::CreateInboxDelivery(fbb, id, keys, data, st, seq, epoch, time_left_ms, offer_id));
}

bytes_view frame_builder::offer_ack(std::uint64_t request_id, std::uint64_t offer_id, std::string_view route_key) {
  auto& fbb = start();
  const auto key = string_or_null(fbb, route_key);
  return finish_as(request_id, wire::CreateOfferAck(fbb, offer_id, key));
}

bytes_view frame_builder::receipt(std::uint64_t offer_id, std::string_view route_key, std::string_view inbox_id,
                                  std::uint8_t outcome, std::uint64_t elapsed_us) {
  auto& fbb = start();
  const auto key = fbb.CreateString(route_key.data(), route_key.size());
  const auto inbox = fbb.CreateString(inbox_id.data(), inbox_id.size());
  return finish_as(
      0, wire::CreateReceipt(fbb, offer_id, key, inbox, static_cast<wire::ReceiptOutcome>(outcome), elapsed_us));
}

bytes_view frame_builder::withdraw(std::uint64_t request_id, std::uint64_t offer_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateWithdraw(fbb, offer_id));
}

bytes_view frame_builder::withdraw_result(std::uint64_t request_id, std::uint64_t offer_id, std::uint32_t dropped,
                                          std::uint32_t notified, std::uint32_t pending) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateWithdrawResult(fbb, offer_id, dropped, notified, pending));
}

bytes_view frame_builder::withdrawn(std::uint64_t offer_id, std::string_view inbox_id,
                                    std::span<const std::string_view> route_keys) {
  auto& fbb = start();
  const auto keys = string_list(fbb, route_keys, strings_);
  const auto inbox = fbb.CreateString(inbox_id.data(), inbox_id.size());
  return finish_as(0, wire::CreateWithdrawn(fbb, offer_id, inbox, keys));
}

bytes_view frame_builder::pending_offers(std::uint64_t request_id, std::string_view route_key, std::uint32_t limit) {
  auto& fbb = start();
  const auto key = fbb.CreateString(route_key.data(), route_key.size());
  return finish_as(request_id, wire::CreatePendingOffers(fbb, key, limit));
}

bytes_view frame_builder::pending_offers_result(std::uint64_t request_id, std::string_view route_key,
                                                std::span<const pending_offer_fields> offers) {
  auto& fbb = start();
  std::vector<Offset<wire::PendingOffer>> items;
  items.reserve(offers.size());
  for (const auto& o : offers) {
    const auto data = fbb.CreateVector(o.payload.data(), o.payload.size());
    items.push_back(wire::CreatePendingOffer(fbb, o.offer_id, data, o.time_left_ms, o.age_ms));
  }
  const auto list = fbb.CreateVector(items);
  const auto key = fbb.CreateString(route_key.data(), route_key.size());
  return finish_as(request_id, wire::CreatePendingOffersResult(fbb, key, list));
}

bytes_view frame_builder::exposure_query(std::uint64_t request_id, std::span<const std::string_view> route_keys,
                                         std::uint32_t window_ms) {
  auto& fbb = start();
  auto keys = string_list(fbb, route_keys, strings_);
  if (keys.IsNull()) keys = fbb.CreateVector(std::vector<Offset<String>>{});
  return finish_as(request_id, wire::CreateExposureQuery(fbb, keys, window_ms));
}

bytes_view frame_builder::exposure_result(std::uint64_t request_id, std::span<const std::uint32_t> counts) {
  auto& fbb = start();
  const auto list = fbb.CreateVector(counts.data(), counts.size());
  return finish_as(request_id, wire::CreateExposureResult(fbb, list));
}

bytes_view frame_builder::flag_set(std::uint64_t request_id, std::string_view name, std::uint8_t percent) {
  auto& fbb = start();
  const auto n = fbb.CreateString(name.data(), name.size());
  return finish_as(request_id, wire::CreateFlagSet(fbb, n, percent));
}

bytes_view frame_builder::flag_list(std::uint64_t request_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateFlagList(fbb));
}

namespace {
Offset<wire::FlagInfo> flag_info_of(flatbuffers::FlatBufferBuilder& fbb, const flag_info_fields& f) {
  const auto n = fbb.CreateString(f.name.data(), f.name.size());
  return wire::CreateFlagInfo(fbb, n, f.percent, f.connections_on, f.connections_off);
}
}  // namespace

bytes_view frame_builder::flag_info(std::uint64_t request_id, const flag_info_fields& f) {
  auto& fbb = start();
  return finish_as(request_id, flag_info_of(fbb, f));
}

bytes_view frame_builder::flag_list_result(std::uint64_t request_id, std::span<const flag_info_fields> flags) {
  auto& fbb = start();
  std::vector<Offset<wire::FlagInfo>> items;
  items.reserve(flags.size());
  for (const auto& f : flags) items.push_back(flag_info_of(fbb, f));
  const auto list = fbb.CreateVector(items);
  return finish_as(request_id, wire::CreateFlagListResult(fbb, list));
}

bytes_view frame_builder::append(std::uint64_t request_id, std::string_view stream, bytes_view payload) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateAppend(fbb, name, data));
}

bytes_view frame_builder::appended(std::uint64_t request_id, std::string_view stream, std::uint64_t seq,
                                   std::uint64_t epoch) {
  auto& fbb = start();
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateAppended(fbb, name, seq, epoch));
}

bytes_view frame_builder::read(std::uint64_t request_id, std::string_view stream, std::uint64_t from_seq,
                               std::uint32_t max_count, std::uint32_t max_bytes) {
  auto& fbb = start();
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateRead(fbb, name, from_seq, max_count, max_bytes));
}

bytes_view frame_builder::records(std::uint64_t request_id, std::string_view stream, std::uint64_t epoch,
                                  std::uint64_t first_seq, std::uint64_t last_seq,
                                  std::span<const record_fields> records, std::uint64_t expired,
                                  std::uint64_t next_seq) {
  auto& fbb = start();
  std::vector<Offset<wire::Record>> items;
  items.reserve(records.size());
  for (const auto& r : records) {
    const auto data = fbb.CreateVector(r.payload.data(), r.payload.size());
    const auto channel = string_or_null(fbb, r.channel);
    const auto keys = string_list(fbb, r.route_keys, strings_);
    items.push_back(wire::CreateRecord(fbb, r.seq, r.timestamp_ms, data, channel, keys, r.time_left_ms));
  }
  const auto list = fbb.CreateVector(items);
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateRecords(fbb, name, epoch, first_seq, last_seq, list, expired, next_seq));
}

namespace {

Offset<wire::StreamInfoResult> stream_info_table(flatbuffers::FlatBufferBuilder& fbb, const stream_info_fields& f) {
  const auto name = fbb.CreateString(f.stream.data(), f.stream.size());
  return wire::CreateStreamInfoResult(fbb, name, f.epoch, f.first_seq, f.last_seq, f.records, f.bytes, f.created_ms,
                                      f.retention.max_records, f.retention.max_age_ms, f.retention.max_bytes,
                                      f.own_retention);
}

}  // namespace

bytes_view frame_builder::stream_info(std::uint64_t request_id, std::string_view stream) {
  auto& fbb = start();
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateStreamInfo(fbb, name));
}

bytes_view frame_builder::stream_info_result(std::uint64_t request_id, const stream_info_fields& f) {
  auto& fbb = start();
  return finish_as(request_id, stream_info_table(fbb, f));
}

bytes_view frame_builder::stream_list(std::uint64_t request_id, std::string_view prefix, std::uint32_t limit) {
  auto& fbb = start();
  const auto p = string_or_null(fbb, prefix);
  return finish_as(request_id, wire::CreateStreamList(fbb, p, limit));
}

bytes_view frame_builder::stream_list_result(std::uint64_t request_id, std::span<const stream_info_fields> streams,
                                             bool more) {
  auto& fbb = start();
  std::vector<Offset<wire::StreamInfoResult>> items;
  items.reserve(streams.size());
  for (const auto& s : streams) items.push_back(stream_info_table(fbb, s));
  const auto list = fbb.CreateVector(items);
  return finish_as(request_id, wire::CreateStreamListResult(fbb, list, more));
}

bytes_view frame_builder::set_retention(std::uint64_t request_id, std::string_view stream,
                                        const retention_fields& limits, bool clear) {
  auto& fbb = start();
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id,
                   wire::CreateSetRetention(fbb, name, limits.max_records, limits.max_age_ms, limits.max_bytes, clear));
}

bytes_view frame_builder::stream_delete(std::uint64_t request_id, std::string_view stream) {
  auto& fbb = start();
  const auto name = fbb.CreateString(stream.data(), stream.size());
  return finish_as(request_id, wire::CreateStreamDelete(fbb, name));
}

bytes_view frame_builder::stats(std::uint64_t request_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateStats(fbb));
}

bytes_view frame_builder::stats_result(std::uint64_t request_id, const stats_fields& f) {
  auto& fbb = start();
  const auto version = string_or_null(fbb, f.version);
  std::vector<Offset<wire::StatsSetting>> settings;
  settings.reserve(f.settings.size());
  for (const auto& s : f.settings)
    settings.push_back(
        wire::CreateStatsSetting(fbb, fbb.CreateString(s.name.data(), s.name.size()), string_or_null(fbb, s.value)));
  const auto settings_vec = fbb.CreateVector(settings);
  std::vector<Offset<wire::StatsValue>> values;
  values.reserve(f.values.size());
  for (const auto& v : f.values)
    values.push_back(wire::CreateStatsValue(fbb, fbb.CreateString(v.name.data(), v.name.size()), v.value, v.counter));
  const auto values_vec = fbb.CreateVector(values);
  return finish_as(request_id,
                   wire::CreateStatsResult(fbb, version, f.instance_id, f.uptime_ms, settings_vec, values_vec));
}

bytes_view frame_builder::conn_list(std::uint64_t request_id, std::uint8_t sort, std::uint32_t limit,
                                    std::uint64_t cursor) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateConnList(fbb, static_cast<wire::ConnSort>(sort), limit, cursor));
}

bytes_view frame_builder::conn_list_result(std::uint64_t request_id, std::span<const conn_info_fields> conns,
                                           std::uint64_t total, std::uint64_t next_cursor) {
  auto& fbb = start();
  std::vector<Offset<wire::ConnInfo>> items;
  items.reserve(conns.size());
  std::vector<Offset<String>> strings;
  for (const auto& c : conns) {
    strings.clear();
    for (const auto cap : c.capabilities) strings.push_back(fbb.CreateString(cap.data(), cap.size()));
    const auto caps = fbb.CreateVector(strings);
    strings.clear();
    for (const auto& box : c.inboxes) strings.push_back(fbb.CreateString(box));
    const auto inboxes = fbb.CreateVector(strings);
    const auto leases = fbb.CreateVector(c.inbox_leases);
    const auto name = string_or_null(fbb, c.name);
    const auto client_id = string_or_null(fbb, c.client_id);
    const auto principal = string_or_null(fbb, c.principal);
    const auto address = string_or_null(fbb, c.address);
    items.push_back(wire::CreateConnInfo(fbb, c.id, name, client_id, principal, address, c.age_ms, c.idle_ms, caps,
                                         c.subscriptions, inboxes, leases, c.pending_bytes, c.dropped, c.bytes_in,
                                         c.bytes_out, c.tls));
  }
  const auto list = fbb.CreateVector(items);
  return finish_as(request_id, wire::CreateConnListResult(fbb, list, total, next_cursor));
}

bytes_view frame_builder::cluster_status(std::uint64_t request_id) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateClusterStatus(fbb));
}

bytes_view frame_builder::cluster_takeover(std::uint64_t request_id, std::string_view node_id) {
  auto& fbb = start();
  const auto node = fbb.CreateString(node_id);
  return finish_as(request_id, wire::CreateClusterTakeover(fbb, node));
}

bytes_view frame_builder::cluster_takeover_result(std::uint64_t request_id, std::string_view node_id,
                                                  std::span<const std::uint32_t> partitions,
                                                  std::span<const std::string> holders) {
  auto& fbb = start();
  const auto node = fbb.CreateString(node_id);
  const auto parts = fbb.CreateVector(partitions.data(), partitions.size());
  std::vector<Offset<flatbuffers::String>> names;
  names.reserve(holders.size());
  for (const auto& h : holders) names.push_back(fbb.CreateString(h));
  const auto list = fbb.CreateVector(names);
  return finish_as(request_id, wire::CreateClusterTakeoverResult(fbb, node, parts, list));
}

bytes_view frame_builder::cluster_status_result(std::uint64_t request_id, const cluster_status_fields& f) {
  auto& fbb = start();
  std::vector<Offset<wire::ClusterMember>> members;
  members.reserve(f.members.size());
  for (const auto& m : f.members) {
    const auto node_id = string_or_null(fbb, m.node_id);
    const auto address = string_or_null(fbb, m.address);
    members.push_back(wire::CreateClusterMember(fbb, node_id, address, m.incarnation, m.self, m.synced_in, m.patterns,
                                                m.messages_out, m.messages_in, m.records_out, m.records_in, m.lost_in,
                                                m.failed_out, m.partitions));
  }
  const auto members_vec = fbb.CreateVector(members);
  std::vector<Offset<wire::EtcdEndpointHealth>> etcd;
  etcd.reserve(f.etcd.size());
  for (const auto& e : f.etcd) {
    const auto endpoint = string_or_null(fbb, e.endpoint);
    const auto version = string_or_null(fbb, e.version);
    const auto error = string_or_null(fbb, e.error);
    etcd.push_back(wire::CreateEtcdEndpointHealth(fbb, endpoint, e.reachable, e.leader, version, error));
  }
  const auto etcd_vec = fbb.CreateVector(etcd);
  const auto& n = f.nats;
  const auto state = string_or_null(fbb, n.state);
  const auto server_url = string_or_null(fbb, n.server_url);
  const auto nats = wire::CreateNatsLinkStatus(fbb, state, server_url, n.max_payload, n.messages_in, n.messages_out,
                                               n.dropped_in, n.dropped_out, n.reconnects);
  const auto cluster_name = string_or_null(fbb, f.cluster_name);
  const auto node_id = string_or_null(fbb, f.node_id);
  return finish_as(request_id,
                   wire::CreateClusterStatusResult(fbb, cluster_name, node_id, f.incarnation, f.view_revision,
                                                   f.in_standing, f.synced, members_vec, etcd_vec, nats,
                                                   f.local_patterns, f.unconfirmed, f.interest_timeouts, f.lost_in));
}

bytes_view frame_builder::dropped(std::uint64_t count) {
  auto& fbb = start();
  return finish(0, static_cast<std::uint8_t>(wire::Message::Dropped), wire::CreateDropped(fbb, count).Union());
}

bytes_view frame_builder::stream_dropped(std::string_view stream, std::uint64_t seq, std::uint64_t epoch,
                                         std::string_view channel, std::string_view inbox_id) {
  auto& fbb = start();
  const auto st = string_or_null(fbb, stream);
  const auto ch = string_or_null(fbb, channel);
  const auto inbox = string_or_null(fbb, inbox_id);
  return finish_as(0, wire::CreateStreamDropped(fbb, st, seq, epoch, ch, inbox));
}

bytes_view frame_builder::drain(std::uint64_t request_id, std::uint32_t window_ms) {
  auto& fbb = start();
  return finish_as(request_id, wire::CreateDrain(fbb, window_ms));
}

bytes_view frame_builder::auth_challenge(bytes_view nonce) {
  auto& fbb = start();
  const auto n = fbb.CreateVector(nonce.data(), nonce.size());
  return finish_as(0, wire::CreateAuthChallenge(fbb, n));
}

bytes_view frame_builder::auth_proof(bytes_view signature) {
  auto& fbb = start();
  const auto sig = fbb.CreateVector(signature.data(), signature.size());
  return finish_as(0, wire::CreateAuthProof(fbb, sig));
}

}  // namespace switchyard::protocol

// client: the sequence log (Append, Read).

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"
#include "offer_frames.hpp"

namespace switchyard {

namespace {

template <class T>
using result = std::expected<T, std::error_code>;

result<append_ack> parse_appended(const wire::Frame& f) {
  const auto* a = f.message_as_Appended();
  if (!a) return std::unexpected(make_error_code(errc::protocol_violation));
  return append_ack{a->seq(), a->epoch()};
}

}  // namespace

result<append_ack> client::append(std::string_view stream, std::span<const std::byte> payload) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<append_ack>([&](std::uint64_t r) { return local_builder().append(r, stream, data); },
                                 parse_appended);
}

void client::async_append(std::string_view stream, std::span<const std::byte> payload,
                          std::function<void(result<append_ack>)> done) {
  if (!impl_->log_cap) return done(std::unexpected(make_error_code(errc::not_supported)));
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  impl_->call_async<append_ack>([&](std::uint64_t r) { return local_builder().append(r, stream, data); },
                                parse_appended, std::move(done));
}

result<append_ack> client::publish_durable(std::string_view channel, std::string_view stream,
                                           std::span<const std::byte> payload) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  if (!protocol::is_valid_channel(channel)) return std::unexpected(make_error_code(errc::invalid_channel));
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<append_ack>([&](std::uint64_t r) { return local_builder().publish(r, channel, data, stream); },
                                 parse_appended);
}

result<send_result> client::send_durable(std::span<const std::string_view> route_keys, std::string_view stream,
                                         std::span<const std::byte> payload) {
  if (!impl_->log_cap || !impl_->routing) return std::unexpected(make_error_code(errc::not_supported));
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<send_result>([&](std::uint64_t r) { return local_builder().send(r, route_keys, data, stream); },
                                  detail::parse_send_result);
}

result<append_ack> client::publish_durable(std::string_view channel, std::string_view stream,
                                           std::span<const std::byte> payload, std::chrono::milliseconds expires_in) {
  if (expires_in.count() == 0) return publish_durable(channel, stream, payload);
  if (!impl_->log_cap || !impl_->offers) return std::unexpected(make_error_code(errc::not_supported));
  if (!protocol::is_valid_channel(channel)) return std::unexpected(make_error_code(errc::invalid_channel));
  const auto expires = detail::expiry_ms(expires_in);
  if (!expires) return std::unexpected(expires.error());
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<append_ack>(
      [&](std::uint64_t r) { return local_builder().publish(r, channel, data, stream, *expires); }, parse_appended);
}

result<send_result> client::send_durable(std::span<const std::string_view> route_keys, std::string_view stream,
                                         std::span<const std::byte> payload, std::chrono::milliseconds expires_in) {
  if (expires_in.count() == 0) return send_durable(route_keys, stream, payload);
  if (!impl_->log_cap || !impl_->routing || !impl_->offers)
    return std::unexpected(make_error_code(errc::not_supported));
  const auto expires = detail::expiry_ms(expires_in);
  if (!expires) return std::unexpected(expires.error());
  protocol::offer_fields fields;
  fields.expires_in_ms = *expires;
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<send_result>(
      [&](std::uint64_t r) { return local_builder().send(r, route_keys, data, stream, &fields); },
      detail::parse_send_result);
}

result<stream_read> client::read(std::string_view stream, std::uint64_t from_seq, std::size_t max_count,
                                 std::size_t max_bytes) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  const auto count = static_cast<std::uint32_t>(std::min<std::size_t>(max_count, UINT32_MAX));
  const auto bytes = static_cast<std::uint32_t>(std::min<std::size_t>(max_bytes, UINT32_MAX));
  return impl_->call<stream_read>(
      [&](std::uint64_t r) { return local_builder().read(r, stream, from_seq, count, bytes); }, detail::parse_records);
}

result<stream_read> detail::parse_records(const wire::Frame& f) {
  const auto* m = f.message_as_Records();
  if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
  stream_read out{m->epoch(), m->first_seq(), m->last_seq(), {}, m->expired(), m->next_seq()};
  if (m->records()) {
    out.records.reserve(m->records()->size());
    for (const auto* rec : *m->records()) {
      const auto* p = rec->payload();
      auto& r = out.records.emplace_back();
      r.seq = rec->seq();
      r.timestamp_ms = rec->timestamp_ms();
      if (p)
        r.payload.assign(reinterpret_cast<const std::byte*>(p->data()),
                         reinterpret_cast<const std::byte*>(p->data()) + p->size());
      // How it was delivered live: absent (empty) for a plain append and
      // from servers that predate these fields.
      if (const auto* ch = rec->channel()) r.channel = ch->str();
      if (const auto* keys = rec->route_keys()) {
        r.route_keys.reserve(keys->size());
        for (const auto* k : *keys) r.route_keys.push_back(k->str());
      }
      r.time_left = std::chrono::milliseconds(rec->time_left_ms());
    }
  }
  // From a broker before expiries: the next read follows the last record.
  if (out.next_seq == 0 && !out.records.empty()) out.next_seq = out.records.back().seq + 1;
  return out;
}

}  // namespace switchyard

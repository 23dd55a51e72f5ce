#include "broker/handlers/log_handler.hpp"

#include "broker/tables/record_destination.hpp"
#include "broker/requests/wire_error.hpp"
#include "protocol/answer_budget.hpp"
#include "protocol/limits.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

namespace switchyard::broker {

using protocol::errc;

namespace {
constexpr std::uint32_t default_read_count = 1000;
constexpr std::uint32_t max_read_count = protocol::max_list_items;
constexpr std::uint32_t min_record_bytes = 128;
}  // namespace

log_handler::log_handler(const server_config& config, durable_pipeline& durable, protocol::frame_builder& builder,
                         server_counters& counters, std::shared_ptr<spdlog::logger> logger)
    : config_(config), durable_(durable), builder_(builder), counters_(counters), logger_(std::move(logger)) {}

void log_handler::append(peer& from, std::uint64_t rid, const protocol::wire::Append& m) {
  const std::string_view stream = m.stream()->string_view();
  const auto* p = m.payload();
  const auto payload = p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{};
  // A plain append has no destination.
  if (durable_.check(stream, payload.size(), 0))
    return from.send_error(rid, errc::bad_request, durable_pipeline::check_message());
  durable_.append(from, rid, stream, payload, {});
}

void log_handler::read(peer& from, std::uint64_t rid, const protocol::wire::Read& m) {
  auto& log = durable_.log();
  const std::string_view stream = m.stream()->string_view();
  if (log.check(stream, 0)) return from.send_error(rid, errc::bad_request, "stream names are 1..255 bytes");
  // Keep the answer inside one frame: payload and destination bytes here
  // (half a frame), per-record and per-key overhead below.
  const std::uint32_t payload_budget = config_.max_frame / 2;
  const std::uint32_t max_bytes = m.max_bytes() == 0 ? payload_budget : std::min(m.max_bytes(), payload_budget);
  // A record takes at least min_record_bytes of the frame.
  const std::uint32_t max_count = std::min({m.max_count() == 0 ? default_read_count : m.max_count(), max_read_count,
                                            std::max<std::uint32_t>(1, config_.max_frame / min_record_bytes)});
  std::uint64_t from_seq = m.from_seq();
  if (from_seq == 0) {  // 0: from the first retained record
    auto info = log.info(stream);
    if (!info && info.error() == storage::errc::not_found)
      return from.send_error(rid, errc::not_found, "no such stream");
    // Damaged metadata: the read below reports it.
    from_seq = info ? info->first_seq : 1;
  }
  storage::diagnostics diag;
  auto r = log.read(stream, from_seq, max_count, max_bytes, &diag);
  if (!r) {
    const auto ec = r.error();
    if (ec == storage::errc::not_found) return from.send_error(rid, errc::not_found, "no such stream");
    if (ec == storage::errc::corrupted) {
      // The record at `from_seq` (or the stream's metadata) is damaged: say
      // which, and how to go on past it. A read that runs into damage
      // later answers the records before it (Records), so this names the
      // first damaged one a reader meets.
      logger_->error("conn={} stream={} seq={} log corrupted: {}", from.id(), stream, from_seq, diag.message);
      std::string message = "log corrupted: " + (diag.message.empty() ? ec.message() : diag.message);
      if (diag.seq != 0) message += "; read from " + std::to_string(diag.seq + 1) + " to go on past it";
      return from.send_error(rid, errc::corrupted, message);
    }
    if (ec == storage::errc::trimmed) {
      auto info = log.info(stream);
      const std::uint64_t first = info ? info->first_seq : 0;
      return from.send(builder_.error(
          rid, errc::trimmed,
          "sequence " + std::to_string(from_seq) + " was trimmed; the log starts at " + std::to_string(first), 0, false,
          first));
    }
    logger_->error("conn={} stream={} seq={} read failed: {}", from.id(), stream, from_seq, ec.message());
    return from.send_error(rid, wire_code(ec), ec.message());
  }
  // Each record carries how it was delivered live (its stored destination).
  // The route keys of every record share one vector; the records' spans
  // into it are taken once it is complete.
  std::vector<protocol::record_fields> records;
  std::vector<destination_view> destinations;
  std::vector<std::string_view> keys;
  records.reserve(r->records.size());
  destinations.reserve(r->records.size());
  // The storage budget counts payload and destination bytes; the wire adds
  // per-record and per-key overhead (and a destination's keys take more
  // room on the wire than on disk). Stop before the answer could pass the
  // frame limit; the first record always goes.
  auto budget = protocol::answer_budget::for_records(config_.max_frame);
  budget.reserve(stream.size());
  // Records appended with an expiry are left out once it has passed
  // (counted in `expired`); next_seq says where the next read goes on.
  const std::uint64_t now_ms = log.wall_clock_ms();
  const bool time_left = from.wants_offer_fields();
  std::uint64_t expired = 0;
  std::uint64_t next_seq = from_seq;
  for (const auto& rec : r->records) {
    auto dest = decode_destination(rec.destination, keys);
    if (!dest) {
      logger_->error("conn={} stream={} seq={} has a malformed destination", from.id(), stream, rec.seq);
      return from.send_error(rid, errc::corrupted,
                             "log corrupted: stream '" + std::string(stream) + "', record " + std::to_string(rec.seq) +
                                 ": its delivery destination is malformed; read from " + std::to_string(rec.seq + 1) +
                                 " to go on past it");
    }
    std::uint32_t left_ms = 0;
    if (dest->expires_in_ms != 0) {
      const std::uint64_t expires_at = rec.timestamp_ms + dest->expires_in_ms;
      if (now_ms >= expires_at) {
        keys.resize(dest->first_key);  // its keys are not needed
        ++expired;
        next_seq = rec.seq + 1;
        continue;
      }
      if (time_left) left_ms = static_cast<std::uint32_t>(std::min<std::uint64_t>(expires_at - now_ms, UINT32_MAX));
    }
    std::size_t size =
        rec.payload.size() + protocol::record_overhead + dest->channel.size() + protocol::string_overhead;
    for (std::size_t i = 0; i < dest->key_count; ++i)
      size += keys[dest->first_key + i].size() + protocol::string_overhead;
    if (!budget.take(size)) break;
    records.push_back({rec.seq,
                       rec.timestamp_ms,
                       {reinterpret_cast<const std::uint8_t*>(rec.payload.data()), rec.payload.size()},
                       dest->channel,
                       {},
                       left_ms});
    destinations.push_back(*dest);
    next_seq = rec.seq + 1;
  }
  if (expired != 0) counters_.expired_read += expired;
  for (std::size_t i = 0; i < records.size(); ++i)
    records[i].route_keys = std::span(keys).subspan(destinations[i].first_key, destinations[i].key_count);
  from.send(builder_.records(rid, stream, r->epoch, r->first_seq, r->last_seq, records, expired, next_seq));
}

}  // namespace switchyard::broker

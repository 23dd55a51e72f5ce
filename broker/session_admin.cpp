// session: stream administration on the sequence log (capability "log"):
// StreamInfo and StreamList read the log on the loop thread, as Read does;
// SetRetention goes through the group committer's writer thread, and is
// answered on the loop thread once the change is on disk.

#include "broker/server_core.hpp"
#include "broker/session.hpp"
#include "protocol/limits.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;

namespace {

constexpr std::string_view bad_name = "stream names are 1..255 bytes";
// Bytes a list item takes on the wire besides its name (11 scalars, table
// and vtable, offsets), rounded up.
constexpr std::size_t list_item_overhead = 160;

// The stream as the wire shows it: with the retention in force, its own or
// the server's default.
protocol::stream_info_fields fields(const storage::stream_info& i, const storage::retention& server_default) {
  const storage::retention& r = i.own_retention ? *i.own_retention : server_default;
  return {i.name,
          i.epoch,
          i.first_seq,
          i.last_seq,
          i.records,
          i.bytes,
          i.created_ms,
          {r.max_records, static_cast<std::uint64_t>(r.max_age.count()), r.max_bytes},
          i.own_retention.has_value()};
}

errc to_wire(std::error_code ec) {
  if (ec == storage::errc::not_found) return errc::not_found;
  if (ec == storage::errc::invalid_argument) return errc::bad_request;
  if (ec == storage::errc::storage_full) return errc::storage_full;
  if (ec == storage::errc::corrupted) return errc::corrupted;
  return errc::internal;
}

// The error message of a failed StreamInfo/StreamList: what the log found
// damaged, if that was it.
std::string describe(std::error_code ec, const storage::diagnostics& diag) {
  if (ec == storage::errc::not_found) return "no such stream";
  if (ec == storage::errc::corrupted) return "log corrupted: " + (diag.message.empty() ? ec.message() : diag.message);
  return ec.message();
}

}  // namespace

void session::handle_stream_admin(const wire::Frame& frame) {
  const std::uint64_t rid = frame.request_id();
  auto& log = *core_.stream_log;
  const storage::retention server_default{core_.config.retention_max_records, core_.config.retention_max_age,
                                          core_.config.retention_max_bytes};

  switch (frame.message_type()) {
    case wire::Message::StreamInfo: {
      const std::string_view name = frame.message_as_StreamInfo()->stream()->string_view();
      if (log.check(name, 0)) return send_error(rid, errc::bad_request, bad_name);
      storage::diagnostics diag;
      auto info = log.info(name, &diag);
      if (!info) {
        if (info.error() != storage::errc::not_found)
          core_.log->error("conn={} stream={} info failed: {}", id_, name, describe(info.error(), diag));
        return send_error(rid, to_wire(info.error()), describe(info.error(), diag));
      }
      return send(core_.builder.stream_info_result(rid, fields(*info, server_default)));
    }
    case wire::Message::StreamList: {
      const auto& m = *frame.message_as_StreamList();
      const std::string_view prefix = m.prefix() ? m.prefix()->string_view() : std::string_view{};
      if (!prefix.empty() && log.check(prefix, 0))
        return send_error(rid, errc::bad_request, "a stream prefix is at most 255 bytes");
      const std::uint32_t limit =
          m.limit() == 0 ? protocol::default_list_limit : std::min(m.limit(), protocol::max_list_limit);
      bool more = false;
      storage::diagnostics diag;
      auto list = log.list(prefix, limit, &more, &diag);
      if (!list) {
        core_.log->error("conn={} stream list failed: {}", id_, describe(list.error(), diag));
        return send_error(rid, to_wire(list.error()), describe(list.error(), diag));
      }
      // Keep the answer well inside one frame: cut the list and say so.
      std::vector<protocol::stream_info_fields> out;
      out.reserve(list->size());
      std::size_t bytes = 1024;
      for (const auto& info : *list) {
        bytes += info.name.size() + list_item_overhead;
        if (bytes > core_.config.max_frame / 2) {
          more = true;
          break;
        }
        out.push_back(fields(info, server_default));
      }
      return send(core_.builder.stream_list_result(rid, out, more));
    }
    case wire::Message::SetRetention: {
      const auto& m = *frame.message_as_SetRetention();
      const std::string_view name = m.stream()->string_view();
      if (log.check(name, 0)) return send_error(rid, errc::bad_request, bad_name);
      std::optional<storage::retention> limits;
      if (!m.clear()) {
        const auto max = protocol::max_retention_limit;
        if (m.max_records() > max || m.max_age_ms() > max || m.max_bytes() > max)
          return send_error(rid, errc::bad_request, "retention limits are at most 2^53 - 1 (9007199254740991)");
        limits = storage::retention{m.max_records(), std::chrono::milliseconds(m.max_age_ms()), m.max_bytes()};
      }
      if (limits)
        core_.log->info("conn={} stream={} retention set: max_records={} max_age_ms={} max_bytes={}", id_, name,
                        limits->max_records, limits->max_age.count(), limits->max_bytes);
      else
        core_.log->info("conn={} stream={} retention cleared (the default applies)", id_, name);
      // `done` runs on the writer thread once the change is on disk: answer
      // from the loop thread, if the session is still there.
      const std::uint64_t ticket = open_ticket();
      core_.committer->set_retention(
          name, limits,
          [weak = weak_from_this(), ex = socket_.get_executor(), rid, ticket,
           server_default](std::expected<storage::stream_info, std::error_code> r) mutable {
            asio::post(ex, [weak = std::move(weak), rid, ticket, server_default, r = std::move(r)] {
              auto s = weak.lock();
              if (!s || s->closed_) return;
              if (r) {
                s->send(s->core_.builder.stream_info_result(rid, fields(*r, server_default)));
              } else {
                if (r.error() != storage::errc::not_found)
                  s->core_.log->error("conn={} retention change failed: {}", s->id_, r.error().message());
                s->send_error(rid, to_wire(r.error()),
                              r.error() == storage::errc::not_found ? "no such stream" : r.error().message());
              }
              s->close_ticket(ticket);
            });
          });
      return;
    }
    default:
      return;
  }
}

}  // namespace switchyard::broker

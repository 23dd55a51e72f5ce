#include "broker/handlers/stream_admin_handler.hpp"

#include "broker/requests/wire_error.hpp"
#include "protocol/answer_budget.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

using protocol::errc;

namespace {

constexpr std::string_view bad_name = "stream names are 1..255 bytes";

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

// The error message of a failed stream request: what the log found
// damaged, if that was it.
std::string describe(std::error_code ec, const storage::diagnostics& diag) {
  if (ec == storage::errc::not_found) return "no such stream";
  if (ec == storage::errc::corrupted) return "log corrupted: " + (diag.message.empty() ? ec.message() : diag.message);
  return ec.message();
}

}  // namespace

stream_admin_handler::stream_admin_handler(const server_config& config, durable_pipeline& durable,
                                           asio::any_io_executor loop, protocol::frame_builder& builder,
                                           std::shared_ptr<spdlog::logger> logger)
    : config_(config), durable_(durable), loop_(std::move(loop)), builder_(builder), logger_(std::move(logger)) {}

storage::retention stream_admin_handler::server_default() const {
  return {config_.retention_max_records, config_.retention_max_age, config_.retention_max_bytes};
}

void stream_admin_handler::stream_info(peer& from, std::uint64_t rid, const protocol::wire::StreamInfo& m) {
  auto& log = durable_.log();
  const std::string_view name = m.stream()->string_view();
  if (log.check(name, 0)) return from.send_error(rid, errc::bad_request, bad_name);
  storage::diagnostics diag;
  auto info = log.info(name, &diag);
  if (!info) {
    if (info.error() != storage::errc::not_found)
      logger_->error("conn={} stream={} info failed: {}", from.id(), name, describe(info.error(), diag));
    return from.send_error(rid, wire_code(info.error()), describe(info.error(), diag));
  }
  from.send(builder_.stream_info_result(rid, fields(*info, server_default())));
}

void stream_admin_handler::stream_list(peer& from, std::uint64_t rid, const protocol::wire::StreamList& m) {
  auto& log = durable_.log();
  const std::string_view prefix = m.prefix() ? m.prefix()->string_view() : std::string_view{};
  if (!prefix.empty() && log.check(prefix, 0))
    return from.send_error(rid, errc::bad_request, "a stream prefix is at most 255 bytes");
  const std::uint32_t limit =
      m.limit() == 0 ? protocol::default_list_limit : std::min(m.limit(), protocol::max_list_limit);
  bool more = false;
  storage::diagnostics diag;
  auto list = log.list(prefix, limit, &more, &diag);
  if (!list) {
    logger_->error("conn={} stream list failed: {}", from.id(), describe(list.error(), diag));
    return from.send_error(rid, wire_code(list.error()), describe(list.error(), diag));
  }
  // Keep the answer inside one frame: cut the list and say so.
  const auto defaults = server_default();
  std::vector<protocol::stream_info_fields> out;
  out.reserve(list->size());
  auto budget = protocol::answer_budget::for_list(config_.max_frame);
  for (const auto& info : *list) {
    if (held_ && !held_(info.name)) continue;  // cluster mode: another node holds it now
    if (!budget.take(info.name.size() + protocol::stream_item_overhead)) {
      more = true;
      break;
    }
    out.push_back(fields(info, defaults));
  }
  from.send(builder_.stream_list_result(rid, out, more));
}

void stream_admin_handler::merge_lists(peer& from, std::uint64_t rid, std::uint32_t limit,
                                       std::span<const protocol::bytes_view> answers) {
  limit = limit == 0 ? protocol::default_list_limit : std::min(limit, protocol::max_list_limit);
  protocol::frame_parser parser(std::max<std::uint32_t>(config_.max_frame, 1u << 20));
  std::vector<protocol::stream_info_fields> all;
  std::vector<std::string> names;  // the fields' names point here
  bool more = false;
  // Each answer's first frame: its StreamListResult, or its Error.
  for (const auto answer : answers) {
    auto parsed = parser.next(answer);
    if (!parsed || !*parsed) {
      logger_->warn("conn={} a member's stream list did not parse", from.id());
      return from.send_error(rid, errc::internal, "a node's stream list did not parse");
    }
    const auto* f = (*parsed)->frame;
    if (const auto* e = f->message_as_Error())
      return from.send_error(rid, static_cast<errc>(e->code()), e->message() ? e->message()->string_view() : "");
    const auto* r = f->message_as_StreamListResult();
    if (!r) return from.send_error(rid, errc::internal, "a node answered its stream list with another message");
    more = more || r->more();
    if (!r->streams()) continue;
    for (const auto* s : *r->streams()) {
      names.emplace_back(s->stream() ? s->stream()->string_view() : std::string_view{});
      protocol::stream_info_fields x;
      x.epoch = s->epoch();
      x.first_seq = s->first_seq();
      x.last_seq = s->last_seq();
      x.records = s->records();
      x.bytes = s->bytes();
      x.created_ms = s->created_ms();
      x.retention = {s->max_records(), s->max_age_ms(), s->max_bytes()};
      x.own_retention = s->own_retention();
      all.push_back(x);
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i) all[i].stream = names[i];
  std::stable_sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.stream < y.stream; });
  // One holder per stream: a name twice (a view changing under the list)
  // is listed once.
  all.erase(std::unique(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.stream == y.stream; }),
            all.end());
  if (all.size() > limit) {
    all.resize(limit);
    more = true;
  }
  auto budget = protocol::answer_budget::for_list(config_.max_frame);
  std::size_t n = 0;
  for (; n < all.size(); ++n)
    if (!budget.take(all[n].stream.size() + protocol::stream_item_overhead)) break;
  if (n < all.size()) {
    all.resize(n);
    more = true;
  }
  from.send(builder_.stream_list_result(rid, all, more));
}

void stream_admin_handler::set_retention(peer& from, std::uint64_t rid, const protocol::wire::SetRetention& m) {
  const std::string_view name = m.stream()->string_view();
  if (durable_.log().check(name, 0)) return from.send_error(rid, errc::bad_request, bad_name);
  std::optional<storage::retention> limits;
  if (!m.clear()) {
    // Limits may create the stream: only under a name one can type again.
    if (!protocol::is_printable_stream_name(name))
      return from.send_error(rid, errc::bad_request,
                             "a stream given retention limits needs a name of printable ASCII without spaces "
                             "(0x21..0x7E, 1..255 bytes)");
    const auto max = protocol::max_retention_limit;
    if (m.max_records() > max || m.max_age_ms() > max || m.max_bytes() > max)
      return from.send_error(rid, errc::bad_request, "retention limits are at most 2^53 - 1 (9007199254740991)");
    limits = storage::retention{m.max_records(), std::chrono::milliseconds(m.max_age_ms()), m.max_bytes()};
  }
  // Logged once the change is on disk, saying what it did.
  durable_.committer().change_retention(
      name, limits, answer_when_done(from, rid, [this, limits](std::uint64_t conn, const auto& change) {
        const auto& st = change.info;
        if (!limits)
          logger_->info("conn={} stream={} retention cleared (the default applies)", conn, st.name);
        else
          logger_->info("conn={} stream={} retention set: max_records={} max_age_ms={} max_bytes={}{}", conn, st.name,
                        limits->max_records, limits->max_age.count(), limits->max_bytes,
                        change.created ? " (stream created, empty)" : "");
      }));
}

void stream_admin_handler::delete_stream(peer& from, std::uint64_t rid, const protocol::wire::StreamDelete& m) {
  const std::string_view name = m.stream()->string_view();
  // Any name the log holds may be deleted, printable or not.
  if (durable_.log().check(name, 0)) return from.send_error(rid, errc::bad_request, bad_name);
  durable_.committer().delete_stream(name, answer_when_done(from, rid, [this](std::uint64_t conn, const auto& change) {
                                       const auto& st = change.info;
                                       if (st.records == 0)
                                         logger_->info("conn={} stream={} deleted: empty (last seq {}, epoch {})", conn,
                                                       st.name, st.last_seq, st.epoch);
                                       else
                                         logger_->info(
                                             "conn={} stream={} deleted: {} records, {} bytes (seq {}..{}, epoch {})",
                                             conn, st.name, st.records, st.bytes, st.first_seq, st.last_seq, st.epoch);
                                     }));
}

template <class OnDone>
storage::group_committer::change_completion stream_admin_handler::answer_when_done(peer& from, std::uint64_t rid,
                                                                                   OnDone on_done) {
  // The completion runs on the writer thread once the change is on disk:
  // answer from the loop thread, if the peer is still there. The ticket
  // makes a Ping after the request wait for the answer.
  const std::uint64_t ticket = from.open_ticket();
  return [this, weak = from.weak_peer(), conn = from.id(), rid, ticket, on_done = std::move(on_done)](
             std::expected<storage::group_committer::stream_change, std::error_code> r) mutable {
    asio::post(loop_,
               [this, weak = std::move(weak), conn, rid, ticket, on_done = std::move(on_done), r = std::move(r)] {
                 // Done on disk whether or not the requester is still there.
                 if (r)
                   on_done(conn, *r);
                 else if (r.error() != storage::errc::not_found)
                   logger_->error("conn={} stream change failed: {}", conn, r.error().message());
                 auto p = weak.lock();
                 if (!p) return;
                 if (r) {
                   if (!p->closed()) p->send(builder_.stream_info_result(rid, fields(r->info, server_default())));
                 } else {
                   if (!p->closed())
                     p->send_error(rid, wire_code(r.error()),
                                   r.error() == storage::errc::not_found ? "no such stream" : r.error().message());
                 }
                 p->close_ticket(ticket);
               });
  };
}

}  // namespace switchyard::broker

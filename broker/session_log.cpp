// session: Append and Read on the sequence log (capability "log"), and the
// durable half of publish/send with a stream. Appends go through the group
// committer; its writer thread hands results back to the loop through
// server_core's mailbox (one post per batch), so an answer or delivery
// leaves only once the record is durable.

#include "broker/log_subject.hpp"
#include "broker/server_core.hpp"
#include "broker/session.hpp"
#include "protocol/limits.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>
#include <vector>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;

namespace {
constexpr std::uint32_t default_read_count = 1000;
constexpr std::uint32_t max_read_count = protocol::max_list_items;
// Appends committed per loop turn on the loop thread (batch and none modes).
constexpr std::size_t commit_step_records = 128;
}  // namespace

bool session::can_append(std::uint64_t rid, std::string_view stream, std::size_t payload_size,
                         std::size_t subject_size, bool by_policy) {
  if ((!log_ && !by_policy) || !core_.committer) {
    send_error(rid, errc::unsupported_message, no_log_message());
    return false;
  }
  if (core_.stream_log->check(stream, payload_size, subject_size)) {
    send_error(rid, errc::bad_request,
               "stream names are 1..255 bytes, records at most 16 MiB, and a send's route keys at most 64 KiB "
               "as stored with the record");
    return false;
  }
  return true;
}

void session::handle_append(std::uint64_t rid, const wire::Append& m) {
  const std::string_view stream = m.stream()->string_view();
  const auto* p = m.payload();
  const auto payload = p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{};
  // A plain append has no delivery subject.
  if (can_append(rid, stream, payload.size(), 0)) append_to_log(rid, stream, payload, {}, {});
}

void session::append_to_log(std::uint64_t rid, std::string_view stream, std::span<const std::byte> payload,
                            std::span<const std::byte> subject, std::string_view channel,
                            std::span<const std::string_view> route_keys) {
  // The waiting append lives in a reused slot: its strings and buffers keep
  // their capacity, so the steady state allocates nothing here.
  std::uint32_t slot = 0;
  if (!core_.free_waits.empty()) {
    slot = core_.free_waits.back();
    core_.free_waits.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(core_.append_waits.size());
    core_.append_waits.emplace_back();
  }
  auto& w = core_.append_waits[slot];
  w.target = weak_from_this();
  w.request_id = rid;
  w.stream.assign(stream);
  w.channel.assign(channel);
  // Assigned into the slot's strings, so their buffers are reused too.
  w.route_keys.resize(route_keys.size());
  for (std::size_t i = 0; i < route_keys.size(); ++i) w.route_keys[i].assign(route_keys[i]);
  // A publish or send needs its payload again once durable, to deliver it.
  if (!w.channel.empty() || !w.route_keys.empty()) w.payload.assign(payload.begin(), payload.end());
  else w.payload.clear();
  if (auto ec = core_.committer->append(stream, payload, subject, slot)) {
    // can_append() checked the same: not expected.
    release_wait(core_, slot);
    send_error(rid, errc::bad_request, ec.message());
    return;
  }
  w.ticket = open_ticket();
  // Commit once this loop turn is over: a reader hands all the appends of
  // its read buffer over first, so they share one commit. A lone append
  // waits only for the end of the current handler. In the sync mode the
  // writer thread commits (an fsync must not hold the loop); in the others
  // a commit only writes to the page cache, and doing it here saves two
  // thread hand-offs per batch.
  if (!core_.commit_wake_posted) {
    core_.commit_wake_posted = true;
    asio::post(socket_.get_executor(), commit_step{&core_, socket_.get_executor()});
  }
}

void session::commit_step::operator()() const {
  core->commit_wake_posted = false;
  if (!core->committer) return;
  if (core->stream_log->mode() == storage::durability::sync) return core->committer->wake();
  // At most commit_step_records per step, the rest in the next loop turn:
  // the answers to the first ones are written (and the client sends more)
  // while the rest is committed, instead of everything waiting for one
  // large commit.
  if (core->committer->commit_queued(commit_step_records)) {
    core->commit_wake_posted = true;
    asio::post(loop, *this);
  }
}

void session::release_wait(server_core& core, std::uint32_t slot) {
  auto& w = core.append_waits[slot];
  w.target.reset();
  w.route_keys.clear();
  core.free_waits.push_back(slot);
}

void session::install_append_handler(server_core& core, asio::any_io_executor loop) {
  // Writer thread: queue the batch's results in the mailbox, and post one
  // drain to the loop when the mailbox was empty.
  core.committer->set_batch_handler([core = &core, loop](std::span<const storage::group_committer::token_result> r) {
    bool first = false;
    {
      std::lock_guard lock(core->acks_mu);
      first = core->acks.empty();
      core->acks.insert(core->acks.end(), r.begin(), r.end());
    }
    if (first) asio::post(loop, [core] { appends_committed(*core); });
  });
}

void session::appends_committed(server_core& core) {
  {
    std::lock_guard lock(core.acks_mu);
    core.acks_draining.swap(core.acks);  // both keep their capacity
  }
  for (const auto& [slot, result] : core.acks_draining) {
    auto& w = core.append_waits[static_cast<std::uint32_t>(slot)];
    const protocol::bytes_view payload{reinterpret_cast<const std::uint8_t*>(w.payload.data()), w.payload.size()};
    if (result && !w.route_keys.empty()) {
      // A durable send: route and deliver now, then answer with the routes
      // and the sequence (the record is in the log even if no key had a
      // route).
      const channel_table::log_position position{w.stream, result->seq, result->epoch};
      auto& keys = core.send_keys;
      keys.assign(w.route_keys.begin(), w.route_keys.end());
      auto& gateways = core.send_gateways;
      const auto routed = deliver_to_users(core, keys, payload, &position, gateways);
      if (auto s = w.target.lock()) {
        if (!s->closed_ && w.request_id != 0)
          s->send(core.builder.send_result(w.request_id, gateways, routed, result->seq, result->epoch));
        s->close_ticket(w.ticket);
      }
    } else {
      if (result && !w.channel.empty()) {
        // Durable now: deliver, even if the publisher has gone meanwhile.
        const channel_table::log_position position{w.stream, result->seq, result->epoch};
        ++core.counters.published;
        core.channels.publish(w.channel, payload, &position);
      }
      auto s = w.target.lock();
      // Logged (in summary) whether or not the appender is still there.
      if (!result) core.refusals.refused(*core.log, s ? s->id_ : 0, w.stream, result.error());
      else core.refusals.report_due(*core.log);
      if (s) {
        s->finish_append(w.request_id, w.stream, result);
        s->close_ticket(w.ticket);
      }
    }
    release_wait(core, static_cast<std::uint32_t>(slot));
  }
  core.acks_draining.clear();
}


void session::finish_append(std::uint64_t rid, const std::string& stream,
                            const std::expected<storage::append_ack, std::error_code>& r) {
  if (!r) {
    if (closed_) return;
    const bool full = r.error() == storage::errc::storage_full;
    send_error(rid, full ? errc::storage_full : errc::internal, r.error().message());
    return;
  }
  if (closed_) return;
  if (rid == 0) return;
  // A peer without "log" (a plain publish to a channel the server made
  // durable) gets the answer it knows: Ok, if it asked for publish acks.
  if (log_) send(core_.builder.appended(rid, stream, r->seq, r->epoch));
  else if (publish_ack_) send(core_.builder.ok(rid));
}

void session::handle_read(std::uint64_t rid, const wire::Read& m) {
  const std::string_view stream = m.stream()->string_view();
  if (core_.stream_log->check(stream, 0)) return send_error(rid, errc::bad_request, "stream names are 1..255 bytes");
  // Keep the answer inside one frame: payload and subject bytes here,
  // per-record and per-key overhead below.
  const std::uint32_t frame_budget = core_.config.max_frame / 2;
  const std::uint32_t max_bytes = m.max_bytes() == 0 ? frame_budget : std::min(m.max_bytes(), frame_budget);
  const std::uint32_t max_count = std::min({m.max_count() == 0 ? default_read_count : m.max_count(), max_read_count,
                                            std::max<std::uint32_t>(1, core_.config.max_frame / 128)});
  std::uint64_t from = m.from_seq();
  if (from == 0) {  // 0: from the first retained record
    auto info = core_.stream_log->info(stream);
    if (!info && info.error() == storage::errc::not_found) return send_error(rid, errc::not_found, "no such stream");
    // Damaged metadata: the read below reports it.
    from = info ? info->first_seq : 1;
  }
  storage::diagnostics diag;
  auto r = core_.stream_log->read(stream, from, max_count, max_bytes, &diag);
  if (!r) {
    if (r.error() == storage::errc::not_found) return send_error(rid, errc::not_found, "no such stream");
    if (r.error() == storage::errc::corrupted) {
      // The record at `from` (or the stream's metadata) is damaged: say
      // which, and how to go on past it. A read that runs into damage
      // later answers the records before it (Records), so this names the
      // first damaged one a reader meets.
      core_.log->error("conn={} stream={} seq={} log corrupted: {}", id_, stream, from, diag.message);
      std::string message = "log corrupted: " + (diag.message.empty() ? r.error().message() : diag.message);
      if (diag.seq != 0) message += "; read from " + std::to_string(diag.seq + 1) + " to go on past it";
      return send_error(rid, errc::corrupted, message);
    }
    if (r.error() == storage::errc::trimmed) {
      auto info = core_.stream_log->info(stream);
      const std::uint64_t first = info ? info->first_seq : 0;
      return send(core_.builder.error(rid, errc::trimmed,
                                      "sequence " + std::to_string(from) + " was trimmed; the log starts at " +
                                          std::to_string(first),
                                      0, false, first));
    }
    core_.log->error("conn={} stream={} seq={} read failed: {}", id_, stream, from, r.error().message());
    return send_error(rid, errc::internal, r.error().message());
  }
  // Each record carries how it was delivered live (its stored subject).
  // The route keys of every record share one vector; the records' spans
  // into it are taken once it is complete.
  std::vector<protocol::record_fields> records;
  std::vector<log_subject_view> subjects;
  std::vector<std::string_view> keys;
  records.reserve(r->records.size());
  subjects.reserve(r->records.size());
  // The storage budget counts payload and subject bytes; the wire adds
  // per-record and per-key overhead (and a subject's keys take more room
  // on the wire than on disk). Stop before the answer could pass the
  // frame limit; the first record always goes.
  constexpr std::size_t answer_overhead = 1024, record_overhead = 80, string_overhead = 12;
  std::size_t estimate = answer_overhead + stream.size();
  for (const auto& rec : r->records) {
    auto subject = decode_log_subject(rec.subject, keys);
    if (!subject) {
      core_.log->error("conn={} stream={} seq={} has a malformed subject", id_, stream, rec.seq);
      return send_error(rid, errc::corrupted,
                        "log corrupted: stream '" + std::string(stream) + "', record " + std::to_string(rec.seq) +
                            ": its delivery subject is malformed; read from " + std::to_string(rec.seq + 1) +
                            " to go on past it");
    }
    std::size_t size = rec.payload.size() + record_overhead + subject->channel.size() + string_overhead;
    for (std::size_t i = 0; i < subject->key_count; ++i) size += keys[subject->first_key + i].size() + string_overhead;
    if (!records.empty() && estimate + size > core_.config.max_frame) break;
    estimate += size;
    records.push_back({rec.seq, rec.timestamp_ms,
                       {reinterpret_cast<const std::uint8_t*>(rec.payload.data()), rec.payload.size()},
                       subject->channel});
    subjects.push_back(*subject);
  }
  for (std::size_t i = 0; i < records.size(); ++i)
    records[i].route_keys = std::span(keys).subspan(subjects[i].first_key, subjects[i].key_count);
  send(core_.builder.records(rid, stream, r->epoch, r->first_seq, r->last_seq, records));
}

}  // namespace switchyard::broker

#include "stream_tracker.hpp"

#include "client_log.hpp"

#include <algorithm>

namespace switchyard::detail {

using client_lib::log;

stream_tracker::stream_tracker(read_fn read, std::function<resume_at(const unrecoverable_position&)> on_unrecoverable)
    : read_(std::move(read)), on_unrecoverable_(std::move(on_unrecoverable)) {}

std::error_code stream_tracker::check(const stream_positions& positions) {
  for (const auto& [name, pos] : positions) {
    if (pos.seq == 0 || pos.epoch != 0) continue;
    log(log_level::warn,
        "switchyard: stream {}: position seq={} has no epoch; refused (a recreated stream could "
        "not be told from this one)",
        name, pos.seq);
    return errc::invalid_position;
  }
  return {};
}

void stream_tracker::resume_from(const stream_positions& positions) {
  for (const auto& [name, pos] : positions) {
    auto& s = streams_[name];
    s.seq = pos.seq;
    s.epoch = pos.epoch;
  }
}

bool stream_tracker::live(std::string_view stream, std::uint64_t seq, std::uint64_t epoch) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    // First sight of the stream: delivery starts here. Had the broker
    // dropped an earlier message of it, its report (dropped()) would have
    // come first.
    streams_.emplace(std::string(stream), state{.seq = seq, .epoch = epoch});
    return true;
  }
  return arrived(it->first, it->second, seq, epoch, true);
}

void stream_tracker::dropped(std::string_view stream, std::uint64_t seq, std::uint64_t epoch) {
  if (seq == 0) return;  // not a position
  auto it = streams_.find(stream);
  // Unknown: the subscription's first message of the stream was lost, and
  // the stream starts just before it.
  if (it == streams_.end()) it = streams_.emplace(std::string(stream), state{.seq = seq - 1, .epoch = epoch}).first;
  arrived(it->first, it->second, seq, epoch, false);
}

bool stream_tracker::arrived(const std::string& stream, state& s, std::uint64_t seq, std::uint64_t epoch,
                             bool present) {
  if (s.epoch == 0) s.epoch = epoch;  // resumed from seq 0 without an epoch: take the stream's
  if (s.reading) {
    // The read under way goes on until it has passed this one.
    if (s.target_epoch != epoch || seq > s.target) {
      s.target = seq;
      s.target_epoch = epoch;
    }
    return false;
  }
  if (epoch == s.epoch) {
    if (seq <= s.seq) return false;
    if (seq == s.seq + 1 && present) {
      s.seq = seq;
      return true;
    }
  }
  // A gap (or the dropped message itself), or a recreated stream (the
  // read's answer tells which epoch the log has now and read_done()
  // settles it).
  s.target = seq;
  s.target_epoch = epoch;
  start_read(stream, s, s.seq + 1);
  return false;
}

void stream_tracker::check_all() {
  for (auto& [name, s] : streams_)
    if (!s.reading) start_read(name, s, s.seq + 1);
}

void stream_tracker::start_read(const std::string& stream, state& s, std::uint64_t from) {
  // State first: read_ may fail synchronously into read_failed().
  s.reading = true;
  read_(stream, from);
}

resume_at stream_tracker::lost(std::string_view stream, position_lost reason, const state& s,
                               std::uint64_t first_available, std::uint64_t epoch) {
  const unrecoverable_position u{stream, reason, {s.seq, s.epoch}, first_available, epoch};
  if (on_unrecoverable_) return on_unrecoverable_(u);
  log(log_level::warn, "switchyard: stream {}: position seq={} epoch={} cannot be recovered ({}); going on from {}",
      stream, s.seq, s.epoch,
      reason == position_lost::trimmed         ? "trimmed"
      : reason == position_lost::epoch_changed ? "epoch changed"
                                               : "stream gone",
      first_available);
  return resume_at::first_available;
}

void stream_tracker::read_done(const std::string& stream, const stream_read& result, const deliver_fn& deliver) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second.reading) return;
  auto& s = it->second;
  const std::uint64_t before = s.seq;
  const std::uint64_t epoch_before = s.epoch;
  const bool probe = std::exchange(s.probing, false);
  bool use_records = true;
  if (s.epoch == 0) s.epoch = result.epoch;
  if (result.epoch != s.epoch) {
    // Recreated: sequences of the old epoch mean nothing in the new one.
    const auto at = lost(stream, position_lost::epoch_changed, s, result.first_seq, result.epoch);
    s.epoch = result.epoch;
    // Records of this read start where the old position pointed, not at
    // the first retained: read again from the right place.
    use_records = false;
    s.seq = at == resume_at::first_available ? result.first_seq - 1 : result.last_seq;
  } else if (probe) {
    // The read from s.seq + 1 answered trimmed; this one is from the first
    // retained, so its records start at result.first_seq.
    const auto at = lost(stream, position_lost::trimmed, s, result.first_seq, result.epoch);
    if (at == resume_at::first_available) {
      s.seq = std::max(s.seq, result.first_seq - 1);
    } else {
      s.seq = std::max(s.seq, result.last_seq);
      use_records = false;
    }
  }
  if (use_records) {
    // The log is contiguous; a sequence missing from the answer is a record
    // the broker left out because it had expired (it says how many): gone,
    // not lost. Without that, a hole is never expected: stop there.
    std::uint64_t skipped = 0;
    for (const auto& rec : result.records) {
      if (rec.seq <= s.seq) continue;
      if (rec.seq != s.seq + 1) {
        if (result.expired == 0) break;
        skipped += rec.seq - s.seq - 1;
        s.seq = rec.seq - 1;
      }
      s.seq = rec.seq;
      deliver(stream, s.epoch, rec);
    }
    // Expired records at the end of the range read.
    if (result.expired != 0 && result.next_seq > s.seq + 1) {
      skipped += result.next_seq - s.seq - 1;
      s.seq = result.next_seq - 1;
    }
    if (skipped != 0)
      log(log_level::debug, "switchyard: stream {}: {} expired records skipped, now at seq={}", stream, skipped, s.seq);
  }
  // The handlers ran: `s` is still valid (nothing here erases streams, and
  // handlers cannot reach the tracker).
  if (s.target_epoch != s.epoch) s.target = 0;
  const bool behind = s.seq < result.last_seq || s.seq < s.target;
  const bool progressed = s.seq != before || s.epoch != epoch_before;
  if (behind && progressed) {
    start_read(it->first, s, s.seq + 1);
    return;
  }
  if (behind)
    log(log_level::warn, "switchyard: stream {}: read from seq={} made no progress (log ends at {})", stream, s.seq + 1,
        result.last_seq);
  s.reading = false;
  s.target = 0;
}

void stream_tracker::read_failed(const std::string& stream, std::error_code ec) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second.reading) return;
  auto& s = it->second;
  if (ec == errc::trimmed && !s.probing) {
    // Learn where the stream starts now (and its epoch) before telling the
    // application: a read from the first retained does both.
    s.probing = true;
    read_(it->first, 0);
    return;
  }
  if (ec == errc::not_found) {
    lost(stream, position_lost::stream_gone, s, 0, 0);
    // Forgotten: the next live message starts it again.
    streams_.erase(it);
    return;
  }
  log(log_level::warn, "switchyard: stream {}: recovery read failed: {}; retried at the next gap", stream,
      ec.message());
  s.reading = false;
  s.probing = false;
}

stream_positions stream_tracker::positions() const {
  stream_positions out;
  for (const auto& [name, s] : streams_) out.emplace(name, stream_position{s.seq, s.epoch});
  return out;
}

}  // namespace switchyard::detail

#include "storage/group_committer.hpp"

#include <algorithm>
#include <unordered_map>

namespace switchyard::storage {

group_committer::group_committer(sequence_log& log, group_commit_options options)
    : log_(log), options_(options), last_sync_(std::chrono::steady_clock::now()) {
  options_.max_batch_records = std::max<std::size_t>(1, options_.max_batch_records);
  options_.retention_step = std::max<std::size_t>(1, options_.retention_step);
  if (options_.retention_interval.count() < 1) options_.retention_interval = std::chrono::milliseconds(1);
  writer_ = std::thread([this] { run(); });
}

group_committer::~group_committer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

void group_committer::append(std::string_view stream, std::span<const std::byte> payload,
                             std::span<const std::byte> subject, completion done) {
  // Checked here so that one bad append never fails the batch it would
  // have shared with good ones.
  if (auto ec = log_.check(stream, payload.size(), subject.size())) {
    if (done) done(std::unexpected(ec));
    return;
  }
  // Subject and payload share one buffer: one allocation, outside the lock.
  std::vector<std::byte> data;
  data.reserve(subject.size() + payload.size());
  data.insert(data.end(), subject.begin(), subject.end());
  data.insert(data.end(), payload.begin(), payload.end());
  bool was_empty = false;
  {
    std::lock_guard lock(mu_);
    was_empty = queue_.empty();
    queue_.push_back({std::string(stream), std::move(data), subject.size(), std::move(done)});
  }
  // The writer only sleeps on an empty queue: wake it on the first append
  // only, not on every one (a futex call each).
  if (was_empty) wake_.notify_one();
}

void group_committer::set_retention(std::string_view stream, std::optional<retention> limits, info_completion done) {
  if (log_.check(stream, 0) || (limits && limits->max_age.count() < 0)) {
    if (done) done(std::unexpected(make_error_code(errc::invalid_argument)));
    return;
  }
  {
    std::lock_guard lock(mu_);
    changes_.push_back({std::string(stream), limits, std::move(done)});
  }
  wake_.notify_one();
}

group_commit_stats group_committer::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

namespace {
bool has_limits(const retention& r) { return r.max_records > 0 || r.max_bytes > 0 || r.max_age.count() > 0; }
}  // namespace

bool group_committer::retention_pass() {
  auto streams = log_.list();
  if (!streams) return false;
  bool more = false;
  bool own = false;
  std::uint64_t removed = 0;
  for (const auto& st : *streams) {
    own |= st.own_retention.has_value();
    const retention& limits = st.own_retention ? *st.own_retention : options_.default_retention;
    if (!has_limits(limits)) continue;  // keeps everything: no write transaction
    auto r = log_.enforce(st.name, limits, options_.retention_step);
    if (!r) continue;  // a full map or an I/O error: the next pass tries again
    removed += *r;
    more |= *r == options_.retention_step;
  }
  retention_active_ = own || has_limits(options_.default_retention);
  if (removed > 0) {
    std::lock_guard lock(mu_);
    stats_.trimmed += removed;
  }
  return more;
}

void group_committer::run() {
  using clock = std::chrono::steady_clock;
  // Streams may have limits of their own from an earlier run.
  retention_active_ = has_limits(options_.default_retention);
  if (auto streams = log_.list())
    for (const auto& st : *streams) retention_active_ |= st.own_retention.has_value();
  next_retention_ = clock::now() + options_.retention_interval;
  std::vector<pending> batch;
  std::vector<retention_change> changes;
  std::unique_lock lock(mu_);
  for (;;) {
    if (!changes_.empty()) {
      changes.swap(changes_);
      lock.unlock();
      apply(changes);
      changes.clear();
      lock.lock();
      continue;
    }
    if (queue_.empty()) {
      if (stopping_) break;
      // Idle: wait for an append, or until the next sync (batch mode) or
      // retention pass is due, whichever comes first.
      auto due = clock::time_point::max();
      if (unsynced_) due = last_sync_ + options_.sync_interval;
      if (retention_active_) due = std::min(due, next_retention_);
      const auto ready = [&] { return !queue_.empty() || !changes_.empty() || stopping_; };
      if (due == clock::time_point::max()) {
        wake_.wait(lock, ready);
        continue;
      }
      if (wake_.wait_until(lock, due, ready)) continue;
      lock.unlock();
      const auto now = clock::now();
      if (unsynced_ && now >= last_sync_ + options_.sync_interval) {
        if (!log_.sync()) {
          std::lock_guard relock(mu_);
          ++stats_.syncs;
        }
        last_sync_ = clock::now();
        unsynced_ = false;
      }
      if (retention_active_ && now >= next_retention_) {
        // Bounded steps; while records remain due, come back at once
        // (appends still go first: this only runs on an empty queue).
        const bool more = retention_pass();
        next_retention_ = more ? clock::now() : clock::now() + options_.retention_interval;
      }
      lock.lock();
      continue;
    }
    // Take what fits in one batch; the rest waits for the next.
    std::size_t n = 0, bytes = 0;
    while (n < queue_.size() && n < options_.max_batch_records) {
      bytes += queue_[n].data.size();
      ++n;
      if (bytes >= options_.max_batch_bytes) break;
    }
    batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    lock.unlock();
    commit(batch);
    batch.clear();
    lock.lock();
  }
  lock.unlock();
  if (unsynced_) log_.sync();
}

void group_committer::apply(std::vector<retention_change>& changes) {
  std::vector<std::expected<stream_info, std::error_code>> results;
  results.reserve(changes.size());
  bool changed = false;
  for (auto& c : changes) {
    results.push_back(c.limits ? log_.set_retention(c.stream, *c.limits) : log_.clear_retention(c.stream));
    changed |= results.back().has_value();
  }
  if (changed) {
    // Durable before anyone hears of it, whatever the mode (appends in the
    // batch mode are synced here too, early).
    if (log_.mode() != durability::sync) {
      if (auto ec = log_.sync()) {
        for (auto& r : results)
          if (r) r = std::unexpected(ec);
      } else {
        std::lock_guard lock(mu_);
        ++stats_.syncs;
      }
      last_sync_ = std::chrono::steady_clock::now();
      unsynced_ = false;
    }
    // Apply new limits now rather than at the next interval.
    retention_active_ = true;
    next_retention_ = std::chrono::steady_clock::now();
  }
  for (std::size_t i = 0; i < changes.size(); ++i)
    if (changes[i].done) changes[i].done(std::move(results[i]));
}

void group_committer::commit(std::vector<pending>& batch) {
  {
    std::lock_guard lock(mu_);
    ++stats_.batches;
    stats_.records += batch.size();
    stats_.largest_batch = std::max<std::uint64_t>(stats_.largest_batch, batch.size());
  }
  const bool any = commit_range(batch, 0, batch.size());
  if (any && log_.mode() == durability::batch) {
    unsynced_ = true;
    if (std::chrono::steady_clock::now() - last_sync_ >= options_.sync_interval) {
      if (!log_.sync()) {
        std::lock_guard lock(mu_);
        ++stats_.syncs;
      }
      last_sync_ = std::chrono::steady_clock::now();
      unsynced_ = false;
    }
  }
}

bool group_committer::commit_range(std::vector<pending>& batch, std::size_t begin, std::size_t end) {
  std::vector<append_item> items;
  items.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) items.push_back({batch[i].stream, batch[i].payload(), batch[i].subject()});
  auto result = log_.append(items);
  // A full log refuses a whole transaction: split it, so that what still
  // fits is committed (in order) and only what does not fit fails.
  if (!result && result.error() == errc::storage_full && end - begin > 1) {
    const std::size_t mid = begin + (end - begin) / 2;
    const bool first = commit_range(batch, begin, mid);
    const bool second = commit_range(batch, mid, end);
    return first || second;
  }
  // Epochs: one lookup per stream of the batch, not per append.
  std::unordered_map<std::string_view, std::uint64_t> epochs;
  if (result)
    for (std::size_t i = begin; i < end; ++i)
      if (!epochs.contains(batch[i].stream)) {
        auto info = log_.info(batch[i].stream);
        epochs.emplace(batch[i].stream, info ? info->epoch : 0);
      }
  for (std::size_t i = begin; i < end; ++i) {
    if (!batch[i].done) continue;
    if (result) batch[i].done(append_ack{(*result)[i - begin], epochs[batch[i].stream]});
    else batch[i].done(std::unexpected(result.error()));
  }
  return result.has_value();
}
}  // namespace switchyard::storage

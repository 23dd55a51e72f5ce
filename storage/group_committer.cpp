#include "storage/group_committer.hpp"

#include <algorithm>

namespace switchyard::storage {

namespace {
bool has_limits(const retention& r) { return r.max_records > 0 || r.max_bytes > 0 || r.max_age.count() > 0; }
}  // namespace

group_committer::group_committer(sequence_log& log, group_commit_options options) : log_(log), options_(options) {
  options_.max_batch_records = std::max<std::size_t>(1, options_.max_batch_records);
  options_.retention_step = std::max<std::size_t>(1, options_.retention_step);
  if (options_.retention_interval.count() < 1) options_.retention_interval = std::chrono::milliseconds(1);
  retain_.defaults = options_.default_retention;
  retain_.slack = options_.commit_trim_slack;
  // Streams may have limits of their own from an earlier run. Known before
  // the first commit, which may come from any thread (commit_queued).
  retention_active_ = has_limits(options_.default_retention);
  if (auto streams = log_.list())
    for (const auto& st : *streams) retention_active_ |= st.own_retention.has_value();
  writer_ = std::thread([this] { run(); });
  if (log_.mode() == durability::batch) syncer_ = std::thread([this] { sync_loop(); });
}

group_committer::~group_committer() {
  {
    switchyard::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  sync_wake_.notify_all();
  writer_.join();
  if (syncer_.joinable()) {
    syncer_.join();
    // The writer's last commits came after the syncer's last look.
    if (commits_.load() != synced_ && !log_.sync()) {
      switchyard::lock_guard lock(mu_);
      ++stats_.syncs;
    }
  }
}

void group_committer::sync_loop() {
  switchyard::unique_lock lock(mu_);
  while (!stopping_) {
    sync_wake_.wait_for(lock.native(), options_.sync_interval, [&]() SWITCHYARD_REQUIRES(mu_) { return stopping_; });
    const std::uint64_t committed = commits_.load(std::memory_order_acquire);
    if (stopping_ || committed == synced_) continue;
    // fdatasync on the log's file while the writer goes on committing:
    // everything committed before `committed` was read is flushed when it
    // returns.
    lock.unlock();
    if (options_.test_hook) options_.test_hook(commit_point::sync);
    const auto ec = log_.sync();
    lock.lock();
    if (!ec) {
      ++stats_.syncs;
      synced_ = committed;
    }
  }
}

void group_committer::append(std::string_view stream, std::span<const std::byte> payload,
                             std::span<const std::byte> destination, completion done) {
  // Checked here so that one bad append never fails the batch it would
  // have shared with good ones.
  if (auto ec = log_.check(stream, payload.size(), destination.size())) {
    if (done) done(std::unexpected(ec));
    return;
  }
  enqueue(stream, destination, payload, 0, std::move(done), true);
}

std::error_code group_committer::append(std::string_view stream, std::span<const std::byte> payload,
                                        std::span<const std::byte> destination, std::uint64_t token) {
  if (auto ec = log_.check(stream, payload.size(), destination.size())) return ec;
  enqueue(stream, destination, payload, token, nullptr, false);
  return {};
}

void group_committer::append_queue::push(std::string_view stream, std::span<const std::byte> destination,
                                         std::span<const std::byte> payload, std::uint64_t token, completion done) {
  const std::size_t offset = bytes.size();
  const auto name = std::as_bytes(std::span(stream.data(), stream.size()));
  bytes.insert(bytes.end(), name.begin(), name.end());
  bytes.insert(bytes.end(), destination.begin(), destination.end());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  items.push_back({offset, static_cast<std::uint32_t>(stream.size()), static_cast<std::uint32_t>(destination.size()),
                   payload.size(), token, std::move(done)});
}

void group_committer::enqueue(std::string_view stream, std::span<const std::byte> destination,
                              std::span<const std::byte> payload, std::uint64_t token, completion done, bool notify) {
  bool was_empty = false;
  {
    switchyard::lock_guard lock(mu_);
    was_empty = queue_.items.empty();
    queue_.push(stream, destination, payload, token, std::move(done));
    ++appends_queued_;
  }
  // The writer only sleeps on an empty queue: wake it on the first append
  // only, not on every one (a futex call each).
  if (was_empty && notify) wake_.notify_one();
}

void group_committer::set_retention(std::string_view stream, std::optional<retention> limits, info_completion done) {
  change_retention(stream, limits, [done = std::move(done)](std::expected<stream_change, std::error_code> r) {
    if (!done) return;
    if (r)
      done(std::move(r->info));
    else
      done(std::unexpected(r.error()));
  });
}

void group_committer::change_retention(std::string_view stream, std::optional<retention> limits,
                                       change_completion done) {
  if (log_.check(stream, 0) || (limits && limits->max_age.count() < 0)) {
    if (done) done(std::unexpected(make_error_code(errc::invalid_argument)));
    return;
  }
  queue_change({std::string(stream), false, limits, std::move(done)});
}

void group_committer::delete_stream(std::string_view stream, change_completion done) {
  if (log_.check(stream, 0)) {
    if (done) done(std::unexpected(make_error_code(errc::invalid_argument)));
    return;
  }
  queue_change({std::string(stream), true, std::nullopt, std::move(done)});
}

void group_committer::queue_change(retention_change change) {
  {
    switchyard::lock_guard lock(mu_);
    change.after_appends = appends_queued_;
    changes_.push_back(std::move(change));
  }
  wake_.notify_one();
}

group_commit_stats group_committer::stats() const {
  switchyard::lock_guard lock(mu_);
  auto s = stats_;
  s.fsyncs = log_.fsyncs();
  return s;
}

bool group_committer::retention_pass() {
  // The stream list is a read: no lock. Each stream's step is a write of
  // its own under commit_mu_, and appends go first between steps: what
  // queued meanwhile (a loop-thread commit that met a step leaves its
  // appends here: commit_queued) is committed before the next step, so a
  // pass delays an append by one step at most.
  auto streams = log_.list();
  if (!streams) return false;
  bool more = false;
  bool own = false;
  bool stopped = false;
  std::uint64_t removed = 0;
  for (const auto& st : *streams) {
    own |= st.own_retention.has_value();
    const retention& limits = st.own_retention ? *st.own_retention : options_.default_retention;
    if (!has_limits(limits)) continue;  // keeps everything: no write transaction
    bool queued = false;
    {
      switchyard::lock_guard lock(mu_);
      stopped = stopping_;  // the destructor commits what is queued; retention can wait
      queued = !queue_.items.empty();
    }
    if (stopped) break;
    switchyard::lock_guard writing(commit_mu_);
    if (queued) commit_batch(0);
    if (options_.test_hook) options_.test_hook(commit_point::retention_step);
    auto r = log_.enforce(st.name, limits, options_.retention_step);
    if (!r) continue;  // a full map or an I/O error: the next pass tries again
    removed += *r;
    more |= *r == options_.retention_step;
  }
  if (!stopped) {
    switchyard::lock_guard writing(commit_mu_);
    retention_active_ = own || has_limits(options_.default_retention);
  }
  if (removed > 0) {
    switchyard::lock_guard lock(mu_);
    stats_.trimmed += removed;
  }
  return more;
}

void group_committer::run() {
  using clock = std::chrono::steady_clock;
  next_retention_ = clock::now() + options_.retention_interval;
  switchyard::unique_lock lock(mu_);
  for (;;) {
    if (!changes_.empty()) {
      lock.unlock();
      apply_changes();
      lock.lock();
      continue;
    }
    if (queue_.items.empty()) {
      if (stopping_) break;
      // Idle: wait for an append, or until the next retention pass is due.
      auto due = clock::time_point::max();
      if (retention_active_on_writer()) due = std::min(due, next_retention_);
      const auto ready = [&]() SWITCHYARD_REQUIRES(mu_) {
        return !queue_.items.empty() || !changes_.empty() || stopping_;
      };
      if (options_.test_hook) options_.test_hook(commit_point::idle);
      if (due == clock::time_point::max()) {
        wake_.wait(lock.native(), ready);
        continue;
      }
      if (wake_.wait_until(lock.native(), due, ready)) continue;
      lock.unlock();
      const auto now = clock::now();
      if (retention_active_on_writer() && now >= next_retention_) {
        // Bounded steps; while records remain due, come back at once
        // (appends still go first: a pass starts on an empty queue only,
        // and commits what queued before each of its steps).
        const bool more = retention_pass();
        next_retention_ = more ? clock::now() : clock::now() + options_.retention_interval;
      }
      lock.lock();
      continue;
    }
    lock.unlock();
    {
      switchyard::lock_guard writing(commit_mu_);
      commit_batch(0);
    }
    lock.lock();
  }
}

bool group_committer::commit_queued(std::size_t max_records) {
  // Never waits for another thread's write (the writer's retention step or
  // change, a batch, another caller's commit): the queue is then left to
  // the writer thread. That is no lost wake-up: the writer looks at the
  // queue (under mu_) after every write before it sleeps, and the
  // notification wakes it should it sleep now (the other thread was not
  // the writer).
  if (!commit_mu_.try_lock()) {
    {
      switchyard::lock_guard lock(mu_);
      if (queue_.items.empty()) return false;
      ++stats_.handed_off;
    }
    wake_.notify_one();
    return false;
  }
  switchyard::lock_guard writing(commit_mu_, std::adopt_lock);
  return commit_batch(max_records);
}

bool group_committer::commit_batch(std::size_t max_records) {
  // Taking a batch and committing it is one step under commit_mu_ (held by
  // the caller), so batches are committed in queue order whichever thread
  // commits them.
  bool more = false;
  {
    switchyard::lock_guard lock(mu_);
    if (queue_.items.empty()) return false;
    std::size_t limit =
        max_records == 0 ? options_.max_batch_records : std::min(max_records, options_.max_batch_records);
    // Appends queued after a pending stream change wait for it: the writer
    // applies it (apply_changes), then commits them.
    if (!changes_.empty())
      limit = static_cast<std::size_t>(std::min<std::uint64_t>(limit, changes_.front().after_appends - appends_taken_));
    if (limit == 0) return false;
    more = take_batch(limit);
  }
  commit(batch_);
  return more;
}

bool group_committer::take_batch(std::size_t max_records) {
  auto& q = queue_.items;
  std::size_t n = 0, bytes = 0;
  while (n < q.size() && n < max_records) {
    bytes += q[n].destination_size + q[n].payload_size;
    ++n;
    if (bytes >= options_.max_batch_bytes) break;
  }
  batch_.clear();
  appends_taken_ += n;
  if (n == q.size()) {
    // All of it (the usual case): swapped, so both keep their capacity and
    // the steady state allocates nothing per batch.
    std::swap(batch_, queue_);
    return false;
  }
  // A prefix: its items and their bytes (a prefix of the buffer too) move to
  // the batch, the rest moves to the front of the queue.
  const std::size_t cut = q[n].offset;
  batch_.bytes.assign(queue_.bytes.begin(), queue_.bytes.begin() + static_cast<std::ptrdiff_t>(cut));
  batch_.items.assign(std::make_move_iterator(q.begin()),
                      std::make_move_iterator(q.begin() + static_cast<std::ptrdiff_t>(n)));
  queue_.bytes.erase(queue_.bytes.begin(), queue_.bytes.begin() + static_cast<std::ptrdiff_t>(cut));
  q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
  for (auto& p : q) p.offset -= cut;
  return true;
}

void group_committer::apply_changes() {
  std::vector<retention_change> changes;
  std::vector<std::expected<stream_change, std::error_code>> results;
  bool changed = false;
  {
    switchyard::lock_guard writing(commit_mu_);
    for (;;) {
      // The first queued change, once every append queued before it is
      // committed. It leaves changes_ only here, under commit_mu_: until
      // it is applied, no thread commits an append queued after it.
      bool appends_first = false;
      {
        switchyard::lock_guard lock(mu_);
        if (changes_.empty()) break;
        appends_first = appends_taken_ < changes_.front().after_appends;
        if (!appends_first) {
          changes.push_back(std::move(changes_.front()));
          changes_.erase(changes_.begin());
        }
      }
      if (appends_first) {
        commit_batch(0);  // stops at the change
        continue;
      }
      const auto& c = changes.back();
      if (c.remove) {
        auto r = log_.delete_stream(c.stream);
        if (r)
          results.push_back(stream_change{std::move(*r), false});
        else
          results.push_back(std::unexpected(r.error()));
      } else {
        bool created = false;
        auto r = c.limits ? log_.set_retention(c.stream, *c.limits, &created) : log_.clear_retention(c.stream);
        if (r)
          results.push_back(stream_change{std::move(*r), created});
        else
          results.push_back(std::unexpected(r.error()));
      }
      changed |= results.back().has_value();
    }
    if (changed) {
      // Apply new limits now rather than at the next interval.
      retention_active_ = true;
      next_retention_ = std::chrono::steady_clock::now();
    }
  }
  // Durable before anyone hears of it, whatever the mode (appends in the
  // batch mode are synced here too, early). The sync runs outside
  // commit_mu_, so that commits on other threads go on meanwhile; it
  // flushes everything committed before it starts, the changes included.
  if (changed && log_.mode() != durability::sync) {
    if (options_.test_hook) options_.test_hook(commit_point::sync);
    if (auto ec = log_.sync()) {
      for (auto& r : results)
        if (r) r = std::unexpected(ec);
    } else {
      switchyard::lock_guard lock(mu_);
      ++stats_.syncs;
    }
  }
  for (std::size_t i = 0; i < changes.size(); ++i)
    if (changes[i].done) changes[i].done(std::move(results[i]));
}

void group_committer::commit(append_queue& batch) {
  const std::size_t size = batch.items.size();
  {
    switchyard::lock_guard lock(mu_);
    ++stats_.batches;
    stats_.records += size;
    stats_.largest_batch = std::max<std::uint64_t>(stats_.largest_batch, size);
  }
  results_.clear();
  const bool any = commit_range(batch, 0, size);
  if (!results_.empty() && batch_handler_) batch_handler_(results_);
  // The batch mode's syncs run on the syncer thread (sync_loop), off this
  // path: a commit never waits for an fsync there.
  if (any && log_.mode() == durability::batch) commits_.fetch_add(1, std::memory_order_release);
}

bool group_committer::commit_range(append_queue& batch, std::size_t begin, std::size_t end, bool split) {
  items_.clear();
  for (std::size_t i = begin; i < end; ++i) {
    const auto& p = batch.items[i];
    items_.push_back({batch.stream(p), batch.payload(p), batch.destination(p)});
  }
  // Retention in the same transaction, for the streams this range appends to.
  append_retention* retain = retention_active_ ? &retain_ : nullptr;
  auto result = log_.append(items_, &epochs_, retain);
  if (result && retain && retain->trimmed > 0) {
    switchyard::lock_guard lock(mu_);
    stats_.trimmed += retain->trimmed;
    stats_.trimmed_in_commits += retain->trimmed;
  }
  // A full log refuses a whole transaction: split it, so that what still
  // fits is committed (in order) and only what does not fit fails. When
  // the first half committed nothing, the log is full for appends like
  // these: the second half gets one attempt, whole.
  if (!result && result.error() == errc::storage_full) {
    switchyard::lock_guard lock(mu_);
    ++stats_.full_attempts;
  }
  if (!result && result.error() == errc::storage_full && split && end - begin > 1) {
    const std::size_t mid = begin + (end - begin) / 2;
    const bool first = commit_range(batch, begin, mid);
    const bool second = commit_range(batch, mid, end, first);
    return first || second;
  }
  for (std::size_t i = begin; i < end; ++i) {
    auto& p = batch.items[i];
    std::expected<append_ack, std::error_code> r = std::unexpected(result ? std::error_code{} : result.error());
    if (result) r = append_ack{(*result)[i - begin], epochs_[i - begin]};
    if (p.done)
      p.done(r);
    else
      results_.push_back({p.token, r});
  }
  return result.has_value();
}
}  // namespace switchyard::storage

#pragma once
// Group commit for the sequence log: appends arrive from any thread (the
// broker's loop), a dedicated writer thread commits them in batches (one
// transaction, so one fsync in the sync mode, for everything that queued up
// while the previous batch was being written), and each append's completion
// runs only after its batch committed.
//
// A lone append in an idle system is not delayed: the writer wakes at once
// and commits a batch of one. Batching happens by itself under load, while
// a commit (an fsync takes about 0.35 ms here) is in progress.

#include "storage/sequence_log.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace switchyard::storage {

struct group_commit_options {
  std::size_t max_batch_records = 4096;
  std::size_t max_batch_bytes = 8u << 20;  // payload + subject
  // durability::batch: fsync at most this often (and at least this often
  // while appends come in). Ignored in the other modes.
  std::chrono::milliseconds sync_interval{10};
  // Retention applied in the background on the writer thread while no
  // append waits: every retention_interval, at most retention_step records
  // per stream (sooner again while more are due). A stream with limits of
  // its own (set_retention) gets those; every other stream gets
  // default_retention. All limits 0 = keep everything.
  retention default_retention{};
  std::chrono::milliseconds retention_interval{1000};
  std::size_t retention_step = 1000;
};

struct group_commit_stats {
  std::uint64_t batches = 0;
  std::uint64_t records = 0;
  std::uint64_t largest_batch = 0;
  std::uint64_t syncs = 0;    // explicit syncs: the batch mode's, and retention changes' outside the sync mode
  std::uint64_t trimmed = 0;  // records removed by background retention
};

// What an append's completion gets on success.
struct append_ack {
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;  // of the stream
};

class group_committer {
 public:
  // Runs on the writer thread with the sequence, or the error. When the log
  // is full, a batch is split until what fits is committed; only the
  // appends that do not fit fail (storage_full).
  // Must not block for long: post the result to your own thread.
  using completion = std::function<void(std::expected<append_ack, std::error_code>)>;

  // `log` must outlive the committer. Starts the writer thread.
  group_committer(sequence_log& log, group_commit_options options = {});
  // Commits everything queued, runs every completion, then stops.
  ~group_committer();
  group_committer(const group_committer&) = delete;
  group_committer& operator=(const group_committer&) = delete;

  // Queues an append of `payload` with its opaque `subject` (see
  // append_item); both are copied, into one buffer (one allocation per
  // append, as for a payload alone). Thread-safe, never blocks on I/O. An
  // invalid append (empty or long stream name, oversized payload or
  // subject) completes at once, on the calling thread, with
  // invalid_argument.
  void append(std::string_view stream, std::span<const std::byte> payload, std::span<const std::byte> subject,
              completion done);
  // The same without a subject.
  void append(std::string_view stream, std::span<const std::byte> payload, completion done) {
    append(stream, payload, {}, std::move(done));
  }

  // Runs on the writer thread with the stream as it is after a retention
  // change, or the error. Same rules as `completion`.
  using info_completion = std::function<void(std::expected<stream_info, std::error_code>)>;

  // Queues a change of a stream's own retention limits, applied on the
  // writer thread (between append batches): with limits, they become the
  // stream's own (an unknown stream is created, empty: see
  // sequence_log::set_retention); with std::nullopt, the stream's own
  // limits are dropped and default_retention applies again (not_found for
  // an unknown stream). `done` runs once the change is on disk, synced in
  // every durability mode (changes are rare), and the next retention pass
  // starts at once. An invalid stream name or negative age completes at
  // once, on the calling thread, with invalid_argument. Thread-safe.
  void set_retention(std::string_view stream, std::optional<retention> limits, info_completion done);

  group_commit_stats stats() const;

 private:
  struct pending {
    std::string stream;
    std::vector<std::byte> data;  // the subject, then the payload
    std::size_t subject_size = 0;
    completion done;
    std::span<const std::byte> subject() const { return std::span(data).first(subject_size); }
    std::span<const std::byte> payload() const { return std::span(data).subspan(subject_size); }
  };

  struct retention_change {
    std::string stream;
    std::optional<retention> limits;  // nullopt: clear
    info_completion done;
  };

  void run();
  // Applies queued retention changes, syncs, then runs their completions.
  void apply(std::vector<retention_change>& changes);
  // One bounded retention pass over every stream; true if more is due.
  bool retention_pass();
  void commit(std::vector<pending>& batch);
  // Commits batch[begin, end) and runs its completions; true if anything
  // was committed.
  bool commit_range(std::vector<pending>& batch, std::size_t begin, std::size_t end);

  sequence_log& log_;
  group_commit_options options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<pending> queue_;  // guarded by mu_
  std::vector<retention_change> changes_;  // guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  group_commit_stats stats_;    // guarded by mu_
  std::chrono::steady_clock::time_point last_sync_;  // writer thread
  bool unsynced_ = false;                            // writer thread
  std::chrono::steady_clock::time_point next_retention_;  // writer thread
  // Whether retention passes run: the default has limits, or some stream
  // has limits of its own (writer thread; refreshed by every pass).
  bool retention_active_ = false;
  std::thread writer_;
};

}  // namespace switchyard::storage

#pragma once
// Group commit for the sequence log: appends arrive from any thread (the
// broker's loop) and are committed in batches, one transaction (so one
// commit's fsyncs in the sync mode) for everything queued together; each
// append's result is reported only after its batch committed.
//
// Two ways in: append(..., completion) wakes the writer thread on the first
// append of an empty queue, so a lone append in an idle system is not
// delayed and batches form by themselves while a commit is in progress;
// append(..., token) is the broker's: no object per append, results per
// batch through one handler, and the caller decides when to commit (wake()
// the writer, or commit_queued() on its own thread where a commit does not
// wait for the disk). Every write to the log is serialized by one mutex
// (commit_mu_), so batches commit in queue order whichever thread commits
// them. In the batch mode a syncer thread fsyncs every sync_interval, off
// the commit path.
//
// Thread contract. Threads: the caller's (any number; the broker's loop),
// the writer thread, and in the batch mode the syncer thread.
//  - append(), wake(), set_retention(), change_retention(),
//    delete_stream(), stats(): any thread; they take
//    only the queue's lock (mu_), which no thread holds across I/O, a
//    commit or a completion (only the `idle` test hook runs under it).
//  - commit_queued(): any thread (not from a completion or batch handler).
//    It commits on the calling thread only when no other thread writes to
//    the log; otherwise it returns at once and leaves the queue to the
//    writer thread (stats().handed_off), which commits it as soon as its
//    own write is done: it never waits for another thread's write,
//    retention step or sync. Its results then arrive on the writer thread.
//  - The log's lock (commit_mu_) is held for one write at a time: one
//    batch's commit (with its completions and batch handler call), one
//    background retention step (one stream, at most retention_step
//    records), or one set of queued stream changes (retention changes and
//    deletes, with the appends queued before each). No
//    fsync runs under it except, in the sync mode, LMDB's own inside each
//    write's commit (in that mode the broker leaves every commit to the
//    writer thread). The batch mode's periodic sync
//    and a retention change's sync (batch and none modes) run outside it:
//    sequence_log::sync() may run while another thread writes, and
//    flushes everything committed before it started.
//  - A background retention pass runs on the writer thread when no append
//    waits, one stream per step; before each step it commits what queued
//    meanwhile, so appends wait for at most one step.
//  - Completions, batch handler and info completions run on the thread
//    that commits (or applies the change): the writer's, or
//    commit_queued()'s caller. They must not block for long, nor call
//    commit_queued().
// Guarantees kept whichever thread commits: in the sync mode nothing is
// acknowledged before its commit is fsynced; in the batch mode a sync runs
// every sync_interval while anything was committed since the last; a
// retention change is synced before its completion runs; each commit trims
// the streams it appended to (commit_trim_slack); a full log fails only
// the appends that do not fit (storage_full).

#include "storage/sequence_log.hpp"

#include "common/mutex.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace switchyard::storage {

// Where group_commit_options::test_hook is called.
enum class commit_point {
  sync,            // right before an fsync of the log (writer or syncer thread)
  retention_step,  // right before one background retention step, holding the log (writer thread)
  idle,            // right before the writer waits for work, nothing queued (writer thread, queue lock held)
};

struct group_commit_options {
  std::size_t max_batch_records = 4096;
  std::size_t max_batch_bytes = 8u << 20;  // payload + destination
  // durability::batch: a syncer thread fsyncs this often while appends
  // are committed (never on the commit path). Ignored in the other modes.
  std::chrono::milliseconds sync_interval{10};
  // Retention. A stream with limits of its own (set_retention) gets those;
  // every other stream gets default_retention. All limits 0 = keep
  // everything. Applied in two places:
  //  - in every commit, to the streams the batch appended to: a stream over
  //    its limits loses at most (its records in the batch) + commit_trim_slack
  //    records in the same transaction, so limits hold however busy the
  //    writer is (see sequence_log::append);
  //  - in the background on the writer thread while no append waits, for
  //    every stream: every retention_interval, at most retention_step
  //    records per stream (sooner again while more are due).
  retention default_retention{};
  std::chrono::milliseconds retention_interval{1000};
  std::size_t retention_step = 1000;
  std::size_t commit_trim_slack = 16;
  // For tests: called at the points of commit_point, on the thread named
  // there, so that a test can hold a sync or a retention step (block in
  // it) or see the writer go idle. At `idle` the committer's queue lock is
  // held: the hook must not call the committer. Empty in production.
  std::function<void(commit_point)> test_hook;
};

struct group_commit_stats {
  std::uint64_t batches = 0;
  std::uint64_t records = 0;
  std::uint64_t largest_batch = 0;
  std::uint64_t syncs = 0;  // explicit syncs: the batch mode's, and retention changes' outside the sync mode
  std::uint64_t fsyncs =
      0;  // flushes of the log to disk: each commit's own in the sync mode, plus the syncs (sequence_log::fsyncs)
  std::uint64_t trimmed = 0;             // records removed by retention, in commits and in the background
  std::uint64_t trimmed_in_commits = 0;  // of which by commits
  std::uint64_t full_attempts = 0;       // log appends (whole batches or parts) refused with storage_full
  std::uint64_t handed_off = 0;          // commit_queued calls that found the log busy and left the queue to the writer
};

// What an append's completion gets on success.
struct append_ack {
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;  // of the stream
};

class group_committer {
 public:
  // Runs on the committing thread with the sequence, or the error. When the log
  // is full, a batch is split until what fits is committed; only the
  // appends that do not fit fail (storage_full). Once a first half commits
  // nothing, the second half is tried once, whole, so a refused batch costs
  // O(log n) attempts, not O(n).
  // Must not block for long: post the result to your own thread.
  using completion = std::function<void(std::expected<append_ack, std::error_code>)>;

  // `log` must outlive the committer. Starts the writer thread.
  group_committer(sequence_log& log, group_commit_options options = {});
  // Commits everything queued, runs every completion, then stops.
  ~group_committer();
  group_committer(const group_committer&) = delete;
  group_committer& operator=(const group_committer&) = delete;

  // Queues an append of `payload` with its opaque `destination` (see
  // append_item); stream name, destination and payload are copied into the
  // queue's shared buffer. Thread-safe, never blocks on I/O. An invalid
  // append (empty or long stream name, oversized payload or destination)
  // completes at once, on the calling thread, with invalid_argument.
  void append(std::string_view stream, std::span<const std::byte> payload, std::span<const std::byte> destination,
              completion done);
  // The same without a destination.
  void append(std::string_view stream, std::span<const std::byte> payload, completion done) {
    append(stream, payload, {}, std::move(done));
  }

  // The hot path's form: no completion object per append. The result
  // reaches the batch handler (set_batch_handler) with `token`, together
  // with the other tokened appends of the same commit. An invalid append
  // is refused here (invalid_argument) and never reaches the handler.
  // Thread-safe; queueing copies stream, destination and payload into one
  // buffer shared by the queue (no allocation per append).
  // It does not wake the writer: call wake() once after queueing what is
  // at hand (a loop turn's worth), so that it all goes into one batch
  // instead of a first batch of one and a second of the rest.
  std::error_code append(std::string_view stream, std::span<const std::byte> payload,
                         std::span<const std::byte> destination, std::uint64_t token);
  // Wakes the writer for the tokened appends queued so far. Thread-safe.
  void wake() { wake_.notify_one(); }
  // Commits one batch of what is queued on the calling thread instead of
  // the writer's, in queue order with the writer's commits: at most
  // max_records (0: max_batch_records); the rest stays queued for the next
  // call (the writer is not woken for it). Returns true if appends remain
  // for the caller to commit. Meant for the batch and none modes, where a
  // commit does not wait for the disk: it saves the hand-off to the writer
  // thread and back. Results reach the batch handler (and completions
  // run) on this thread.
  // Never waits for another thread's write: when one is in progress (a
  // commit, a retention step or change), it wakes the writer thread, which
  // then commits the whole queue, and returns false at once (nothing left
  // for the caller; those results arrive on the writer thread). It stops
  // at a pending stream change: the appends queued after it are the
  // writer's, after the change. Thread-safe; not from a completion or
  // batch handler.
  bool commit_queued(std::size_t max_records = 0);

  struct token_result {
    std::uint64_t token;
    std::expected<append_ack, std::error_code> result;
  };
  // Runs on the committing thread (the writer's, or commit_queued()'s
  // caller) once per committed (or failed) batch with the results of its
  // tokened appends, in queue order, holding the log: must not block for
  // long, nor call commit_queued().
  using batch_handler = std::function<void(std::span<const token_result>)>;
  // Set once, before the first tokened append.
  void set_batch_handler(batch_handler handler) { batch_handler_ = std::move(handler); }

  // Runs on the writer thread with the stream as it is after a retention
  // change, or the error. Same rules as `completion`.
  using info_completion = std::function<void(std::expected<stream_info, std::error_code>)>;

  // What a stream change reports: the stream after it (for a delete, as it
  // was just before), and whether the change created it (a retention
  // change on an unknown stream).
  struct stream_change {
    stream_info info;
    bool created = false;
  };
  using change_completion = std::function<void(std::expected<stream_change, std::error_code>)>;

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
  // The same, also telling whether the change created the stream.
  void change_retention(std::string_view stream, std::optional<retention> limits, change_completion done);
  // Queues the deletion of a stream (sequence_log::delete_stream), applied
  // and synced like a retention change; `done` gets the stream as it was.
  // An invalid name completes at once with invalid_argument. Thread-safe.
  void delete_stream(std::string_view stream, change_completion done);
  // Order: a retention change or delete is applied after every append
  // queued before it (whichever thread commits those) and before every
  // append queued after it, so on a stream the log sees them in the order
  // they were queued (an append queued before a delete is deleted with
  // the stream; one queued after it starts a new stream).

  group_commit_stats stats() const;

 private:
  // A queued append; its stream name, destination and payload sit one after the
  // other in the queue's byte buffer from `offset` on.
  struct pending {
    std::size_t offset = 0;
    std::uint32_t stream_size = 0;
    std::uint32_t destination_size = 0;
    std::size_t payload_size = 0;
    std::uint64_t token = 0;
    completion done;  // empty for a tokened append
  };
  // Appends and their bytes, as queued and as taken by the writer.
  struct append_queue {
    std::vector<pending> items;
    std::vector<std::byte> bytes;
    std::string_view stream(const pending& p) const {
      return {reinterpret_cast<const char*>(bytes.data() + p.offset), p.stream_size};
    }
    std::span<const std::byte> destination(const pending& p) const {
      return std::span(bytes).subspan(p.offset + p.stream_size, p.destination_size);
    }
    std::span<const std::byte> payload(const pending& p) const {
      return std::span(bytes).subspan(p.offset + p.stream_size + p.destination_size, p.payload_size);
    }
    void push(std::string_view stream, std::span<const std::byte> destination, std::span<const std::byte> payload,
              std::uint64_t token, completion done);
    void clear() {
      items.clear();
      bytes.clear();
    }
  };

  // A queued stream change: a retention change or a delete.
  struct retention_change {
    std::string stream;
    bool remove = false;              // delete the stream (limits ignored)
    std::optional<retention> limits;  // nullopt: clear
    change_completion done;
    // Appends queued before this change (appends_queued_ then): they are
    // committed first, and none queued after it is committed before it.
    std::uint64_t after_appends = 0;
  };

  // The writer thread's loop.
  void run() SWITCHYARD_EXCLUDES(mu_, commit_mu_);
  // The syncer thread (batch mode).
  void sync_loop() SWITCHYARD_EXCLUDES(mu_);
  // Queues a change (under mu_) and wakes the writer.
  void queue_change(retention_change change) SWITCHYARD_EXCLUDES(mu_);
  // Applies the queued changes in queue order (under commit_mu_), each
  // after the appends queued before it (committed here first), syncs
  // (outside the lock), then runs their completions. Writer thread.
  void apply_changes() SWITCHYARD_EXCLUDES(mu_, commit_mu_);
  // One bounded retention pass over every stream, one step per stream
  // under commit_mu_ with the queued appends committed before each; true
  // if more is due. Writer thread.
  bool retention_pass() SWITCHYARD_EXCLUDES(mu_, commit_mu_);
  // Whether retention runs, read on the writer thread without commit_mu_:
  // only the writer thread writes retention_active_ (but for the
  // constructor), so its own reads need no lock. Writer thread.
  bool retention_active_on_writer() const SWITCHYARD_NO_THREAD_SAFETY_ANALYSIS { return retention_active_; }
  // Queues under mu_; with `notify`, wakes the writer on the first append
  // of an empty queue.
  void enqueue(std::string_view stream, std::span<const std::byte> destination, std::span<const std::byte> payload,
               std::uint64_t token, completion done, bool notify) SWITCHYARD_EXCLUDES(mu_);
  // Moves up to max_records queued appends (and max_batch_bytes) into
  // batch_; true if some stay queued. Holds mu_ and commit_mu_.
  bool take_batch(std::size_t max_records) SWITCHYARD_REQUIRES(mu_, commit_mu_);
  // Takes and commits one batch of at most max_records (0:
  // max_batch_records); true if appends stay queued. The caller holds
  // commit_mu_ (and not mu_).
  bool commit_batch(std::size_t max_records) SWITCHYARD_REQUIRES(commit_mu_) SWITCHYARD_EXCLUDES(mu_);
  // Commits `batch` (batch_), runs its completions and the batch handler.
  // The caller holds commit_mu_ (and not mu_).
  void commit(append_queue& batch) SWITCHYARD_REQUIRES(commit_mu_) SWITCHYARD_EXCLUDES(mu_);
  // Commits batch.items[begin, end), runs its completions and collects the
  // tokened results in results_; true if anything was committed. With
  // `split`, a range the full log refuses is split in halves (see
  // completion). The caller holds commit_mu_ (and not mu_).
  bool commit_range(append_queue& batch, std::size_t begin, std::size_t end, bool split = true)
      SWITCHYARD_REQUIRES(commit_mu_) SWITCHYARD_EXCLUDES(mu_);

  sequence_log& log_;
  group_commit_options options_;
  // The queue's lock (the waits on wake_ and sync_wake_ are on it).
  mutable switchyard::mutex mu_;
  std::condition_variable wake_;
  append_queue queue_ SWITCHYARD_GUARDED_BY(mu_);
  batch_handler batch_handler_;
  // Every write to the log (a commit, a retention step, retention changes)
  // holds commit_mu_, taken before mu_, for that one write and never for
  // a sync outside the sync mode's commits; the scratch below is guarded
  // by it. commit_queued() only tries it.
  switchyard::mutex commit_mu_;
  append_queue batch_ SWITCHYARD_GUARDED_BY(commit_mu_);                 // the batch being committed
  std::vector<token_result> results_ SWITCHYARD_GUARDED_BY(commit_mu_);  // its tokened results
  std::vector<append_item> items_ SWITCHYARD_GUARDED_BY(commit_mu_);     // scratch for log_.append
  std::vector<std::uint64_t> epochs_ SWITCHYARD_GUARDED_BY(commit_mu_);  // the epochs log_.append reports
  // Retention in the commit (defaults and slack from options_).
  append_retention retain_ SWITCHYARD_GUARDED_BY(commit_mu_);
  std::vector<retention_change> changes_ SWITCHYARD_GUARDED_BY(mu_);
  // Appends ever queued, and ever taken into a batch (guarded by mu_):
  // take_batch stops at the first queued change's after_appends.
  std::uint64_t appends_queued_ SWITCHYARD_GUARDED_BY(mu_) = 0;
  std::uint64_t appends_taken_ SWITCHYARD_GUARDED_BY(mu_) = 0;
  bool stopping_ SWITCHYARD_GUARDED_BY(mu_) = false;
  group_commit_stats stats_ SWITCHYARD_GUARDED_BY(mu_);
  // The batch mode's syncer: every sync_interval, an fsync if anything
  // was committed since the last one.
  std::condition_variable sync_wake_;
  std::atomic<std::uint64_t> commits_{0};                // batches committed (batch mode)
  std::uint64_t synced_ SWITCHYARD_GUARDED_BY(mu_) = 0;  // commits_ as of the last sync
  std::thread syncer_;
  std::chrono::steady_clock::time_point next_retention_;  // writer thread
  // Whether retention runs (passes, and in commits): the default has
  // limits, or some stream has limits of its own. Set before the threads
  // start; refreshed by every pass and change, on the writer thread
  // holding commit_mu_. Read holding commit_mu_ (any committing thread),
  // or on the writer thread (retention_active_on_writer).
  bool retention_active_ SWITCHYARD_GUARDED_BY(commit_mu_) = false;
  std::thread writer_;
};

}  // namespace switchyard::storage

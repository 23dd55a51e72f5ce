#pragma once
// The durable sequence log: named streams of records in one LMDB
// environment, each record numbered by a per-stream sequence.
//
// Layout (four LMDB databases; the one description of them: the codec,
// storage/log_codec.hpp, and the raw access of storage/raw_access.hpp
// refer here; docs/storage.md, "On disk", says the same for operators):
//  - "streams": name -> stream metadata, seven little-endian u64: id,
//    epoch, first sequence, last sequence, record count, bytes, created
//    time (ms);
//  - "records": big-endian stream id + big-endian sequence -> a 24-byte
//    header, then the destination, then the payload. The header is, all
//    little-endian: checksum (u64), timestamp in ms (u64), destination length
//    (u32), reserved (u32, written 0). The checksum is xxHash3-64 of the
//    value from byte 16 on (destination length, reserved, destination, payload),
//    seeded from the sequence and the timestamp, so a flipped byte anywhere
//    in the value fails it. Fixed fields sit at 8-byte offsets of the value;
//    destination and payload are unpadded (LMDB aligns a value to 2 bytes only,
//    so padding would buy nothing). Keys sort by stream, then
//    sequence, so appends to the newest stream go to the end of the B-tree
//    (MDB_APPEND), and a stream's records are one contiguous range;
//  - "meta": two keys, each with a little-endian u64 value:
//      "format_version": the on-disk format (log_format_version), stamped
//        when a new log is first opened; a log of another format, or with
//        data but no stamp (format 1), is refused at open;
//      "last_stream_id": the last stream id handed out (ids are never
//        reused); written with the first stream;
//  - "retention": name -> the stream's own retention limits (three
//    little-endian u64: max records, max age in ms, max bytes), only for
//    streams that have their own (set_retention). Readers take the first
//    24 bytes, so later versions may append fields.
//
// A record's destination is opaque bytes (at most max_destination_bytes) stored
// with it: the broker puts there how the record was delivered live.
//
// Sequences start at 1, are contiguous per stream and are never reused,
// even after trimming. An append is durable when append() returns in the
// `sync` mode (LMDB fsyncs the commit); `batch` leaves syncing to sync()
// calls (what was appended since the last one can be lost in a crash, the
// log itself stays consistent); `none` never syncs by itself.
//
// The map grows when full; appends may take it up to max_map_size less a
// reserve (1/32 of it, at least 256 KiB, at most a quarter) and then fail
// with storage_full, with everything already committed readable. The
// reserve is for trims and retention, which need fresh pages even to
// delete: a full log can always be trimmed, and appends then reuse the
// space freed.
//
// The disk can be smaller than max_map_size. The data file is allocated on
// disk ahead of the data (fallocate, in steps of an eighth of the file, 1 to
// 64 MiB) and the map never reaches past what is allocated, so LMDB never
// writes to space the filesystem has not given it: on a full disk appends
// fail with storage_full before their commit, never with an I/O error.
// Every append also leaves a disk reserve free inside the file (free pages
// plus allocated slack, at least the trim pool and the tail reserve: see
// storage/map_space.hpp), checked in its transaction before it commits, so a
// trim (and retention) always finds the pages it needs, even when the
// filesystem is full; the pages it frees are then reused by appends. Where
// the filesystem cannot preallocate (or log_options::preallocate is off),
// a commit the disk refuses fails with storage_full (ENOSPC, EDQUOT, or the
// EIO that LMDB reports for a short write on a nearly full filesystem) and
// the reserve is only the map's. All of this is storage/map_space.hpp's,
// which also owns the log's page size (LMDB's).
//
// Thread safety: any number of threads may read; appends, trims and
// retention changes must come from one thread at a time (the group
// committer serializes them); sync() may run on any thread at any time,
// also during a write. Not for use by
// several processes at once: open() takes an exclusive lock (flock) on
// <dir>/switchyard.lock, holding the owner's pid, for the log's lifetime;
// a second open fails with `locked`. Read-only opens (log_options::
// read_only, for verification) take no lock and may run next to the owner.
//
// Damage (docs/storage.md, "Damage"): LMDB maps data.mdb and a page past
// the end of the file raises SIGBUS when touched, so open() first checks,
// with pread, that the file holds every page LMDB's meta page claims (a
// short file is refused with `corrupted`). Every key and value LMDB hands
// out is checked against the map and the file's current size (and against
// LMDB 0.9's page layout) before a byte of it is read
// (storage/damage_check.hpp); a record failing
// that, its checksum or the sequence order is reported as `corrupted`,
// naming stream and sequence (diagnostics), and the records around it
// still read. LMDB 0.9 has no page checksums: damage to its own B-tree
// pages may go unseen; where LMDB would assert or fault on it during a
// lookup or cursor step, the guard of storage/lmdb_guard.hpp makes that
// `corrupted` too (puts and deletes are not guarded). verify()
// (storage/log_walker.hpp; best run in another process:
// storage/log_verifier.hpp) walks everything.

#include "storage/durability.hpp"
#include "storage/errc.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::storage {

// The on-disk format this code reads and writes (the "meta" database's
// "format_version": see "Layout" above). Format 1 (no version key) had a
// 16-byte record header and no destination. Any other version, or a log with
// data but no version, is refused with errc::unsupported_format.
inline constexpr std::uint64_t log_format_version = 2;

// The largest destination a record may carry: appends with a larger one fail
// with invalid_argument. 64 KiB.
inline constexpr std::size_t max_destination_bytes = std::size_t{64} << 10;

struct log_options {
  std::filesystem::path dir;                 // created if missing
  std::size_t initial_map_size = 64u << 20;  // rounded to the OS page size by LMDB
  std::size_t max_map_size = std::size_t{8} << 30;
  durability mode = durability::sync;
  std::size_t max_record_bytes = 16u << 20;
  std::size_t max_stream_name = 255;
  // Injectable sources: record timestamps (wall clock, ms since the epoch;
  // only stored and used for age retention) and stream epochs (random).
  std::function<std::uint64_t()> wall_clock_ms;
  std::function<std::uint64_t()> random64;
  // Allocate the data file on disk ahead of the data (fallocate) and keep
  // the disk reserve in it (see above). Off: the file grows as LMDB writes
  // it, and a full disk shows only as failed commits.
  bool preallocate = true;
  // Opens an existing log without writing anything: no folder or file is
  // created, no format stamp, no lock (so it may run next to the process
  // that owns the log). Writes fail (io_error or a system error). For
  // verification and inspection; a missing log is not_found.
  bool read_only = false;
};

// The lock file open() holds in the log folder: flock(LOCK_EX), the
// holder's pid in decimal.
inline constexpr std::string_view lock_file_name = "switchyard.lock";

// Why a call failed, in words an operator can act on. Filled (when the
// caller passes one) by a call that fails with corrupted or locked, and by
// open() on any failure it can explain.
struct diagnostics {
  std::string stream;     // the stream concerned; empty if none
  std::uint64_t seq = 0;  // the damaged record; 0 if not about one record
  std::uint64_t pid = 0;  // locked: the process holding the log (0 if unknown)
  std::string message;    // one line, e.g. "file shorter than 8192 bytes (data.mdb is 4096 bytes)"
};

// Retention limits; 0 means no limit.
struct retention {
  std::uint64_t max_records = 0;
  std::chrono::milliseconds max_age{0};
  std::uint64_t max_bytes = 0;
};

struct stream_info {
  std::string name;
  std::uint64_t id = 0;
  std::uint64_t epoch = 0;      // random at creation: tells a recreated stream from a continued one
  std::uint64_t first_seq = 1;  // first retained; last_seq + 1 when empty
  std::uint64_t last_seq = 0;   // 0 before the first append
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;  // payload + destination bytes retained (what max_bytes retention counts)
  std::uint64_t created_ms = 0;
  // The stream's own retention limits (set_retention); nullopt: the
  // caller's default applies.
  std::optional<retention> own_retention;
};

// Retention applied inside an append's own transaction (see append()), so
// a stream over its limits is trimmed by the commit that puts it over.
struct append_retention {
  retention defaults;       // for streams without limits of their own (all 0: keep everything)
  std::size_t slack = 16;   // per stream and append: trims at most (its records in the append) + slack
  std::size_t trimmed = 0;  // out: records trimmed by the last append() given this object
};

struct append_item {
  std::string_view stream;
  std::span<const std::byte> payload;
  std::span<const std::byte> destination = {};  // opaque, at most max_destination_bytes; empty = none
};

struct record {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ms = 0;
  std::vector<std::byte> payload;
  std::vector<std::byte> destination;  // as appended; empty if none
};

struct read_result {
  std::uint64_t epoch = 0;
  std::uint64_t first_seq = 0;  // of the stream at the time of the read
  std::uint64_t last_seq = 0;
  std::vector<record> records;
  // Non-zero: the read stopped before this record because it is damaged
  // (the records before it are in `records`); a read from it fails with
  // corrupted, a read from the next one goes on past it.
  std::uint64_t damaged_seq = 0;
};

// verify(): one thing found wrong.
struct verify_problem {
  std::string stream;     // empty: not about one stream
  std::uint64_t seq = 0;  // 0: not about one record
  std::string what;
};

// verify(): how far the walk is.
struct verify_progress {
  std::uint64_t streams = 0;  // streams in the log
  std::uint64_t records = 0;  // records checked so far
  std::uint64_t bytes = 0;    // bytes of record values checked so far
};

struct verify_report {
  std::uint64_t streams = 0;  // checked
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;               // of record values (headers included)
  std::uint64_t problem_count = 0;       // everything found wrong
  std::vector<verify_problem> problems;  // the first ones found (at most the limit asked for)
  // Set by verify_log (storage/log_verifier.hpp), which walks in a child
  // process: the walk died of this signal (damage LMDB itself tripped on),
  // or did not finish in time; the log counts as damaged either way.
  int signal = 0;
  bool timed_out = false;
  // LMDB's page counts plus its free list were checked against the file's
  // last page (skipped when a writer committed during the walk).
  bool pages_checked = false;
  std::chrono::milliseconds elapsed{0};
  bool intact() const noexcept { return problem_count == 0 && signal == 0 && !timed_out; }
};

struct raw_entry;

class sequence_log {
 public:
  // Opens (or creates) the log in options.dir; a new log is stamped with
  // log_format_version. Errors: io_error, corrupted (data.mdb is shorter
  // than LMDB's meta page claims, empty, or its meta pages or the log's
  // own metadata are damaged), locked (another process has the log open:
  // diag->pid), storage_full, invalid_argument, unsupported_format (the
  // log was written in another on-disk format; it is left untouched),
  // not_found (read_only and there is no log). `diag`, if given, gets a
  // one-line explanation of a failure.
  static std::expected<std::unique_ptr<sequence_log>, std::error_code> open(log_options options,
                                                                            diagnostics* diag = nullptr);
  ~sequence_log();
  sequence_log(const sequence_log&) = delete;
  sequence_log& operator=(const sequence_log&) = delete;

  // Appends every item in one transaction, creating streams on first use;
  // returns each item's sequence, in order. All or nothing. Errors:
  // invalid_argument (empty or long name, oversized payload or destination),
  // storage_full (the map or the disk is full, or the commit would leave
  // less than the disk reserve). Destination and payload are written straight
  // into the record's LMDB value (MDB_RESERVE), not copied anywhere else.
  // With `epochs` given, it receives each item's stream epoch too.
  // With `retain` given, every stream the append touched is trimmed in the
  // same transaction to its own limits (or retain->defaults), by count,
  // bytes and age, at most its records in this append plus retain->slack;
  // retain->trimmed receives how many went. The sequences returned are
  // those appended even if retention removed some of them at once.
  std::expected<std::vector<std::uint64_t>, std::error_code> append(std::span<const append_item> items,
                                                                    std::vector<std::uint64_t>* epochs = nullptr,
                                                                    append_retention* retain = nullptr);
  std::expected<std::uint64_t, std::error_code> append(std::string_view stream, std::span<const std::byte> payload,
                                                       std::span<const std::byte> destination = {});

  // Records from sequence `from` on, at most `max_count` and about
  // `max_bytes` of payload plus destination (the first record always, if there
  // is one). A damaged record (failed checksum, key or value outside the
  // file, a missing sequence) ends the result: the records before it are
  // returned with read_result::damaged_seq naming it.
  // Errors: not_found (no such stream), trimmed (from < first retained: see
  // info().first_seq), corrupted (the record at `from` is damaged, or the
  // stream's metadata is: `diag` gets stream, sequence and what is wrong;
  // read from seq + 1 to go on past it).
  // Costs no system call unless the file grew since the last check.
  std::expected<read_result, std::error_code> read(std::string_view stream, std::uint64_t from, std::size_t max_count,
                                                   std::size_t max_bytes, diagnostics* diag = nullptr);

  // Errors: not_found, corrupted (the stream's metadata or retention entry
  // is damaged; `diag` says which).
  std::expected<stream_info, std::error_code> info(std::string_view stream, diagnostics* diag = nullptr) const;
  std::expected<std::vector<stream_info>, std::error_code> list() const;
  // How many streams the log holds (LMDB's entry count of the stream
  // index: no walk). Any thread. Errors: corrupted (the index's root is
  // damaged), or LMDB's error starting a read transaction.
  std::expected<std::size_t, std::error_code> stream_count() const;
  // Streams whose name starts with `prefix`, in name order (bytewise), at
  // most `max_count`; `*more` (if given) tells whether any were left out.
  // Errors: corrupted (a stream's name, metadata or retention entry is
  // damaged; `diag` says which).
  std::expected<std::vector<stream_info>, std::error_code> list(std::string_view prefix, std::size_t max_count,
                                                                bool* more = nullptr,
                                                                diagnostics* diag = nullptr) const;

  // Per-stream retention, kept in the "retention" database, so it survives
  // a restart. Writer thread (like append and trim); nothing is trimmed
  // here: the caller's enforce() applies the limits.
  //
  // set_retention makes `limits` the stream's own, replacing earlier ones;
  // all-zero limits are an override too ("keep everything", whatever the
  // caller's default). An unknown stream is created, empty (first_seq 1,
  // last_seq 0, a fresh epoch), and its first append gets sequence 1.
  // Returns the stream as it is now; `*created` (if given) tells whether
  // this call created it. Errors: invalid_argument (empty or long name,
  // negative age), storage_full.
  std::expected<stream_info, std::error_code> set_retention(std::string_view stream, const retention& limits,
                                                            bool* created = nullptr);
  // Drops the stream's own limits (a no-op if it has none). Errors:
  // not_found (no such stream; nothing is created), invalid_argument.
  std::expected<stream_info, std::error_code> clear_retention(std::string_view stream);

  // Deletes a stream: its records, its metadata and its own retention
  // limits, in one write transaction (all or nothing), from the writer
  // thread. Returns the stream as it was just before. Its name is free
  // again: a later append creates a new stream (a new id and epoch, first
  // sequence 1); stream ids are never reused, so nothing of the old one
  // can show through. It may use the reserves like a trim. When even that
  // transaction does not fit (storage_full: a large stream on a full log,
  // whose free-list entry needs fresh contiguous pages), the stream is
  // first trimmed from the front in steps of their own (as retention
  // would) and then deleted; a crash in between leaves the stream with
  // fewer records, never damaged. Like a trim it checks every record and
  // leaf page before deleting from it, and deletes nothing of a stream
  // with a damaged record, page or metadata. Errors: not_found,
  // invalid_argument (empty or long name), corrupted, storage_full.
  std::expected<stream_info, std::error_code> delete_stream(std::string_view stream);

  // Removes up to `max_records` records from the front of the stream, all
  // below `before_seq`. Returns how many went. Sequences are not reused.
  // Trims may use the reserves (map and disk); on a full log a trim retries
  // with half the records, down to one, so it makes progress.
  // Never deletes by a damaged length: before deleting from a leaf page it
  // checks that page and its neighbours (LMDB may merge them), and it
  // stops before a damaged record or page, and before a missing record (a
  // hole in first..last); a trim that cannot remove anything for that
  // reason fails with corrupted (so does enforce).
  std::expected<std::size_t, std::error_code> trim(std::string_view stream, std::uint64_t before_seq,
                                                   std::size_t max_records);
  // One bounded retention step: trims by count, bytes (payload + destination)
  // and age (wall clock), at most `max_records` records. Returns how many
  // went.
  std::expected<std::size_t, std::error_code> enforce(std::string_view stream, const retention& limits,
                                                      std::size_t max_records);

  // invalid_argument if an append of this stream name, payload size and
  // destination size would be refused; the same check append() makes.
  std::error_code check(std::string_view stream, std::size_t payload_size,
                        std::size_t destination_size = 0) const noexcept;

  // Flushes committed data to disk (the batch mode's periodic sync): every
  // transaction committed before the call is on disk when it returns
  // without error. Any thread, also while another thread writes or grows
  // the map: the log is opened without MDB_WRITEMAP, where LMDB 0.9's
  // mdb_env_sync is an fdatasync of the data file that takes no lock and
  // reads nothing of the map (lmdb.h puts no thread restriction on it).
  // Errors: io_error, storage_full (ENOSPC, EDQUOT) or the system error
  // of the flush.
  std::error_code sync();
  // How often the log was flushed to disk since it was opened: in the
  // sync mode each commit that wrote something (LMDB flushes it before the
  // commit returns: the data pages, then the meta page), in every mode
  // each sync() that succeeded. Any thread.
  std::uint64_t fsyncs() const noexcept;

  std::size_t map_size() const noexcept;
  durability mode() const noexcept;
  // The wall clock the log stamps records with (log_options::wall_clock_ms,
  // ms since the Unix epoch): a reader compares record timestamps with it.
  std::uint64_t wall_clock_ms() const;

  // Space of the data file in bytes, as the writer last saw it: allocated
  // on disk (0 when not preallocating), and the disk reserve appends leave
  // free (trim pool + tail). Writer thread (or while no write runs).
  struct space_info {
    std::uint64_t allocated = 0;
    std::uint64_t reserve = 0;
  };
  space_info space() const noexcept;
  // Walks the whole log in one read transaction and checks everything it
  // can: every record's key, bounds, checksum and destination length; per
  // stream, contiguous sequences from first to last and the record and
  // byte counts of its metadata; records of unknown streams; retention
  // entries; the format stamp and the last stream id; and that LMDB's page
  // counts plus its free list account for every page of the file (when no
  // writer committed during the walk). Records at most `max_problems`
  // problems (all are counted). `progress`, if set, is called on this
  // thread every 65,536 records. Damage LMDB itself trips on can still
  // fault here: run it in another process (verify_log,
  // storage/log_verifier.hpp) unless a crash is acceptable. Reads only;
  // any thread, but not two verify() calls on one log at once (it opens
  // LMDB database handles, which LMDB allows one transaction at a time).
  // The walk itself: storage/log_walker.hpp.
  verify_report verify(std::size_t max_problems = 100,
                       const std::function<void(const verify_progress&)>& progress = {}) const;

  struct impl;

 private:
  // Tests and fuzzing: storage/raw_access.hpp.
  friend std::error_code rewrite_raw(sequence_log& log, std::span<const raw_entry> entries);

  explicit sequence_log(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace switchyard::storage

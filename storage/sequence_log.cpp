#include "storage/sequence_log.hpp"

#include "storage/damage_check.hpp"
#include "storage/data_file.hpp"
#include "storage/lmdb_guard.hpp"
#include "storage/lmdb_txn.hpp"
#include "storage/log_codec.hpp"
#include "storage/log_walker.hpp"
#include "storage/map_space.hpp"
#include "storage/raw_access.hpp"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <shared_mutex>
#include <unordered_map>

namespace switchyard::storage {

namespace {

using log_codec::format_key;
using log_codec::get_le;
using log_codec::last_stream_key;
using log_codec::put_le;
using log_codec::record_header;
using log_codec::record_key;
using log_codec::record_key_size;
using log_codec::stream_meta;

// Takes the log's lock file in `dir`: an exclusive flock, held as long as
// `fd` stays open, with this process's pid written into the file. Errors:
// locked (another open file holds it; diag gets its pid if written),
// io_error.
std::error_code take_lock(const std::filesystem::path& dir, int& fd, diagnostics* diag) {
  const auto file = dir / std::string(lock_file_name);
  fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    report(diag, {}, 0, "cannot open " + file.string() + ": " + std::strerror(errno));
    return errc::io_error;
  }
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    fd = -1;
    if (err != EWOULDBLOCK) {
      report(diag, {}, 0, "cannot lock " + file.string() + ": " + std::strerror(err));
      return errc::io_error;
    }
    const std::uint64_t pid = n > 0 ? std::strtoull(buf, nullptr, 10) : 0;
    if (diag) {
      report(diag, {}, 0,
             "the log in " + dir.string() + " is in use by another process (" +
                 (pid != 0 ? "pid " + std::to_string(pid) : std::string("pid unknown")) + ", lock file " +
                 file.string() + ")");
      diag->pid = pid;
    }
    return errc::locked;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // The lock is what counts: a pid not written only makes the other
  // side's message vaguer.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  return {};
}

bool has_limits(const retention& r) { return r.max_records > 0 || r.max_bytes > 0 || r.max_age.count() > 0; }

// The retention test of a stream's front record: true while the stream
// (metadata `m`) is over a limit or the record (timestamp `ts`) is older
// than max_age at `now`.
auto over_limits(const retention& limits, std::uint64_t now) {
  const auto age = static_cast<std::uint64_t>(limits.max_age.count());
  const std::uint64_t cutoff = age > 0 && now > age ? now - age : 0;
  return [limits, cutoff](const stream_meta& m, std::uint64_t, std::uint64_t ts) {
    return (limits.max_records > 0 && m.records > limits.max_records) ||
           (limits.max_bytes > 0 && m.bytes > limits.max_bytes) || (cutoff > 0 && ts < cutoff);
  };
}

}  // namespace

// The log's state. Space management (map size, preallocation, the
// reserves, the page size) is `space`'s (storage/map_space.hpp), the checks
// against damage are `checks`' (storage/damage_check.hpp), the encoding of
// keys and values is storage/log_codec.hpp's; what is here is the log's own:
// streams, appends, reads, trims, the lock and the format stamp.
struct sequence_log::impl {
  explicit impl(log_options o)
      : opts(std::move(o)), space(opts, dbs, [this] { checks.map_moved(); }), checks(space, dbs) {}

  log_options opts;
  MDB_env* env = nullptr;
  log_codec::dbs dbs;                // set by open()
  std::uint64_t last_stream_id = 0;  // writer thread
  int lock_fd = -1;                  // <dir>/switchyard.lock, flock'ed while open; -1 when read-only
  map_space space;
  damage_check checks;
  // Flushes to disk so far (sequence_log::fsyncs).
  std::atomic<std::uint64_t> fsyncs{0};

  ~impl() {
    if (env) mdb_env_close(env);
    if (lock_fd >= 0) ::close(lock_fd);  // releases the lock
  }

  std::error_code store(MDB_txn* t, std::string_view name, const stream_meta& m) {
    std::byte buf[log_codec::meta_size];
    m.encode(buf);
    MDB_val k = view(name), v{sizeof buf, buf};
    return from_lmdb(mdb_put(t, dbs.streams, &k, &v, 0));
  }

  // A stream's metadata and its own retention, as info() reports them.
  std::expected<stream_info, std::error_code> describe(MDB_txn* t, std::string_view name, const stream_meta& m,
                                                       diagnostics* diag = nullptr) const {
    auto own = checks.load_retention(t, name, diag);
    if (!own) return std::unexpected(own.error());
    auto out = m.info(name);
    out.own_retention = *own;
    return out;
  }

  // Stores `last_id` as the last stream id handed out, in transaction `t`.
  std::error_code store_last_stream_id(MDB_txn* t, std::uint64_t last_id) {
    std::byte buf[8];
    put_le<std::uint64_t>(buf, last_id);
    MDB_val k = view(last_stream_key), v{sizeof buf, buf};
    return from_lmdb(mdb_put(t, dbs.metadata, &k, &v, 0));
  }

  // Loads a stream, creating it empty when unknown (a new id, epoch and
  // creation time; the last stream id is stored in the same transaction).
  // `last_id` is the last id handed out, updated when a stream is created.
  std::expected<stream_meta, std::error_code> load_or_create(MDB_txn* t, std::string_view name,
                                                             std::uint64_t& last_id) {
    auto m = checks.load_meta(t, name);
    if (m || m.error() != errc::not_found) return m;
    const stream_meta fresh = new_stream(last_id, now_ms());
    if (auto ec = store(t, name, fresh)) return std::unexpected(ec);
    if (auto ec = store_last_stream_id(t, last_id)) return std::unexpected(ec);
    return fresh;
  }

  // The metadata of a stream created now: the next id (last_id is
  // advanced), a random epoch, no records.
  stream_meta new_stream(std::uint64_t& last_id, std::uint64_t now) {
    stream_meta fresh;
    fresh.id = ++last_id;
    fresh.epoch = opts.random64();
    fresh.created = now;
    return fresh;
  }

  // Commits `t` (LMDB's return code) and counts its flush in `fsyncs`: in
  // the sync mode LMDB flushes a commit that wrote something to disk before
  // it returns. A commit that wrote nothing flushes nothing and leaves the
  // meta page, whose last transaction id then stays below t's.
  int commit_counted(txn& t) {
    const bool flushes = opts.mode == durability::sync && !opts.read_only;
    const std::size_t id = flushes ? mdb_txn_id(t.get()) : 0;
    const int rc = t.commit_rc();
    MDB_envinfo info{};
    if (rc == MDB_SUCCESS && id != 0 && mdb_env_info(env, &info) == MDB_SUCCESS && info.me_last_txnid >= id)
      fsyncs.fetch_add(1, std::memory_order_relaxed);
    return rc;
  }

  // Runs `body` in a write transaction and commits; when the map is full
  // (or an append's reserve check fails), grows the map or the allocated
  // file (space.grow) and runs `body` again in a fresh transaction.
  // `reserve`: this write may use the reserves (trims, retention changes).
  // A commit the filesystem refuses (no space) is not retried: LMDB aborted
  // it, the environment stays usable and nothing committed before is
  // touched.
  template <class Body>
  std::error_code write(Body body, bool reserve) {
    for (;;) {
      std::error_code ec;
      space.begin_write();
      {
        const auto hold = space.hold();
        txn t;
        if ((ec = t.begin(env, 0))) return ec;
        ec = body(t.get());
        if (!ec) ec = space.commit_error(commit_counted(t));
      }
      if (ec != errc::storage_full) return ec;
      if (auto grown = space.grow(reserve)) return grown;
    }
  }

  std::uint64_t now_ms() const { return opts.wall_clock_ms(); }

  // Accepts a log stamped with log_format_version; stamps a new (empty)
  // one. A log of another version, or with data but no version (format 1),
  // is unsupported_format.
  std::error_code check_format(MDB_txn* t) {
    MDB_val k = view(format_key), v{};
    int rc = lmdb_guard::get(t, dbs.metadata, &k, &v);
    if (rc == MDB_SUCCESS) {
      if (v.mv_size != 8 || !checks.readable(v.mv_data, v.mv_size)) return errc::corrupted;
      return get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data)) == log_format_version
                 ? std::error_code{}
                 : errc::unsupported_format;
    }
    if (rc != MDB_NOTFOUND) return from_lmdb(rc);
    MDB_stat st{};
    for (const MDB_dbi dbi : {dbs.streams, dbs.records, dbs.metadata}) {
      if ((rc = mdb_stat(t, dbi, &st)) != MDB_SUCCESS) return from_lmdb(rc);
      if (st.ms_entries != 0) return errc::unsupported_format;
    }
    if (opts.read_only) return {};  // an empty log, never stamped: nothing to write here
    std::byte buf[8];
    put_le<std::uint64_t>(buf, log_format_version);
    MDB_val nv{sizeof buf, buf};
    return from_lmdb(mdb_put(t, dbs.metadata, &k, &nv, 0));
  }

  // Deletes records from the front of the stream `m` describes (its
  // metadata, updated here, not stored) in transaction `t` while `more(m,
  // seq, timestamp)` says so, at most `max`. Returns how many went.
  template <class More>
  std::expected<std::size_t, std::error_code> trim_in(MDB_txn* t, stream_meta& m, std::size_t max,
                                                      std::uint64_t committed_last, More&& more) {
    std::size_t removed = 0;
    cursor c(t, dbs.records);
    if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
    record_key start(m.id, m.first);
    MDB_val k = start.val(), v{};
    int rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
    // Nothing of a committed record is read, nor is it deleted, before its
    // bounds are checked (a delete moves and frees bytes by the stored
    // length). The checks need pointers into the map, and this
    // transaction's own pages are heap copies once it deleted something:
    // committed records are read through a read transaction on the state
    // this write started from (the last commit; there is one writer), in
    // step with `c`. Records this transaction wrote itself (sequences past
    // `committed_last`) are intact and read through `c`.
    txn before;
    if (auto ec = before.begin(env, MDB_RDONLY)) return std::unexpected(ec);
    cursor bc(before.get(), dbs.records);
    if (bc.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(bc.status()));
    MDB_val bk = start.val(), bv{};
    int brc = m.first <= committed_last ? lmdb_guard::cursor_get(bc.get(), &bk, &bv, MDB_SET_RANGE) : MDB_NOTFOUND;
    std::uint64_t checked_page = 0;  // its records and neighbours passed check_trim_pages (0: none yet)
    while (rc == MDB_SUCCESS && removed < max) {
      const bool committed = m.first <= committed_last;
      const std::byte* kb = nullptr;
      if (committed) {
        if (brc != MDB_SUCCESS)
          return std::unexpected(brc == MDB_NOTFOUND ? make_error_code(errc::corrupted) : from_lmdb(brc));
        kb = static_cast<const std::byte*>(bk.mv_data);
        if (bk.mv_size != record_key_size || !checks.readable(kb, record_key_size) || k.mv_size != record_key_size ||
            std::memcmp(k.mv_data, kb, record_key_size) != 0)
          return std::unexpected(make_error_code(errc::corrupted));
        if (log_codec::key_stream(kb) != m.id) break;
        // A damaged record (or page) stops the trim: what went before it
        // is trimmed, the next trim starts at it and fails.
        const bool new_page = checks.in_map(bk.mv_data) && checks.page_of(bk.mv_data) != checked_page;
        if (checks.check_record(bk, bv) || (new_page && checks.check_trim_pages(before.get(), bk))) {
          if (removed == 0) return std::unexpected(make_error_code(errc::corrupted));
          break;
        }
        if (new_page) checked_page = checks.page_of(bk.mv_data);
        v = bv;  // the same record, as read from the map
      } else {
        if (k.mv_size != record_key_size) return std::unexpected(make_error_code(errc::corrupted));
        kb = static_cast<const std::byte*>(k.mv_data);
        if (log_codec::key_stream(kb) != m.id) break;
      }
      const std::uint64_t seq = log_codec::key_seq(kb);
      // The stream's records are first..last, every one there: a record
      // after a hole (or past last) is not the front one. Trimming it
      // would leave metadata whose count no longer fits first..last (the
      // stream unreadable). A missing record is damage: stop before it.
      if (seq != m.first) {
        if (removed == 0 && m.first <= m.last) return std::unexpected(make_error_code(errc::corrupted));
        break;
      }
      if (v.mv_size < record_header) return std::unexpected(make_error_code(errc::corrupted));
      const std::uint64_t ts = log_codec::record_timestamp(static_cast<const std::byte*>(v.mv_data));
      if (!more(m, seq, ts)) break;
      const std::size_t stored = v.mv_size - record_header;  // destination + payload, as counted in bytes
      if (committed) brc = lmdb_guard::cursor_get(bc.get(), &bk, &bv, MDB_NEXT);
      if ((rc = mdb_cursor_del(c.get(), 0)) != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
      m.first = seq + 1;
      m.records -= 1;
      m.bytes -= std::min<std::uint64_t>(m.bytes, stored);
      ++removed;
      // Re-seek rather than rely on the cursor's position after a delete.
      record_key next(m.id, seq + 1);
      k = next.val();
      rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return std::unexpected(from_lmdb(rc));
    if (removed > 0 && m.records == 0) m.first = m.last + 1;
    return removed;
  }

  // Deletes records from the front of a stream while `more(meta, seq,
  // timestamp)` says so, at most `max`, in a write that may use the
  // reserves. On storage_full it tries again with half as many, down to
  // one record: a smaller step needs fewer fresh pages.
  template <class More>
  std::expected<std::size_t, std::error_code> trim_front(std::string_view name, std::size_t max, More more) {
    std::size_t removed = 0;
    std::error_code ec;
    for (std::size_t step = std::max<std::size_t>(max, 1);; step /= 2) {
      ec = write(
          [&](MDB_txn* t) -> std::error_code {
            removed = 0;
            auto m = checks.load_meta(t, name);
            if (!m) return m.error();
            auto n = trim_in(t, *m, std::min(step, max), m->last, more);
            if (!n) return n.error();
            removed = *n;
            if (removed == 0) return {};  // nothing written: LMDB commits nothing, no fsync
            return store(t, name, *m);
          },
          true);
      if (ec != errc::storage_full || step <= 1) break;
    }
    // A trim may have dipped into the reserves: give appends back only
    // their limit again, so they reuse the pages the trim freed and the
    // reserve stays for trims.
    if (auto shrink = space.keep_reserve()) return std::unexpected(shrink);
    if (ec) return std::unexpected(ec);
    return removed;
  }
};

sequence_log::sequence_log(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
sequence_log::~sequence_log() = default;

std::expected<std::unique_ptr<sequence_log>, std::error_code> sequence_log::open(log_options options,
                                                                                 diagnostics* diag) {
  const auto fail = [diag](std::error_code ec, std::string message) {
    report(diag, {}, 0, std::move(message));
    return std::unexpected(ec);
  };
  if (options.dir.empty()) return fail(errc::invalid_argument, "no log folder given");
  if (!options.wall_clock_ms)
    options.wall_clock_ms = [] {
      return static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count());
    };
  if (!options.random64)
    options.random64 = [rd = std::make_shared<std::random_device>()] {
      return (static_cast<std::uint64_t>((*rd)()) << 32) ^ (*rd)();
    };
  options.max_map_size = std::max(options.max_map_size, options.initial_map_size);
  const auto data_path = options.dir / "data.mdb";
  std::error_code fs_ec;
  if (options.read_only) {
    if (!std::filesystem::exists(data_path, fs_ec))
      return fail(errc::not_found, "no sequence log in " + options.dir.string() + " (no data.mdb)");
  } else {
    std::filesystem::create_directories(options.dir, fs_ec);
    if (fs_ec) return fail(errc::io_error, "cannot create " + options.dir.string() + ": " + fs_ec.message());
  }

  auto p = std::make_unique<impl>(std::move(options));
  const log_options& o = p->opts;
  // One process at a time: the lock first, before LMDB touches anything.
  if (!o.read_only)
    if (auto ec = take_lock(o.dir, p->lock_fd, diag)) return std::unexpected(ec);
  // The file must hold what its meta page claims before LMDB maps it.
  {
    std::string detail;
    if (auto ec = data_file::check(data_path, &detail)) return fail(ec, detail);
  }
  if (auto ec = from_lmdb(mdb_env_create(&p->env))) return fail(ec, "cannot create an LMDB environment");
  mdb_env_set_maxdbs(p->env, 8);  // four in use; room for more without a format change
  // LMDB's assertions and faults in lookups become MDB_CORRUPTED (lmdb_guard.hpp).
  mdb_env_set_assert(p->env, lmdb_guard::install());
  if (auto ec = from_lmdb(mdb_env_set_mapsize(p->env, p->space.initial_map_size(data_path))))
    return fail(ec, "cannot size the LMDB map");
  // NOTLS: read transactions are not tied to threads. The sync modes other
  // than `sync` commit without fsync and rely on sync().
  unsigned flags = MDB_NOTLS;
  if (o.read_only)
    flags |= MDB_RDONLY;
  else if (o.mode != durability::sync)
    flags |= MDB_NOSYNC;
  if (const int rc = mdb_env_open(p->env, o.dir.c_str(), flags, 0644); rc != MDB_SUCCESS)
    return fail(from_lmdb(rc), std::string("LMDB cannot open ") + data_path.string() + ": " + mdb_strerror(rc));
  // The map size, the page size (map_space owns it) and the data file.
  if (auto ec = p->space.attach(p->env)) {
    if (ec == errc::internal) return fail(ec, "LMDB has no data file");
    return std::unexpected(ec);
  }
  p->checks.attach(p->env);
  MDB_envinfo info{};
  mdb_env_info(p->env, &info);
  // A writer next door may have committed since the check above.
  if ((info.me_last_pgno + 1) * p->space.page_size() > p->checks.refresh_file_size()) {
    std::string detail;
    if (auto ec = data_file::check(data_path, &detail)) return fail(ec, detail);
  }

  txn t;
  if (auto ec = t.begin(p->env, o.read_only ? MDB_RDONLY : 0))
    return fail(ec, std::string("cannot begin a transaction: ") + ec.message());
  const unsigned create = o.read_only ? 0 : MDB_CREATE;
  for (const auto& [name, dbi] : {std::pair{log_codec::streams_db, &p->dbs.streams},
                                  {log_codec::records_db, &p->dbs.records},
                                  {log_codec::meta_db, &p->dbs.metadata}}) {
    const int rc = lmdb_guard::dbi_open(t.get(), name, create, dbi);
    if (rc == MDB_NOTFOUND) return fail(errc::not_found, "no sequence log in " + o.dir.string());
    if (rc != MDB_SUCCESS)
      return fail(from_lmdb(rc), std::string("cannot open the \"") + name + "\" database: " + mdb_strerror(rc));
  }
  if (auto ec = p->check_format(t.get())) {  // aborts: nothing written
    return fail(ec, ec == errc::unsupported_format ? "this build reads format " + std::to_string(log_format_version)
                                                   : "the log's format stamp is damaged");
  }
  if (const int rc = lmdb_guard::dbi_open(t.get(), log_codec::retention_db, create, &p->dbs.own_retention);
      rc == MDB_NOTFOUND && o.read_only)
    p->dbs.has_retention = false;
  else if (rc != MDB_SUCCESS)
    return fail(from_lmdb(rc), std::string("cannot open the \"retention\" database: ") + mdb_strerror(rc));
  MDB_val k = view(last_stream_key), v{};
  const int rc = lmdb_guard::get(t.get(), p->dbs.metadata, &k, &v);
  if (rc == MDB_SUCCESS && v.mv_size == 8 && p->checks.readable(v.mv_data, 8))
    p->last_stream_id = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
  else if (rc == MDB_SUCCESS)
    return fail(errc::corrupted, "the last stream id in the \"meta\" database is damaged");
  else if (rc != MDB_NOTFOUND)
    return fail(from_lmdb(rc), std::string("cannot read the last stream id: ") + mdb_strerror(rc));
  if (auto ec = from_lmdb(p->commit_counted(t))) return fail(ec, std::string("cannot commit: ") + ec.message());
  p->checks.locate_map_now();
  if (auto ec = p->space.preallocate()) return fail(ec, std::string("cannot reserve disk space: ") + ec.message());
  return std::unique_ptr<sequence_log>(new sequence_log(std::move(p)));
}

std::expected<std::vector<std::uint64_t>, std::error_code> sequence_log::append(std::span<const append_item> items,
                                                                                std::vector<std::uint64_t>* epochs,
                                                                                append_retention* retain) {
  auto& p = *impl_;
  for (const auto& item : items)
    if (auto ec = check(item.stream, item.payload.size(), item.destination.size())) return std::unexpected(ec);
  std::vector<std::uint64_t> seqs;
  std::uint64_t last_id = p.last_stream_id;
  const auto ec = p.write(
      [&](MDB_txn* t) -> std::error_code {
        seqs.clear();
        if (epochs) epochs->clear();
        last_id = p.last_stream_id;  // a retry starts from what is committed
        if (retain) retain->trimmed = 0;
        struct touched_stream {
          stream_meta m;
          std::size_t appended = 0;
        };
        std::unordered_map<std::string_view, touched_stream> touched;
        const std::uint64_t now = p.now_ms();
        for (const auto& item : items) {
          auto it = touched.find(item.stream);
          if (it == touched.end()) {
            auto m = p.checks.load_meta(t, item.stream);
            if (!m && m.error() != errc::not_found) return m.error();
            if (!m) m = p.new_stream(last_id, now);
            it = touched.emplace(item.stream, touched_stream{*m}).first;
          }
          ++it->second.appended;
          stream_meta& m = it->second.m;
          const std::uint64_t seq = ++m.last;
          record_key key(m.id, seq);
          const std::size_t destination = item.destination.size();
          const std::size_t stored = destination + item.payload.size();
          MDB_val k = key.val(), v{record_header + stored, nullptr};
          // Keys of the newest stream sort after every other key: append at the
          // end of the B-tree without a search.
          const unsigned flags = MDB_RESERVE | (m.id == last_id ? MDB_APPEND : 0u);
          if (const int rc = mdb_put(t, p.dbs.records, &k, &v, flags); rc != MDB_SUCCESS) return from_lmdb(rc);
          // Written in place into the reserved value; the checksum last, over
          // what was written.
          auto* out = static_cast<std::byte*>(v.mv_data);
          log_codec::write_record_head(out, now, static_cast<std::uint32_t>(destination));
          if (destination != 0) std::memcpy(out + record_header, item.destination.data(), destination);
          if (!item.payload.empty())
            std::memcpy(out + record_header + destination, item.payload.data(), item.payload.size());
          log_codec::seal_record(out, v.mv_size, seq, now);
          if (m.records == 0) m.first = seq;
          m.records += 1;
          m.bytes += stored;
          seqs.push_back(seq);
          if (epochs) epochs->push_back(m.epoch);
        }
        // Retention in the same commit: each stream over its limits loses at
        // most what this append added to it plus the slack.
        std::size_t trimmed = 0, streams_trimmed = 0, removed_pages = 0;
        if (retain) {
          auto before = p.space.count_pages(t);
          if (!before) return before.error();
          for (auto& [name, ts] : touched) {
            auto own = p.checks.load_retention(t, name);
            if (!own) return own.error();
            const retention& limits = *own ? **own : retain->defaults;
            if (!has_limits(limits)) continue;
            auto n = p.trim_in(t, ts.m, ts.appended + retain->slack, ts.m.last - ts.appended, over_limits(limits, now));
            if (!n) return n.error();
            trimmed += *n;
            streams_trimmed += *n > 0 ? 1 : 0;
          }
          auto after = p.space.count_pages(t);
          if (!after) return after.error();
          removed_pages = before->total > after->total ? before->total - after->total : 0;
        }
        for (const auto& [name, ts] : touched)
          if (auto e = p.store(t, name, ts.m)) return e;
        if (last_id != p.last_stream_id)
          if (auto e = p.store_last_stream_id(t, last_id)) return e;
        if (auto e = p.space.check_disk_reserve(t, touched.size(), streams_trimmed, removed_pages)) return e;
        if (retain) retain->trimmed = trimmed;
        return {};
      },
      false);
  if (ec) return std::unexpected(ec);
  p.last_stream_id = last_id;
  return seqs;
}

std::expected<std::uint64_t, std::error_code> sequence_log::append(std::string_view stream,
                                                                   std::span<const std::byte> payload,
                                                                   std::span<const std::byte> destination) {
  const append_item item{stream, payload, destination};
  auto r = append(std::span(&item, 1));
  if (!r) return std::unexpected(r.error());
  return r->front();
}

std::expected<read_result, std::error_code> sequence_log::read(std::string_view stream, std::uint64_t from,
                                                               std::size_t max_count, std::size_t max_bytes,
                                                               diagnostics* diag) {
  auto& p = *impl_;
  const auto hold = p.space.hold();
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.checks.load_meta(t.get(), stream, diag);
  if (!m) return std::unexpected(m.error());
  if (from < m->first) return std::unexpected(make_error_code(errc::trimmed));
  read_result out;
  out.epoch = m->epoch;
  out.first_seq = m->first;
  out.last_seq = m->last;
  // (records == 0: empty, also when first = last + 1 wrapped to 0 after
  // sequence 2^64 - 1.)
  if (from > m->last || m->records == 0 || max_count == 0) return out;
  cursor c(t.get(), p.dbs.records);
  if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
  record_key start(m->id, from);
  MDB_val k = start.val(), v{};
  std::size_t bytes = 0;
  std::uint64_t expect = from;
  // Record `expect` is damaged: the records before it are the answer, or,
  // if there are none, the error.
  const auto damaged = [&](std::string_view what) -> std::expected<read_result, std::error_code> {
    if (!out.records.empty()) {
      out.damaged_seq = expect;
      return std::move(out);
    }
    report(diag, stream, expect, where(stream, expect) + ": " + std::string(what));
    return std::unexpected(make_error_code(errc::corrupted));
  };
  int rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
  // Sequences first..last are all there (the metadata says so, checked in
  // load): the stream's records are read by position, never by searching.
  for (; expect <= m->last && out.records.size() < max_count; ++expect) {
    if (rc != MDB_SUCCESS) {
      if (rc == MDB_NOTFOUND) return damaged("missing (the records end before the stream's last sequence)");
      if (from_lmdb(rc) == errc::corrupted) return damaged(std::string("LMDB reports ") + mdb_strerror(rc));
      return std::unexpected(from_lmdb(rc));
    }
    // Key and value checked before either is read.
    if (const char* why = p.checks.check_record(k, v)) return damaged(why);
    const auto* kb = static_cast<const std::byte*>(k.mv_data);
    // A hole is damage, not a gap to skip.
    if (log_codec::key_stream(kb) != m->id || log_codec::key_seq(kb) != expect)
      return damaged("missing (a hole in the sequence)");
    const auto* vb = static_cast<const std::byte*>(v.mv_data);
    const std::size_t size = v.mv_size - record_header;  // destination + payload
    if (!out.records.empty() && bytes + size > max_bytes) break;
    if (!log_codec::checksum_matches(expect, vb, v.mv_size)) return damaged("checksum mismatch");
    // Checksummed, so only a writer bug could get these wrong; never read
    // past the value all the same.
    if (!log_codec::destination_fits(vb, size)) return damaged("its destination length is damaged");
    const std::uint64_t ts = log_codec::record_timestamp(vb);
    const std::size_t destination = log_codec::destination_size(vb);
    const auto* body = vb + record_header;
    out.records.push_back({expect, ts, std::vector<std::byte>(body + destination, body + size),
                           std::vector<std::byte>(body, body + destination)});
    bytes += size;
    // Step on only for a record that will be read: the cursor touches no
    // page beyond the answer (a damaged neighbour stays unread).
    if (expect < m->last && out.records.size() < max_count) rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT);
  }
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::info(std::string_view stream, diagnostics* diag) const {
  auto& p = *impl_;
  const auto hold = p.space.hold();
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.checks.load_meta(t.get(), stream, diag);
  if (!m) return std::unexpected(m.error());
  return p.describe(t.get(), stream, *m, diag);
}

std::expected<std::size_t, std::error_code> sequence_log::stream_count() const {
  auto& p = *impl_;
  const auto hold = p.space.hold();
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  MDB_stat s{};
  if (const int rc = lmdb_guard::stat(t.get(), p.dbs.streams, &s); rc != MDB_SUCCESS)
    return std::unexpected(from_lmdb(rc));
  return s.ms_entries;
}

std::expected<std::vector<stream_info>, std::error_code> sequence_log::list() const {
  return list({}, std::numeric_limits<std::size_t>::max());
}

std::expected<std::vector<stream_info>, std::error_code> sequence_log::list(std::string_view prefix,
                                                                            std::size_t max_count, bool* more,
                                                                            diagnostics* diag) const {
  auto& p = *impl_;
  if (more) *more = false;
  const auto hold = p.space.hold();
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  cursor c(t.get(), p.dbs.streams);
  if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
  std::vector<stream_info> out;
  // Names sort bytewise: those with the prefix are one range from it on.
  MDB_val k = view(prefix), v{};
  int rc = lmdb_guard::cursor_get(c.get(), &k, &v, prefix.empty() ? MDB_FIRST : MDB_SET_RANGE);
  for (; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
    if (!p.checks.readable(k.mv_data, k.mv_size)) {
      report(diag, {}, 0,
             (out.empty() ? std::string("the name of the first stream listed")
                          : "the name of the stream after '" + out.back().name + "'") +
                 " lies outside the data file");
      return std::unexpected(make_error_code(errc::corrupted));
    }
    const std::string_view name{static_cast<const char*>(k.mv_data), k.mv_size};
    if (!name.starts_with(prefix)) break;
    if (out.size() == max_count) {
      if (more) *more = true;
      break;
    }
    auto m = p.checks.check_meta(name, v, diag);
    if (!m) return std::unexpected(m.error());
    auto info = p.describe(t.get(), name, *m, diag);
    if (!info) return std::unexpected(info.error());
    out.push_back(std::move(*info));
  }
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
    const auto ec = from_lmdb(rc);
    if (ec == errc::corrupted) report(diag, {}, 0, std::string("listing streams: LMDB reports ") + mdb_strerror(rc));
    return std::unexpected(ec);
  }
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::set_retention(std::string_view stream,
                                                                        const retention& limits, bool* created) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  if (limits.max_age.count() < 0) return std::unexpected(make_error_code(errc::invalid_argument));
  std::byte value[log_codec::retention_size];
  log_codec::encode_retention(limits, value);
  stream_info out;
  std::uint64_t last_id = p.last_stream_id;
  bool made = false;
  // A tiny write that may use the trim reserve: on a full log, setting a
  // retention is how an operator makes room again.
  const auto ec = p.write(
      [&](MDB_txn* t) -> std::error_code {
        last_id = p.last_stream_id;  // a retry starts from what is committed
        auto m = p.checks.load_meta(t, stream);
        made = !m && m.error() == errc::not_found;
        if (made) m = p.load_or_create(t, stream, last_id);
        if (!m) return m.error();
        MDB_val k = view(stream), v{sizeof value, value};
        if (const int rc = mdb_put(t, p.dbs.own_retention, &k, &v, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
        out = m->info(stream);
        out.own_retention = limits;
        return {};
      },
      true);
  const auto shrink = p.space.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  p.last_stream_id = last_id;
  if (created) *created = made;
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::clear_retention(std::string_view stream) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  stream_info out;
  const auto ec = p.write(
      [&](MDB_txn* t) -> std::error_code {
        auto m = p.checks.load_meta(t, stream);
        if (!m) return m.error();
        MDB_val k = view(stream);
        if (const int rc = mdb_del(t, p.dbs.own_retention, &k, nullptr); rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
          return from_lmdb(rc);
        out = m->info(stream);
        return {};
      },
      true);
  const auto shrink = p.space.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::delete_stream(std::string_view stream) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  const auto every = [](const stream_meta&, std::uint64_t, std::uint64_t) { return true; };
  std::optional<stream_info> original;  // as the first attempt found it
  // Records, metadata and own retention in one transaction. The records go
  // through trim_in, which checks each record and leaf page before it
  // deletes from it and stops before damage: a stream it cannot empty is
  // left whole (the transaction is not committed).
  const auto remove = [&](MDB_txn* t) -> std::error_code {
    auto m = p.checks.load_meta(t, stream);
    if (!m) return m.error();
    if (!original) {
      auto info = p.describe(t, stream, *m);
      if (!info) return info.error();
      original = std::move(*info);
    }
    stream_meta left = *m;
    auto n = p.trim_in(t, left, static_cast<std::size_t>(left.records), left.last, every);
    if (!n) return n.error();
    if (left.records != 0) return errc::corrupted;
    MDB_val k = view(stream);
    if (const int rc = mdb_del(t, p.dbs.streams, &k, nullptr); rc != MDB_SUCCESS) return from_lmdb(rc);
    if (p.dbs.has_retention)
      if (const int rc = mdb_del(t, p.dbs.own_retention, &k, nullptr); rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return from_lmdb(rc);
    return {};
  };
  auto ec = p.write(remove, true);
  if (ec == errc::storage_full) {
    // The one transaction does not fit: trim the stream in steps (each its
    // own write, halving on storage_full like retention), then delete what
    // is left, at most an empty stream's metadata.
    for (ec = {}; !ec;) {
      auto now = info(stream);
      if (!now) {
        ec = now.error();
        break;
      }
      if (now->records == 0) break;
      auto n = p.trim_front(stream, static_cast<std::size_t>(now->records), every);
      if (!n)
        ec = n.error();
      else if (*n == 0)
        ec = errc::corrupted;  // no progress: stopped before damage
    }
    if (!ec) ec = p.write(remove, true);
  }
  const auto shrink = p.space.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  return std::move(*original);
}

std::expected<std::size_t, std::error_code> sequence_log::trim(std::string_view stream, std::uint64_t before_seq,
                                                               std::size_t max_records) {
  return impl_->trim_front(stream, max_records,
                           [&](const stream_meta&, std::uint64_t seq, std::uint64_t) { return seq < before_seq; });
}

std::expected<std::size_t, std::error_code> sequence_log::enforce(std::string_view stream, const retention& limits,
                                                                  std::size_t max_records) {
  return impl_->trim_front(stream, max_records, over_limits(limits, impl_->now_ms()));
}

verify_report sequence_log::verify(std::size_t max_problems,
                                   const std::function<void(const verify_progress&)>& progress) const {
  auto& p = *impl_;
  return log_walker(p.env, p.dbs, p.checks, p.space, max_problems).run(progress);
}

std::error_code sequence_log::check(std::string_view stream, std::size_t payload_size,
                                    std::size_t destination_size) const noexcept {
  const auto& o = impl_->opts;
  if (stream.empty() || stream.size() > o.max_stream_name || payload_size > o.max_record_bytes ||
      destination_size > max_destination_bytes)
    return errc::invalid_argument;
  return {};
}

std::error_code sequence_log::sync() {
  const auto ec = from_lmdb(mdb_env_sync(impl_->env, 1));
  if (!ec) impl_->fsyncs.fetch_add(1, std::memory_order_relaxed);
  return ec;
}

std::uint64_t sequence_log::fsyncs() const noexcept { return impl_->fsyncs.load(std::memory_order_relaxed); }

std::size_t sequence_log::map_size() const noexcept {
  const auto hold = impl_->space.hold();
  return impl_->space.map_size();
}

durability sequence_log::mode() const noexcept { return impl_->opts.mode; }

std::uint64_t sequence_log::wall_clock_ms() const { return impl_->now_ms(); }

sequence_log::space_info sequence_log::space() const noexcept {
  return {impl_->space.allocated(), impl_->space.reserve_bytes()};
}

std::error_code rewrite_raw(sequence_log& log, std::span<const raw_entry> entries) {
  auto& p = *log.impl_;
  if (p.opts.read_only) return make_error_code(errc::invalid_argument);
  const auto ec = p.write(
      [&](MDB_txn* t) -> std::error_code {
        for (const MDB_dbi dbi : {p.dbs.streams, p.dbs.records, p.dbs.own_retention})
          if (const int rc = mdb_drop(t, dbi, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
        for (const auto& e : entries) {
          const MDB_dbi dbi = e.db == raw_db::streams   ? p.dbs.streams
                              : e.db == raw_db::records ? p.dbs.records
                              : e.db == raw_db::meta    ? p.dbs.metadata
                                                        : p.dbs.own_retention;
          MDB_val k{e.key.size(), const_cast<std::byte*>(e.key.data())};
          MDB_val v{e.value.size(), const_cast<std::byte*>(e.value.data())};
          if (const int rc = mdb_put(t, dbi, &k, &v, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
        }
        return {};
      },
      true);
  // Like a trim, this may have used the reserves: appends get their limit back.
  const auto shrink = p.space.keep_reserve();
  return ec ? ec : shrink;
}

}  // namespace switchyard::storage

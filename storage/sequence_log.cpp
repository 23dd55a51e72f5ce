#include "storage/sequence_log.hpp"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <unordered_map>

namespace switchyard::storage {

namespace {

// Record value: checksum (u64), timestamp (u64), subject length (u32),
// reserved (u32, 0), subject, payload; all little-endian.
constexpr std::size_t record_header = 24;
constexpr std::size_t checksummed_from = 16;  // the checksum covers value[16, end)
constexpr std::size_t meta_size = 7 * 8;
constexpr std::string_view last_stream_key = "last_stream_id";
constexpr std::string_view format_key = "format_version";

static_assert(max_subject_bytes <= UINT32_MAX, "the subject length is a u32 on disk");
constexpr std::size_t retention_size = 3 * 8;  // max records, max age (ms), max bytes

// Disk space (docs/storage.md, "Space"). LMDB 0.9 facts these bounds rely
// on: two meta pages; a page header of 16 bytes; a node header of 8 bytes;
// a node larger than ((page - 16) / 2 & ~1) - 2 bytes goes to overflow
// pages; a page number p + n is refused unless below map_size / page.
constexpr std::size_t lmdb_metas = 2;
constexpr std::size_t lmdb_page_header = 16;
constexpr std::size_t lmdb_node_header = 8;
// Free pages every append leaves for trims (the trim pool): at most 256 KiB,
// at most an eighth of max_map_size, at least 16 pages.
constexpr std::size_t trim_pool_bytes = 256u << 10;
constexpr std::size_t min_trim_pool_pages = 16;
// Preallocation steps: an eighth of the file, within these bounds.
constexpr std::uint64_t min_prealloc_step = 1u << 20;
constexpr std::uint64_t max_prealloc_step = 64u << 20;
// The smallest step tried once a larger one found the disk full.
constexpr std::uint64_t last_prealloc_step = 64u << 10;
// LMDB reports a short write as EIO; a commit failing with it while the
// filesystem has less than this free is taken for a full disk.
constexpr std::uint64_t short_write_free_bytes = 64u << 20;

// Whether an fallocate/pwrite errno means "no space" (the disk, or a quota).
bool no_space(int e) { return e == ENOSPC || e == EDQUOT; }

// fallocate(mode 0) over [offset, offset + len), retried on EINTR.
// Returns 0 or the errno.
int allocate(int fd, std::uint64_t offset, std::uint64_t len) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0) return 0;
    if (errno != EINTR) return errno;
  }
  return EINTR;
}

// Little-endian integers of the on-disk values, whatever the host.
template <class T>
void put_le(std::byte* p, T v) {
  for (std::size_t i = 0; i < sizeof v; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
template <class T>
T get_le(const std::byte* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof v; ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}
void put_be64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (56 - 8 * i));
}
std::uint64_t get_be64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint64_t>(p[i]);
  return v;
}

// The checksum of a record value of `size` bytes (at least record_header):
// hashes everything from checksummed_from on (subject length, reserved,
// subject, payload) and binds it to the sequence and timestamp through the
// seed, so a flipped byte anywhere in the value fails the check.
std::uint64_t checksum(std::uint64_t seq, std::uint64_t timestamp, const std::byte* value, std::size_t size) {
  return XXH3_64bits_withSeed(value + checksummed_from, size - checksummed_from,
                              seq ^ (timestamp * 0x9E3779B97F4A7C15ull));
}

struct record_key {
  std::byte bytes[16];
  record_key(std::uint64_t stream, std::uint64_t seq) {
    put_be64(bytes, stream);
    put_be64(bytes + 8, seq);
  }
  MDB_val val() { return {sizeof bytes, bytes}; }
};

struct meta {
  std::uint64_t id = 0, epoch = 0, first = 1, last = 0, records = 0, bytes = 0, created = 0;

  void encode(std::byte* p) const {
    const std::uint64_t f[7] = {id, epoch, first, last, records, bytes, created};
    for (int i = 0; i < 7; ++i) put_le<std::uint64_t>(p + 8 * i, f[i]);
  }
  static std::expected<meta, std::error_code> decode(const MDB_val& v) {
    if (v.mv_size != meta_size) return std::unexpected(make_error_code(errc::corrupted));
    const auto* p = static_cast<const std::byte*>(v.mv_data);
    meta m;
    std::uint64_t* f[7] = {&m.id, &m.epoch, &m.first, &m.last, &m.records, &m.bytes, &m.created};
    for (int i = 0; i < 7; ++i) *f[i] = get_le<std::uint64_t>(p + 8 * i);
    return m;
  }
  stream_info info(std::string_view name) const {
    return {std::string(name), id, epoch, first, last, records, bytes, created};
  }
};

// A transaction that aborts unless committed.
class txn {
 public:
  txn() = default;
  txn(const txn&) = delete;
  txn& operator=(const txn&) = delete;
  ~txn() { abort(); }
  std::error_code begin(MDB_env* env, unsigned flags) { return from_lmdb(mdb_txn_begin(env, nullptr, flags, &t_)); }
  std::error_code commit() { return from_lmdb(commit_rc()); }
  // The same with LMDB's own return code (MDB_* or errno).
  int commit_rc() {
    const int rc = mdb_txn_commit(t_);
    t_ = nullptr;
    return rc;
  }
  void abort() noexcept {
    if (t_) mdb_txn_abort(t_);
    t_ = nullptr;
  }
  MDB_txn* get() const noexcept { return t_; }

 private:
  MDB_txn* t_ = nullptr;
};

class cursor {
 public:
  explicit cursor(MDB_txn* t, MDB_dbi dbi) { rc_ = mdb_cursor_open(t, dbi, &c_); }
  ~cursor() {
    if (c_) mdb_cursor_close(c_);
  }
  cursor(const cursor&) = delete;
  cursor& operator=(const cursor&) = delete;
  int status() const noexcept { return rc_; }
  MDB_cursor* get() const noexcept { return c_; }

 private:
  MDB_cursor* c_ = nullptr;
  int rc_ = 0;
};

MDB_val view(std::string_view s) { return {s.size(), const_cast<char*>(s.data())}; }

// A "retention" value; later versions may append fields after the first 24 bytes.
std::expected<retention, std::error_code> decode_retention(const MDB_val& v) {
  if (v.mv_size < retention_size) return std::unexpected(make_error_code(errc::corrupted));
  const auto* p = static_cast<const std::byte*>(v.mv_data);
  const std::uint64_t age = get_le<std::uint64_t>(p + 8);
  if (age > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return std::unexpected(make_error_code(errc::corrupted));
  return retention{get_le<std::uint64_t>(p), std::chrono::milliseconds(static_cast<std::int64_t>(age)), get_le<std::uint64_t>(p + 16)};
}

bool has_limits(const retention& r) { return r.max_records > 0 || r.max_bytes > 0 || r.max_age.count() > 0; }

// The retention test of a stream's front record: true while the stream
// (metadata `m`) is over a limit or the record (timestamp `ts`) is older
// than max_age at `now`.
auto over_limits(const retention& limits, std::uint64_t now) {
  const auto age = static_cast<std::uint64_t>(limits.max_age.count());
  const std::uint64_t cutoff = age > 0 && now > age ? now - age : 0;
  return [limits, cutoff](const meta& m, std::uint64_t, std::uint64_t ts) {
    return (limits.max_records > 0 && m.records > limits.max_records) ||
           (limits.max_bytes > 0 && m.bytes > limits.max_bytes) || (cutoff > 0 && ts < cutoff);
  };
}

// LMDB's own databases (mdb.c: FREE_DBI, MAIN_DBI); mdb_stat takes them.
constexpr MDB_dbi lmdb_free_dbi = 0;
constexpr MDB_dbi lmdb_main_dbi = 1;

}  // namespace

struct sequence_log::impl {
  log_options opts;
  MDB_env* env = nullptr;
  MDB_dbi streams = 0, records = 0, metadata = 0, own_retention = 0;
  std::size_t map_size = 0;
  std::uint64_t last_stream_id = 0;  // writer thread
  // Readers and the writer hold it shared for a transaction; growing the
  // map takes it exclusively (LMDB requires no live transaction then).
  mutable std::shared_mutex resize;
  // Disk space (writer thread, and open()): LMDB's data file (borrowed
  // from the env), its page size, the bytes of it allocated on disk (0:
  // not preallocating), and the disk reserve appends leave free: a pool of
  // pages for trims, and a tail of contiguous pages past the appends' map
  // limit (a trim of the largest record lists all its freed pages in one
  // free-list entry, whose overflow pages must be contiguous).
  int fd = -1;
  std::size_t page = 4096;
  std::uint64_t allocated = 0;
  std::size_t pool_pages = min_trim_pool_pages;
  std::size_t tail_pages = 4;
  // Set by a write that failed for want of disk space, and why: the
  // append's reserve check (more of the file would help), or the
  // filesystem refused the commit (a bigger map would not help).
  bool short_of_reserve = false;
  bool disk_refused = false;

  ~impl() {
    if (env) mdb_env_close(env);
  }

  std::expected<meta, std::error_code> load(MDB_txn* t, std::string_view name) const {
    MDB_val k = view(name), v{};
    const int rc = mdb_get(t, streams, &k, &v);
    if (rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
    return meta::decode(v);
  }

  std::error_code store(MDB_txn* t, std::string_view name, const meta& m) {
    std::byte buf[meta_size];
    m.encode(buf);
    MDB_val k = view(name), v{sizeof buf, buf};
    return from_lmdb(mdb_put(t, streams, &k, &v, 0));
  }

  // The stream's own retention limits, nullopt if it has none.
  std::expected<std::optional<retention>, std::error_code> load_retention(MDB_txn* t, std::string_view name) const {
    MDB_val k = view(name), v{};
    const int rc = mdb_get(t, own_retention, &k, &v);
    if (rc == MDB_NOTFOUND) return std::optional<retention>{};
    if (rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
    auto r = decode_retention(v);
    if (!r) return std::unexpected(r.error());
    return std::optional<retention>{*r};
  }

  // A stream's metadata and its own retention, as info() reports them.
  std::expected<stream_info, std::error_code> describe(MDB_txn* t, std::string_view name, const meta& m) const {
    auto own = load_retention(t, name);
    if (!own) return std::unexpected(own.error());
    auto out = m.info(name);
    out.own_retention = *own;
    return out;
  }

  // Loads a stream, creating it empty when unknown (a new id, epoch and
  // creation time; the last stream id is stored in the same transaction).
  // `last_id` is the last id handed out, updated when a stream is created.
  std::expected<meta, std::error_code> load_or_create(MDB_txn* t, std::string_view name, std::uint64_t& last_id) {
    auto m = load(t, name);
    if (m || m.error() != errc::not_found) return m;
    const meta fresh = new_stream(last_id, now_ms());
    if (auto ec = store(t, name, fresh)) return std::unexpected(ec);
    std::byte buf[8];
    put_le<std::uint64_t>(buf, last_id);
    MDB_val k = view(last_stream_key), v{sizeof buf, buf};
    if (const int rc = mdb_put(t, metadata, &k, &v, 0); rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
    return fresh;
  }

  // The metadata of a stream created now: the next id (last_id is
  // advanced), a random epoch, no records.
  meta new_stream(std::uint64_t& last_id, std::uint64_t now) {
    meta fresh;
    fresh.id = ++last_id;
    fresh.epoch = opts.random64();
    fresh.created = now;
    return fresh;
  }

  // A write that may have used the reserves gives appends back only their
  // own limit (LMDB keeps whatever the data now occupies; a map already at
  // that size is left alone).
  std::error_code keep_reserve() {
    const std::size_t fit = std::max(map_limit(false), used_bytes());
    if (map_size > fit) return resize_map(fit);
    return {};
  }

  // Appends may fill the map only up to this; the rest of max_map_size is
  // kept for trims: a delete needs fresh pages for its copy-on-write, so a
  // log filled to the brim could otherwise never be trimmed again.
  std::size_t append_ceiling() const {
    const std::size_t max = opts.max_map_size;
    const std::size_t reserve = std::clamp<std::size_t>(max / 32, std::min<std::size_t>(256u << 10, max / 4), max / 4);
    return max - reserve;
  }

  // The largest map a write may use: appends up to the append ceiling and,
  // preallocating, the allocated file less the tail reserve; reserve users
  // (trims, retention changes) up to max_map_size and the allocated file.
  std::size_t map_limit(bool reserve) const {
    std::uint64_t limit = reserve ? opts.max_map_size : append_ceiling();
    if (allocated != 0) {
      const std::uint64_t tail = reserve ? 0 : std::uint64_t{tail_pages} * page;
      limit = std::min(limit, allocated > tail ? allocated - tail : 0);
    }
    return static_cast<std::size_t>(limit);
  }

  // The pages every append leaves free for trims (see check_disk_reserve).
  std::size_t disk_reserve_pages() const { return pool_pages + tail_pages; }

  // Bytes of the file LMDB uses (through its last page), as last committed.
  std::size_t used_bytes() const {
    MDB_envinfo info{};
    mdb_env_info(env, &info);
    return (static_cast<std::size_t>(info.me_last_pgno) + 1) * page;
  }

  // Sets the map size (LMDB never goes below the data in use) and records
  // what it became.
  std::error_code resize_map(std::size_t size) {
    std::unique_lock lock(resize);
    if (auto ec = from_lmdb(mdb_env_set_mapsize(env, size))) return ec;
    MDB_envinfo info{};
    mdb_env_info(env, &info);
    map_size = info.me_mapsize;
    return {};
  }

  // Makes room after a write failed with storage_full: grows the map
  // towards map_limit(reserve) (doubling; straight to the limit when
  // preallocating, as the allocation steps are the growth policy), or, when
  // the allocated file is what limits (or the append's reserve check
  // failed), allocates more of the file. storage_full if nothing helps.
  std::error_code grow(bool reserve) {
    if (disk_refused) return errc::storage_full;
    const std::size_t limit = map_limit(reserve);
    if (!short_of_reserve && map_size < limit) return resize_map(allocated != 0 ? limit : std::min(limit, map_size * 2));
    const std::uint64_t ceiling = reserve ? opts.max_map_size : append_ceiling();
    const bool file_bound = allocated != 0 && (short_of_reserve || limit < ceiling);
    if (!file_bound || !extend_file()) return errc::storage_full;
    const std::size_t wider = map_limit(reserve);
    return wider > map_size ? resize_map(wider) : std::error_code{};
  }

  // Allocates more of the data file on disk (writer thread): a step of an
  // eighth of what is allocated (1..64 MiB) or, if the disk refuses that,
  // 64 KiB; never past max_map_size. False if nothing was allocated (not
  // preallocating, at the maximum, the disk or quota full, an error).
  bool extend_file() {
    const std::uint64_t max = opts.max_map_size / page * page;
    if (allocated == 0 || allocated >= max) return false;
    const std::uint64_t step = std::clamp(allocated / 8, min_prealloc_step, max_prealloc_step);
    for (const std::uint64_t want : {step, last_prealloc_step}) {
      const std::uint64_t target = std::min(max, (allocated + want + page - 1) / page * page);
      const int e = allocate(fd, allocated, target - allocated);
      if (e == 0) {
        allocated = target;
        return true;
      }
      if (!no_space(e)) return false;
    }
    return false;
  }

  // At open, after mdb_env_open: the page size, the reserve sizes and the
  // data file's descriptor. Changes nothing on disk.
  std::error_code prepare_space() {
    MDB_stat st{};
    if (auto ec = from_lmdb(mdb_env_stat(env, &st))) return ec;
    page = st.ms_psize;
    pool_pages = std::max(min_trim_pool_pages, std::min(trim_pool_bytes, opts.max_map_size / 8) / page);
    const std::size_t record_pages =
        (record_header + opts.max_record_bytes + max_subject_bytes + 16 + lmdb_page_header) / page + 1;
    tail_pages = ((record_pages + 64) * 8 + lmdb_page_header) / page + 1 + 4;
    mdb_filehandle_t h{};
    if (auto ec = from_lmdb(mdb_env_get_fd(env, &h))) return ec;
    fd = h;
    return {};
  }

  // At the end of open, once the log is known to be ours (its format
  // checked): preallocating, the file allocated on disk over the data
  // (holes LMDB never wrote included), the disk reserve and one step
  // ahead, then the map kept within the appends' limit. Best effort on a
  // full disk: the log opens with what is allocated (trims still have the
  // reserve earlier appends left). A filesystem without fallocate turns
  // preallocation off. The lock file's pages are allocated too, so that a
  // reader slot never faults on a full tmpfs.
  std::error_code preallocate() {
    if (!opts.preallocate) return {};
    struct stat file {};
    if (::fstat(fd, &file) != 0) return errc::io_error;
    const std::uint64_t size = static_cast<std::uint64_t>(file.st_size);
    const std::uint64_t have = (std::max<std::uint64_t>(size, used_bytes()) + page - 1) / page * page;
    const std::uint64_t max = std::max<std::uint64_t>(have, opts.max_map_size / page * page);
    const std::uint64_t want = std::min(max, have + std::uint64_t{disk_reserve_pages()} * page + min_prealloc_step);
    if (const int e = allocate(fd, 0, want); e == 0) {
      allocated = want;
    } else if (!no_space(e)) {
      allocated = 0;  // EOPNOTSUPP and the like: the file grows as LMDB writes it
      return {};
    } else if (allocate(fd, 0, have) == 0) {
      allocated = have;
    } else {
      allocated = std::max<std::uint64_t>(size / page * page, page);  // pages past it may be holes
    }
    const auto lock_path = opts.dir / "lock.mdb";
    if (const int lfd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC); lfd >= 0) {
      struct stat lock_file {};
      if (::fstat(lfd, &lock_file) == 0 && lock_file.st_size > 0)
        (void)allocate(lfd, 0, static_cast<std::uint64_t>(lock_file.st_size));
      ::close(lfd);
    }
    // The map starts at initial_map_size (as set before mdb_env_open) or
    // the appends' limit, whichever is smaller, and grows on demand.
    const std::size_t fit = std::max(std::min(map_size, map_limit(false)), used_bytes());
    return fit != map_size ? resize_map(fit) : std::error_code{};
  }

  // Pages of every B-tree (LMDB's free list and main tree, and ours) and
  // each one's depth, as transaction `t` sees them.
  struct tree_pages {
    std::size_t total = 0;
    std::size_t depth_free = 0, depth_main = 0, depth_streams = 0, depth_records = 0, depth_meta = 0;
  };
  std::expected<tree_pages, std::error_code> count_pages(MDB_txn* t) const {
    tree_pages out;
    std::size_t* depth[] = {&out.depth_free, &out.depth_main, &out.depth_streams, &out.depth_records,
                            &out.depth_meta, nullptr};
    const MDB_dbi dbis[] = {lmdb_free_dbi, lmdb_main_dbi, streams, records, metadata, own_retention};
    for (std::size_t i = 0; i < std::size(dbis); ++i) {
      MDB_stat st{};
      if (const int rc = mdb_stat(t, dbis[i], &st); rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
      out.total += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
      if (depth[i]) *depth[i] = st.ms_depth;
    }
    return out;
  }

  // An append's disk reserve check, in its transaction `t` just before the
  // commit: storage_full (short_of_reserve set) unless the file keeps
  // disk_reserve_pages() free for the next transaction. Of the pages the
  // file can hold (map_limit(true); LMDB never uses a map's last page), in
  // use or unusable after this commit are: the metas, every tree as it
  // will be, the pages this commit frees (LMDB reuses a freed page only
  // from the commit after next, so a trim right after could not) and the
  // free-list entry that lists them. The freed pages are bounded from
  // above: the old copies of the pages changed (per stream touched, the
  // paths to its last record and its metadata; per trimmed stream, the
  // path to its first record; the metadata and main trees' paths) and,
  // twice over, the pages retention emptied (`removed`, counted). Every
  // tree must be in count_pages, or this undercounts.
  std::error_code check_disk_reserve(MDB_txn* t, std::size_t streams_touched, std::size_t streams_trimmed,
                                     std::size_t removed) {
    auto now = count_pages(t);
    if (!now) return now.error();
    const std::size_t freed = streams_touched * (now->depth_records + now->depth_streams) +
                              streams_trimmed * now->depth_records + now->depth_meta + now->depth_main +
                              2 * removed + 8;
    const std::size_t list_bytes = 8 * (freed + 1);
    const std::size_t node_max = ((page - lmdb_page_header) / 2 & ~std::size_t{1}) - 2;
    const std::size_t list_pages =
        now->depth_free + 2 + (list_bytes + 8 + lmdb_node_header > node_max ? (list_bytes + lmdb_page_header) / page + 1 : 0);
    const std::size_t capacity = map_limit(true) / page;
    const std::size_t needed = lmdb_metas + now->total + freed + list_pages + disk_reserve_pages() + 1;
    if (needed <= capacity) return {};
    short_of_reserve = true;
    return errc::storage_full;
  }

  // A commit's error as callers see it: LMDB 0.9 reports a short write as
  // EIO, which on a nearly full filesystem is the disk filling up. Sets
  // disk_refused when the filesystem had no room.
  std::error_code commit_error(int rc) {
    if (no_space(rc)) disk_refused = true;  // storage_full; MDB_MAP_FULL (the free list's save) is not
    if (rc != EIO || fd < 0) return from_lmdb(rc);
    struct statvfs vfs {};
    if (::fstatvfs(fd, &vfs) != 0) return from_lmdb(rc);
    const std::uint64_t free = static_cast<std::uint64_t>(::geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail) * vfs.f_frsize;
    if (free >= short_write_free_bytes) return from_lmdb(rc);
    disk_refused = true;
    return errc::storage_full;
  }

  // Runs `body` in a write transaction and commits; when the map is full
  // (or an append's reserve check fails), grows the map or the allocated
  // file and runs `body` again in a fresh transaction. `reserve`: this
  // write may use the reserves (trims, retention changes). A commit the
  // filesystem refuses (no space) is not retried: LMDB aborted it, the
  // environment stays usable and nothing committed before is touched.
  template <class Body>
  std::error_code write(Body body, bool reserve) {
    for (;;) {
      std::error_code ec;
      short_of_reserve = false;
      disk_refused = false;
      {
        std::shared_lock lock(resize);
        txn t;
        if ((ec = t.begin(env, 0))) return ec;
        ec = body(t.get());
        if (!ec) ec = commit_error(t.commit_rc());
      }
      if (ec != errc::storage_full) return ec;
      if (auto grown = grow(reserve)) return grown;
    }
  }

  std::uint64_t now_ms() const { return opts.wall_clock_ms(); }

  // Accepts a log stamped with log_format_version; stamps a new (empty)
  // one. A log of another version, or with data but no version (format 1),
  // is unsupported_format.
  std::error_code check_format(MDB_txn* t) {
    MDB_val k = view(format_key), v{};
    int rc = mdb_get(t, metadata, &k, &v);
    if (rc == MDB_SUCCESS) {
      if (v.mv_size != 8) return errc::corrupted;
      return get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data)) == log_format_version ? std::error_code{}
                                                                                      : errc::unsupported_format;
    }
    if (rc != MDB_NOTFOUND) return from_lmdb(rc);
    MDB_stat st{};
    for (const MDB_dbi dbi : {streams, records, metadata}) {
      if ((rc = mdb_stat(t, dbi, &st)) != MDB_SUCCESS) return from_lmdb(rc);
      if (st.ms_entries != 0) return errc::unsupported_format;
    }
    std::byte buf[8];
    put_le<std::uint64_t>(buf, log_format_version);
    MDB_val nv{sizeof buf, buf};
    return from_lmdb(mdb_put(t, metadata, &k, &nv, 0));
  }

  // Deletes records from the front of the stream `m` describes (its
  // metadata, updated here, not stored) in transaction `t` while `more(m,
  // seq, timestamp)` says so, at most `max`. Returns how many went.
  template <class More>
  std::expected<std::size_t, std::error_code> trim_in(MDB_txn* t, meta& m, std::size_t max, More&& more) {
    std::size_t removed = 0;
    cursor c(t, records);
    if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
    record_key start(m.id, m.first);
    MDB_val k = start.val(), v{};
    int rc = mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
    while (rc == MDB_SUCCESS && removed < max) {
      const auto* kb = static_cast<const std::byte*>(k.mv_data);
      if (k.mv_size != 16 || get_be64(kb) != m.id) break;
      const std::uint64_t seq = get_be64(kb + 8);
      if (v.mv_size < record_header) return std::unexpected(make_error_code(errc::corrupted));
      const std::uint64_t ts = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data) + 8);
      if (!more(m, seq, ts)) break;
      const std::size_t stored = v.mv_size - record_header;  // subject + payload, as counted in bytes
      if ((rc = mdb_cursor_del(c.get(), 0)) != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
      m.first = seq + 1;
      m.records -= 1;
      m.bytes -= std::min<std::uint64_t>(m.bytes, stored);
      ++removed;
      // Re-seek rather than rely on the cursor's position after a delete.
      record_key next(m.id, seq + 1);
      k = next.val();
      rc = mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
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
      ec = write([&](MDB_txn* t) -> std::error_code {
        removed = 0;
        auto m = load(t, name);
        if (!m) return m.error();
        auto n = trim_in(t, *m, std::min(step, max), more);
        if (!n) return n.error();
        removed = *n;
        if (removed == 0) return {};  // nothing written: LMDB commits nothing, no fsync
        return store(t, name, *m);
      }, true);
      if (ec != errc::storage_full || step <= 1) break;
    }
    // A trim may have dipped into the reserves: give appends back only
    // their limit again, so they reuse the pages the trim freed and the
    // reserve stays for trims.
    if (auto shrink = keep_reserve()) return std::unexpected(shrink);
    if (ec) return std::unexpected(ec);
    return removed;
  }
};

sequence_log::sequence_log(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
sequence_log::~sequence_log() = default;

std::expected<std::unique_ptr<sequence_log>, std::error_code> sequence_log::open(log_options options) {
  if (options.dir.empty()) return std::unexpected(make_error_code(errc::invalid_argument));
  if (!options.wall_clock_ms)
    options.wall_clock_ms = [] {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
    };
  if (!options.random64) options.random64 = [rd = std::make_shared<std::random_device>()] {
      return (static_cast<std::uint64_t>((*rd)()) << 32) ^ (*rd)();
    };
  options.max_map_size = std::max(options.max_map_size, options.initial_map_size);
  std::error_code fs_ec;
  std::filesystem::create_directories(options.dir, fs_ec);
  if (fs_ec) return std::unexpected(make_error_code(errc::io_error));

  auto p = std::make_unique<impl>();
  p->opts = std::move(options);
  if (auto ec = from_lmdb(mdb_env_create(&p->env))) return std::unexpected(ec);
  mdb_env_set_maxdbs(p->env, 8);  // four in use; room for more without a format change
  if (auto ec = from_lmdb(mdb_env_set_mapsize(p->env, std::min(p->opts.initial_map_size, p->append_ceiling()))))
    return std::unexpected(ec);
  // NOTLS: read transactions are not tied to threads. The sync modes other
  // than `sync` commit without fsync and rely on sync().
  unsigned flags = MDB_NOTLS;
  if (p->opts.mode != durability::sync) flags |= MDB_NOSYNC;
  if (auto ec = from_lmdb(mdb_env_open(p->env, p->opts.dir.c_str(), flags, 0644))) return std::unexpected(ec);
  MDB_envinfo info{};
  mdb_env_info(p->env, &info);
  p->map_size = info.me_mapsize;  // at least what the data in an existing log occupies
  if (auto ec = p->prepare_space()) return std::unexpected(ec);

  txn t;
  if (auto ec = t.begin(p->env, 0)) return std::unexpected(ec);
  if (auto ec = from_lmdb(mdb_dbi_open(t.get(), "streams", MDB_CREATE, &p->streams))) return std::unexpected(ec);
  if (auto ec = from_lmdb(mdb_dbi_open(t.get(), "records", MDB_CREATE, &p->records))) return std::unexpected(ec);
  if (auto ec = from_lmdb(mdb_dbi_open(t.get(), "meta", MDB_CREATE, &p->metadata))) return std::unexpected(ec);
  if (auto ec = p->check_format(t.get())) return std::unexpected(ec);  // aborts: nothing written
  if (auto ec = from_lmdb(mdb_dbi_open(t.get(), "retention", MDB_CREATE, &p->own_retention)))
    return std::unexpected(ec);
  MDB_val k = view(last_stream_key), v{};
  const int rc = mdb_get(t.get(), p->metadata, &k, &v);
  if (rc == MDB_SUCCESS && v.mv_size == 8) p->last_stream_id = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
  else if (rc != MDB_NOTFOUND) return std::unexpected(rc == MDB_SUCCESS ? make_error_code(errc::corrupted) : from_lmdb(rc));
  if (auto ec = t.commit()) return std::unexpected(ec);
  if (auto ec = p->preallocate()) return std::unexpected(ec);
  return std::unique_ptr<sequence_log>(new sequence_log(std::move(p)));
}

std::expected<std::vector<std::uint64_t>, std::error_code> sequence_log::append(std::span<const append_item> items,
                                                                             std::vector<std::uint64_t>* epochs,
                                                                             append_retention* retain) {
  auto& p = *impl_;
  for (const auto& item : items)
    if (auto ec = check(item.stream, item.payload.size(), item.subject.size())) return std::unexpected(ec);
  std::vector<std::uint64_t> seqs;
  std::uint64_t last_id = p.last_stream_id;
  const auto ec = p.write([&](MDB_txn* t) -> std::error_code {
    seqs.clear();
    if (epochs) epochs->clear();
    last_id = p.last_stream_id;  // a retry starts from what is committed
    if (retain) retain->trimmed = 0;
    struct touched_stream {
      meta m;
      std::size_t appended = 0;
    };
    std::unordered_map<std::string_view, touched_stream> touched;
    const std::uint64_t now = p.now_ms();
    for (const auto& item : items) {
      auto it = touched.find(item.stream);
      if (it == touched.end()) {
        auto m = p.load(t, item.stream);
        if (!m && m.error() != errc::not_found) return m.error();
        if (!m) m = p.new_stream(last_id, now);
        it = touched.emplace(item.stream, touched_stream{*m}).first;
      }
      ++it->second.appended;
      meta& m = it->second.m;
      const std::uint64_t seq = ++m.last;
      record_key key(m.id, seq);
      const std::size_t subject = item.subject.size();
      const std::size_t stored = subject + item.payload.size();
      MDB_val k = key.val(), v{record_header + stored, nullptr};
      // Keys of the newest stream sort after every other key: append at the
      // end of the B-tree without a search.
      const unsigned flags = MDB_RESERVE | (m.id == last_id ? MDB_APPEND : 0u);
      if (const int rc = mdb_put(t, p.records, &k, &v, flags); rc != MDB_SUCCESS) return from_lmdb(rc);
      // Written in place into the reserved value; the checksum last, over
      // what was written.
      auto* out = static_cast<std::byte*>(v.mv_data);
      put_le<std::uint64_t>(out + 8, now);
      put_le<std::uint32_t>(out + 16, static_cast<std::uint32_t>(subject));
      put_le<std::uint32_t>(out + 20, 0);
      if (subject != 0) std::memcpy(out + record_header, item.subject.data(), subject);
      if (!item.payload.empty()) std::memcpy(out + record_header + subject, item.payload.data(), item.payload.size());
      put_le<std::uint64_t>(out, checksum(seq, now, out, v.mv_size));
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
      auto before = p.count_pages(t);
      if (!before) return before.error();
      for (auto& [name, ts] : touched) {
        auto own = p.load_retention(t, name);
        if (!own) return own.error();
        const retention& limits = *own ? **own : retain->defaults;
        if (!has_limits(limits)) continue;
        auto n = p.trim_in(t, ts.m, ts.appended + retain->slack, over_limits(limits, now));
        if (!n) return n.error();
        trimmed += *n;
        streams_trimmed += *n > 0 ? 1 : 0;
      }
      auto after = p.count_pages(t);
      if (!after) return after.error();
      removed_pages = before->total > after->total ? before->total - after->total : 0;
    }
    for (const auto& [name, ts] : touched)
      if (auto e = p.store(t, name, ts.m)) return e;
    if (last_id != p.last_stream_id) {
      std::byte buf[8];
      put_le<std::uint64_t>(buf, last_id);
      MDB_val k = view(last_stream_key), v{sizeof buf, buf};
      if (const int rc = mdb_put(t, p.metadata, &k, &v, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
    }
    if (auto e = p.check_disk_reserve(t, touched.size(), streams_trimmed, removed_pages)) return e;
    if (retain) retain->trimmed = trimmed;
    return {};
  }, false);
  if (ec) return std::unexpected(ec);
  p.last_stream_id = last_id;
  return seqs;
}

std::expected<std::uint64_t, std::error_code> sequence_log::append(std::string_view stream,
                                                                   std::span<const std::byte> payload,
                                                                   std::span<const std::byte> subject) {
  const append_item item{stream, payload, subject};
  auto r = append(std::span(&item, 1));
  if (!r) return std::unexpected(r.error());
  return r->front();
}

std::expected<read_result, std::error_code> sequence_log::read(std::string_view stream, std::uint64_t from,
                                                               std::size_t max_count, std::size_t max_bytes) {
  auto& p = *impl_;
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.load(t.get(), stream);
  if (!m) return std::unexpected(m.error());
  if (from < m->first) return std::unexpected(make_error_code(errc::trimmed));
  read_result out;
  out.epoch = m->epoch;
  out.first_seq = m->first;
  out.last_seq = m->last;
  if (from > m->last || max_count == 0) return out;
  cursor c(t.get(), p.records);
  if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
  record_key start(m->id, from);
  MDB_val k = start.val(), v{};
  std::size_t bytes = 0;
  int rc = mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
  for (std::uint64_t expect = from; rc == MDB_SUCCESS && out.records.size() < max_count; ++expect) {
    const auto* kb = static_cast<const std::byte*>(k.mv_data);
    if (k.mv_size != 16 || get_be64(kb) != m->id) break;
    const std::uint64_t seq = get_be64(kb + 8);
    // Sequences are contiguous: a hole is damage, not a gap to skip.
    if (seq != expect || v.mv_size < record_header) return std::unexpected(make_error_code(errc::corrupted));
    const auto* vb = static_cast<const std::byte*>(v.mv_data);
    const std::size_t size = v.mv_size - record_header;  // subject + payload
    if (!out.records.empty() && bytes + size > max_bytes) break;
    const std::uint64_t ts = get_le<std::uint64_t>(vb + 8);
    if (get_le<std::uint64_t>(vb) != checksum(seq, ts, vb, v.mv_size)) return std::unexpected(make_error_code(errc::corrupted));
    // Checksummed, so only a writer bug could get these wrong; never read
    // past the value all the same.
    const std::size_t subject = get_le<std::uint32_t>(vb + 16);
    if (subject > size || get_le<std::uint32_t>(vb + 20) != 0) return std::unexpected(make_error_code(errc::corrupted));
    const auto* body = vb + record_header;
    out.records.push_back({seq, ts, std::vector<std::byte>(body + subject, body + size),
                           std::vector<std::byte>(body, body + subject)});
    bytes += size;
    rc = mdb_cursor_get(c.get(), &k, &v, MDB_NEXT);
  }
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return std::unexpected(from_lmdb(rc));
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::info(std::string_view stream) const {
  auto& p = *impl_;
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.load(t.get(), stream);
  if (!m) return std::unexpected(m.error());
  return p.describe(t.get(), stream, *m);
}

std::expected<std::vector<stream_info>, std::error_code> sequence_log::list() const {
  return list({}, std::numeric_limits<std::size_t>::max());
}

std::expected<std::vector<stream_info>, std::error_code> sequence_log::list(std::string_view prefix,
                                                                            std::size_t max_count, bool* more) const {
  auto& p = *impl_;
  if (more) *more = false;
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  cursor c(t.get(), p.streams);
  if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
  std::vector<stream_info> out;
  // Names sort bytewise: those with the prefix are one range from it on.
  MDB_val k = view(prefix), v{};
  int rc = mdb_cursor_get(c.get(), &k, &v, prefix.empty() ? MDB_FIRST : MDB_SET_RANGE);
  for (; rc == MDB_SUCCESS; rc = mdb_cursor_get(c.get(), &k, &v, MDB_NEXT)) {
    const std::string_view name{static_cast<const char*>(k.mv_data), k.mv_size};
    if (!name.starts_with(prefix)) break;
    if (out.size() == max_count) {
      if (more) *more = true;
      break;
    }
    auto m = meta::decode(v);
    if (!m) return std::unexpected(m.error());
    auto info = p.describe(t.get(), name, *m);
    if (!info) return std::unexpected(info.error());
    out.push_back(std::move(*info));
  }
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return std::unexpected(from_lmdb(rc));
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::set_retention(std::string_view stream,
                                                                        const retention& limits) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  if (limits.max_age.count() < 0) return std::unexpected(make_error_code(errc::invalid_argument));
  std::byte value[retention_size];
  put_le<std::uint64_t>(value, limits.max_records);
  put_le<std::uint64_t>(value + 8, static_cast<std::uint64_t>(limits.max_age.count()));
  put_le<std::uint64_t>(value + 16, limits.max_bytes);
  stream_info out;
  std::uint64_t last_id = p.last_stream_id;
  // A tiny write that may use the trim reserve: on a full log, setting a
  // retention is how an operator makes room again.
  const auto ec = p.write([&](MDB_txn* t) -> std::error_code {
    last_id = p.last_stream_id;  // a retry starts from what is committed
    auto m = p.load_or_create(t, stream, last_id);
    if (!m) return m.error();
    MDB_val k = view(stream), v{sizeof value, value};
    if (const int rc = mdb_put(t, p.own_retention, &k, &v, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
    out = m->info(stream);
    out.own_retention = limits;
    return {};
  }, true);
  const auto shrink = p.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  p.last_stream_id = last_id;
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::clear_retention(std::string_view stream) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  stream_info out;
  const auto ec = p.write([&](MDB_txn* t) -> std::error_code {
    auto m = p.load(t, stream);
    if (!m) return m.error();
    MDB_val k = view(stream);
    if (const int rc = mdb_del(t, p.own_retention, &k, nullptr); rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
      return from_lmdb(rc);
    out = m->info(stream);
    return {};
  }, true);
  const auto shrink = p.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  return out;
}

std::expected<std::size_t, std::error_code> sequence_log::trim(std::string_view stream, std::uint64_t before_seq,
                                                               std::size_t max_records) {
  return impl_->trim_front(stream, max_records,
                           [&](const meta&, std::uint64_t seq, std::uint64_t) { return seq < before_seq; });
}

std::expected<std::size_t, std::error_code> sequence_log::enforce(std::string_view stream, const retention& limits,
                                                                  std::size_t max_records) {
  return impl_->trim_front(stream, max_records, over_limits(limits, impl_->now_ms()));
}

std::error_code sequence_log::check(std::string_view stream, std::size_t payload_size,
                                    std::size_t subject_size) const noexcept {
  const auto& o = impl_->opts;
  if (stream.empty() || stream.size() > o.max_stream_name || payload_size > o.max_record_bytes ||
      subject_size > max_subject_bytes)
    return errc::invalid_argument;
  return {};
}

std::error_code sequence_log::sync() { return from_lmdb(mdb_env_sync(impl_->env, 1)); }

std::size_t sequence_log::map_size() const noexcept {
  std::shared_lock lock(impl_->resize);
  return impl_->map_size;
}

durability sequence_log::mode() const noexcept { return impl_->opts.mode; }

sequence_log::space_info sequence_log::space() const noexcept {
  return {impl_->allocated, std::uint64_t{impl_->disk_reserve_pages()} * impl_->page};
}

}  // namespace switchyard::storage

#include "storage/sequence_log.hpp"

#include "storage/data_file.hpp"
#include "storage/lmdb_guard.hpp"
#include "storage/raw_access.hpp"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace switchyard::storage {

namespace {

// Record value: checksum (u64), timestamp (u64), destination length (u32),
// reserved (u32, 0), destination, payload; all little-endian.
constexpr std::size_t record_header = 24;
constexpr std::size_t checksummed_from = 16;  // the checksum covers value[16, end)
constexpr std::size_t meta_size = 7 * 8;
constexpr std::string_view last_stream_key = "last_stream_id";
constexpr std::string_view format_key = "format_version";

static_assert(max_destination_bytes <= UINT32_MAX, "the destination length is a u32 on disk");
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
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);  // one load, not one per byte
    return v;
  }
  for (std::size_t i = 0; i < sizeof v; ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}
void put_be64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (56 - 8 * i));
}
std::uint64_t get_be64(const std::byte* p) {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
    return std::byteswap(v);
  }
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint64_t>(p[i]);
  return v;
}

// The checksum of a record value of `size` bytes (at least record_header):
// hashes everything from checksummed_from on (destination length, reserved,
// destination, payload) and binds it to the sequence and timestamp through the
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

constexpr std::size_t record_key_size = 16;

// Fills `diag` (if given) for an error about `stream` (and record `seq`).
void report(diagnostics* diag, std::string_view stream, std::uint64_t seq, std::string message) {
  if (!diag) return;
  diag->stream = std::string(stream);
  diag->seq = seq;
  diag->message = std::move(message);
}

// "stream 'orders'" / "stream 'orders', record 8", for messages.
std::string where(std::string_view stream, std::uint64_t seq = 0) {
  std::string out = "stream '" + std::string(stream) + "'";
  if (seq != 0) out += ", record " + std::to_string(seq);
  return out;
}

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

  // ---- Checks against damage (docs/storage.md, "Damage") ----
  int lock_fd = -1;           // <dir>/switchyard.lock, flock'ed while open; -1 when read-only
  int data_fd = -1;           // data.mdb: LMDB's own descriptor (mdb_env_get_fd)
  std::size_t page_size = 0;  // LMDB's, a power of two
  unsigned page_shift = 0;    // log2(page_size)
  bool has_retention_db = true;  // false: a read-only open of a log from before "retention"
  // The LMDB library is 0.9, whose page layout (lmdb_layout) the record
  // checks use; with another version only the bounds are checked.
  bool know_layout = false;
  // Where LMDB mapped data.mdb (the address of file offset 0). LMDB 0.9
  // does not say (me_mapaddr is only the MDB_FIXEDMAP hint), so it is
  // looked up in /proc/self/maps from the first pointer into the map LMDB
  // hands out, and again after the map moved (resize_map clears it). 0: not
  // known yet.
  mutable std::atomic<std::uintptr_t> map_base{0};
  mutable std::mutex map_lookup;
  mutable bool map_unknown = false;  // /proc/self/maps cannot be read: no bounds checks (under map_lookup)
  // data.mdb's size at the last look; it only grows while the log is open.
  mutable std::atomic<std::uint64_t> file_bytes{0};
  // Flushes to disk so far (sequence_log::fsyncs).
  std::atomic<std::uint64_t> fsyncs{0};

  ~impl() {
    if (env) mdb_env_close(env);
    if (lock_fd >= 0) ::close(lock_fd);  // releases the lock
  }

  enum class located { map, elsewhere, unknown };
  // Looks up the mapping holding `p`, a pointer LMDB handed out, in
  // /proc/self/maps: if it is a mapping of data.mdb, `base` becomes the
  // address of file offset 0 (and is kept in map_base); else `p` is in a
  // page a write transaction copied or made (LMDB keeps those on the heap).
  located locate_map(std::uintptr_t p, std::uintptr_t& base) const {
    std::lock_guard guard(map_lookup);
    if ((base = map_base.load(std::memory_order_acquire)) != 0) return located::map;
    if (map_unknown) return located::unknown;
    FILE* f = std::fopen("/proc/self/maps", "re");
    if (!f) {
      map_unknown = true;
      return located::unknown;
    }
    char* line = nullptr;
    std::size_t cap = 0;
    while (::getline(&line, &cap, f) > 0) {
      unsigned long start = 0, end = 0, offset = 0;
      int path_at = 0;
      if (std::sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &offset, &path_at) < 3) continue;
      if (p < start || p >= end) continue;
      if (std::string_view(line + path_at).find("data.mdb") != std::string_view::npos && start >= offset)
        base = start - offset;
      break;
    }
    std::free(line);
    std::fclose(f);
    if (base == 0) return located::elsewhere;
    map_base.store(base, std::memory_order_release);
    return located::map;
  }

  // Looks the map up at once, from a value read in a read transaction (so
  // from the map, not from a write transaction's heap copies): after open
  // and after the map moved. Without a value to go by (an empty log), the
  // first pointer a read hands out does it. Caller holds `resize`
  // exclusively, or is open().
  void locate_map_now() {
    txn t;
    if (t.begin(env, MDB_RDONLY)) return;
    MDB_val k = view(format_key), v{};
    std::uintptr_t base = 0;
    if (lmdb_guard::get(t.get(), metadata, &k, &v) == MDB_SUCCESS) locate_map(reinterpret_cast<std::uintptr_t>(v.mv_data), base);
  }

  // data.mdb's size now (fstat), kept in file_bytes.
  std::uint64_t refresh_file_size() const {
    struct stat st {};
    if (::fstat(data_fd, &st) != 0) return file_bytes.load(std::memory_order_relaxed);
    const auto now = static_cast<std::uint64_t>(st.st_size);
    std::uint64_t seen = file_bytes.load(std::memory_order_relaxed);
    while (seen < now && !file_bytes.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
    return std::max(seen, now);
  }

  // Whether [ptr, ptr + n), from LMDB, lies inside the map and inside
  // data.mdb as it is now; nothing of it is read. No system call unless
  // the range passes the size last seen (the file grows): then one fstat.
  // A pointer outside the map is into a page a write transaction copied
  // (LMDB keeps those on the heap; read transactions only see the map):
  // fine if no longer than a page. The caller holds `resize`.
  bool readable(const void* ptr, std::size_t n) const {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    std::uintptr_t base = map_base.load(std::memory_order_acquire);
    if (base == 0) {
      const auto where = locate_map(p, base);
      if (where == located::unknown) return true;  // cannot tell: LMDB's word
      if (where == located::elsewhere) return n <= page_size;
    }
    if (p < base || p - base >= map_size) return n <= page_size;
    const std::uint64_t off = p - base;
    if (n > map_size - off) return false;
    const std::uint64_t end = off + n;
    return end <= file_bytes.load(std::memory_order_relaxed) || end <= refresh_file_size();
  }

  // Whether `ptr` (from LMDB) points into the map, map_base known.
  bool in_map(const void* ptr) const {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    const std::uintptr_t base = map_base.load(std::memory_order_acquire);
    return base != 0 && p >= base && p - base < map_size;
  }

  // A record as a read transaction got it from LMDB (so from the map),
  // checked before any byte of it is read: the key 16 bytes inside the
  // file; the value at least a header, inside the map and the file, and
  // (LMDB 0.9) where LMDB stores values: in the key's page, or on overflow
  // pages whose header agrees with its length (a record failing this must
  // not be deleted either: LMDB would move or free bytes by the damaged
  // length). Returns what is wrong, or nullptr.
  const char* check_record(const MDB_val& k, const MDB_val& v) const {
    if (k.mv_size != record_key_size) return "its key is damaged";
    if (v.mv_size < record_header) return "its value is shorter than a record header";
    // The common case first (a few compares per record, no division): a
    // value in its key's page, so key and value are one range of a page.
    const std::uintptr_t base = map_base.load(std::memory_order_acquire);
    const auto kp = reinterpret_cast<std::uintptr_t>(k.mv_data), vp = reinterpret_cast<std::uintptr_t>(v.mv_data);
    if (know_layout && base != 0 && kp >= base && kp - base < map_size && vp > kp) {
      const std::uint64_t koff = kp - base, end = vp - base + v.mv_size;
      if ((end - 1) >> page_shift == koff >> page_shift)
        return end <= file_bytes.load(std::memory_order_relaxed) || end <= refresh_file_size()
                   ? nullptr
                   : "its value lies outside the data file (a damaged length or page number)";
    }
    if (!readable(k.mv_data, k.mv_size)) return "its key is damaged";
    if (!readable(v.mv_data, v.mv_size))
      return "its value lies outside the data file (a damaged length or page number)";
    if (!know_layout || base == 0) return nullptr;
    if (!in_map(k.mv_data) || !in_map(v.mv_data)) return "it lies outside LMDB's map";
    namespace L = lmdb_layout;
    const std::uint64_t koff = reinterpret_cast<std::uintptr_t>(k.mv_data) - base;
    const std::uint64_t voff = reinterpret_cast<std::uintptr_t>(v.mv_data) - base;
    if (voff / page_size == koff / page_size)  // in the key's node
      return (voff + v.mv_size - 1) / page_size == koff / page_size ? nullptr
                                                                    : "its value runs past its page (a damaged length)";
    if (voff % page_size != L::page_header) return "its value is misplaced (a damaged page number)";
    const auto* page = reinterpret_cast<const std::byte*>(base + voff - L::page_header);
    if (!(get_le<std::uint16_t>(page + L::flags_offset) & L::p_overflow) ||
        get_le<std::uint32_t>(page + L::pages_offset) != L::overflow_pages(v.mv_size, page_size))
      return "its overflow pages disagree with its length";
    return nullptr;
  }

  // LMDB 0.9: whether page `pgno` is a records leaf whose every node LMDB
  // can move, merge and delete by what it stores: nodes inside the page
  // with 16-byte keys, values inside it or on overflow pages whose header
  // agrees with their length. A trim checks the pages it deletes from and
  // their neighbours (which a delete may merge with) first. Reads only the
  // page and overflow headers; nullptr when fine or when the layout or the
  // map is unknown.
  const char* check_leaf(std::uint64_t pgno) const {
    namespace L = lmdb_layout;
    const std::uintptr_t base = map_base.load(std::memory_order_acquire);
    if (!know_layout || base == 0) return nullptr;
    if (pgno > (map_size / page_size) || !readable(reinterpret_cast<const void*>(base + pgno * page_size), page_size))
      return "a leaf page lies outside the data file";
    const auto* pg = reinterpret_cast<const std::byte*>(base + pgno * page_size);
    if (get_le<std::uint64_t>(pg) != pgno || !(get_le<std::uint16_t>(pg + L::flags_offset) & L::p_leaf))
      return "a leaf page's header is damaged";
    const std::size_t lower = get_le<std::uint16_t>(pg + 12), upper = get_le<std::uint16_t>(pg + 14);
    if (lower < L::page_header || lower > upper || upper > page_size) return "a leaf page's node area is damaged";
    for (std::size_t i = 0; i < (lower - L::page_header) / 2; ++i) {
      const std::size_t at = get_le<std::uint16_t>(pg + L::page_header + 2 * i);
      if (at < upper || at + L::node_header + record_key_size > page_size) return "a node lies outside its page";
      const auto* node = pg + at;
      const std::uint64_t size = get_le<std::uint16_t>(node) | std::uint64_t{get_le<std::uint16_t>(node + 2)} << 16;
      if (get_le<std::uint16_t>(node + 6) != record_key_size) return "a node's key has the wrong size";
      const std::size_t data_at = at + L::node_header + record_key_size;
      if (!(get_le<std::uint16_t>(node + 4) & L::f_bigdata)) {
        if (data_at + size > page_size) return "a node's value runs past its page";
        continue;
      }
      if (data_at + 8 > page_size) return "a node lies outside its page";
      const auto ov = get_le<std::uint64_t>(pg + data_at);
      const std::uint64_t pages = L::overflow_pages(size, page_size);
      if (ov < 2 || ov > map_size / page_size || pages > map_size / page_size - ov ||
          !readable(reinterpret_cast<const void*>(base + ov * page_size), pages * page_size))
        return "a node's overflow pages lie outside the data file";
      const auto* op = reinterpret_cast<const std::byte*>(base + ov * page_size);
      if (!(get_le<std::uint16_t>(op + L::flags_offset) & L::p_overflow) || get_le<std::uint32_t>(op + L::pages_offset) != pages)
        return "a node's overflow pages disagree with its length";
    }
    return nullptr;
  }

  // The page of a pointer into the map (map_base known).
  std::uint64_t page_of(const void* p) const {
    return (reinterpret_cast<std::uintptr_t>(p) - map_base.load(std::memory_order_acquire)) / page_size;
  }

  // Before a trim deletes from the leaf holding `key` (read in `t`, a read
  // transaction): that leaf and the leaves before and after it in key
  // order (the siblings LMDB may merge it with) pass check_leaf. Returns
  // what is wrong, or nullptr.
  const char* check_trim_pages(MDB_txn* t, const MDB_val& key) const {
    namespace L = lmdb_layout;
    if (!know_layout || !in_map(key.mv_data)) return nullptr;
    const std::uint64_t here = page_of(key.mv_data);
    if (const char* why = check_leaf(here)) return why;
    const auto* pg = reinterpret_cast<const std::byte*>(map_base.load(std::memory_order_acquire) + here * page_size);
    const std::size_t nodes = (get_le<std::uint16_t>(pg + 12) - L::page_header) / 2;
    if (nodes == 0) return nullptr;
    cursor c(t, records);
    if (c.status() != MDB_SUCCESS) return "LMDB cannot open a cursor";
    for (const auto& [index, step] : {std::pair{std::size_t{0}, MDB_PREV}, {nodes - 1, MDB_NEXT}}) {
      // The first (last) key of the page, then the one before (after) it.
      MDB_val k{record_key_size, const_cast<std::byte*>(pg + get_le<std::uint16_t>(pg + L::page_header + 2 * index) +
                                                         L::node_header)},
          v{};
      int rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_SET_KEY);
      if (rc == MDB_SUCCESS) rc = lmdb_guard::cursor_get(c.get(), &k, &v, step);
      if (rc == MDB_NOTFOUND) continue;
      if (rc != MDB_SUCCESS || !in_map(k.mv_data)) return "LMDB cannot step to a neighbouring page";
      if (const char* why = check_leaf(page_of(k.mv_data))) return why;
    }
    return nullptr;
  }

  // A stream's metadata, checked: inside the file, of the right size, and
  // consistent (sequences first..last hold `records` records). Errors:
  // not_found, corrupted (`diag` says what).
  std::expected<meta, std::error_code> load(MDB_txn* t, std::string_view name, diagnostics* diag = nullptr) const {
    MDB_val k = view(name), v{};
    const int rc = lmdb_guard::get(t, streams, &k, &v);
    if (rc != MDB_SUCCESS) {
      const auto ec = from_lmdb(rc);
      if (ec == errc::corrupted) report(diag, name, 0, where(name) + ": LMDB reports " + mdb_strerror(rc));
      return std::unexpected(ec);
    }
    return decode_meta(name, v, diag);
  }

  std::expected<meta, std::error_code> decode_meta(std::string_view name, const MDB_val& v, diagnostics* diag) const {
    if (!readable(v.mv_data, v.mv_size)) {
      report(diag, name, 0, where(name) + ": its metadata lies outside the data file");
      return std::unexpected(make_error_code(errc::corrupted));
    }
    auto m = meta::decode(v);
    if (!m) {
      report(diag, name, 0, where(name) + ": its metadata has the wrong size (" + std::to_string(v.mv_size) + " bytes)");
      return m;
    }
    const bool consistent = m->records == 0 ? m->first == m->last + 1
                                            : m->first >= 1 && m->first <= m->last && m->records == m->last - m->first + 1;
    if (!consistent) {
      report(diag, name, 0,
             where(name) + ": its metadata is inconsistent (first " + std::to_string(m->first) + ", last " +
                 std::to_string(m->last) + ", " + std::to_string(m->records) + " records)");
      return std::unexpected(make_error_code(errc::corrupted));
    }
    return m;
  }

  std::error_code store(MDB_txn* t, std::string_view name, const meta& m) {
    std::byte buf[meta_size];
    m.encode(buf);
    MDB_val k = view(name), v{sizeof buf, buf};
    return from_lmdb(mdb_put(t, streams, &k, &v, 0));
  }

  // The stream's own retention limits, nullopt if it has none.
  std::expected<std::optional<retention>, std::error_code> load_retention(MDB_txn* t, std::string_view name,
                                                                          diagnostics* diag = nullptr) const {
    if (!has_retention_db) return std::optional<retention>{};
    MDB_val k = view(name), v{};
    const int rc = lmdb_guard::get(t, own_retention, &k, &v);
    if (rc == MDB_NOTFOUND) return std::optional<retention>{};
    if (rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
    if (!readable(v.mv_data, v.mv_size)) {
      report(diag, name, 0, where(name) + ": its retention entry lies outside the data file");
      return std::unexpected(make_error_code(errc::corrupted));
    }
    auto r = decode_retention(v);
    if (!r) {
      report(diag, name, 0, where(name) + ": its retention entry is damaged");
      return std::unexpected(r.error());
    }
    return std::optional<retention>{*r};
  }

  // A stream's metadata and its own retention, as info() reports them.
  std::expected<stream_info, std::error_code> describe(MDB_txn* t, std::string_view name, const meta& m,
                                                       diagnostics* diag = nullptr) const {
    auto own = load_retention(t, name, diag);
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
    map_base.store(0, std::memory_order_release);  // the map may have moved: look it up again
    locate_map_now();
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
        (record_header + opts.max_record_bytes + max_destination_bytes + 16 + lmdb_page_header) / page + 1;
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
    if (!opts.preallocate || opts.read_only) return {};  // a read-only open writes nothing
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
        if (!ec) ec = commit_error(commit_counted(t));
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
    int rc = lmdb_guard::get(t, metadata, &k, &v);
    if (rc == MDB_SUCCESS) {
      if (v.mv_size != 8 || !readable(v.mv_data, v.mv_size)) return errc::corrupted;
      return get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data)) == log_format_version ? std::error_code{}
                                                                                      : errc::unsupported_format;
    }
    if (rc != MDB_NOTFOUND) return from_lmdb(rc);
    MDB_stat st{};
    for (const MDB_dbi dbi : {streams, records, metadata}) {
      if ((rc = mdb_stat(t, dbi, &st)) != MDB_SUCCESS) return from_lmdb(rc);
      if (st.ms_entries != 0) return errc::unsupported_format;
    }
    if (opts.read_only) return {};  // an empty log, never stamped: nothing to write here
    std::byte buf[8];
    put_le<std::uint64_t>(buf, log_format_version);
    MDB_val nv{sizeof buf, buf};
    return from_lmdb(mdb_put(t, metadata, &k, &nv, 0));
  }

  // Deletes records from the front of the stream `m` describes (its
  // metadata, updated here, not stored) in transaction `t` while `more(m,
  // seq, timestamp)` says so, at most `max`. Returns how many went.
  template <class More>
  std::expected<std::size_t, std::error_code> trim_in(MDB_txn* t, meta& m, std::size_t max,
                                                     std::uint64_t committed_last, More&& more) {
    std::size_t removed = 0;
    cursor c(t, records);
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
    cursor bc(before.get(), records);
    if (bc.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(bc.status()));
    MDB_val bk = start.val(), bv{};
    int brc = m.first <= committed_last ? lmdb_guard::cursor_get(bc.get(), &bk, &bv, MDB_SET_RANGE) : MDB_NOTFOUND;
    std::uint64_t checked_page = 0;  // its records and neighbours passed check_trim_pages (0: none yet)
    while (rc == MDB_SUCCESS && removed < max) {
      const bool committed = m.first <= committed_last;
      const std::byte* kb = nullptr;
      if (committed) {
        if (brc != MDB_SUCCESS) return std::unexpected(brc == MDB_NOTFOUND ? make_error_code(errc::corrupted) : from_lmdb(brc));
        kb = static_cast<const std::byte*>(bk.mv_data);
        if (bk.mv_size != record_key_size || !readable(kb, record_key_size) || k.mv_size != record_key_size ||
            std::memcmp(k.mv_data, kb, record_key_size) != 0)
          return std::unexpected(make_error_code(errc::corrupted));
        if (get_be64(kb) != m.id) break;
        // A damaged record (or page) stops the trim: what went before it
        // is trimmed, the next trim starts at it and fails.
        const bool new_page = in_map(bk.mv_data) && page_of(bk.mv_data) != checked_page;
        if (check_record(bk, bv) || (new_page && check_trim_pages(before.get(), bk))) {
          if (removed == 0) return std::unexpected(make_error_code(errc::corrupted));
          break;
        }
        if (new_page) checked_page = page_of(bk.mv_data);
        v = bv;  // the same record, as read from the map
      } else {
        if (k.mv_size != record_key_size) return std::unexpected(make_error_code(errc::corrupted));
        kb = static_cast<const std::byte*>(k.mv_data);
        if (get_be64(kb) != m.id) break;
      }
      const std::uint64_t seq = get_be64(kb + 8);
      // The stream's records are first..last, every one there: a record
      // after a hole (or past last) is not the front one. Trimming it
      // would leave metadata whose count no longer fits first..last (the
      // stream unreadable). A missing record is damage: stop before it.
      if (seq != m.first) {
        if (removed == 0 && m.first <= m.last) return std::unexpected(make_error_code(errc::corrupted));
        break;
      }
      if (v.mv_size < record_header) return std::unexpected(make_error_code(errc::corrupted));
      const std::uint64_t ts = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data) + 8);
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
      ec = write([&](MDB_txn* t) -> std::error_code {
        removed = 0;
        auto m = load(t, name);
        if (!m) return m.error();
        auto n = trim_in(t, *m, std::min(step, max), m->last, more);
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

std::expected<std::unique_ptr<sequence_log>, std::error_code> sequence_log::open(log_options options,
                                                                                diagnostics* diag) {
  const auto fail = [diag](std::error_code ec, std::string message) {
    report(diag, {}, 0, std::move(message));
    return std::unexpected(ec);
  };
  if (options.dir.empty()) return fail(errc::invalid_argument, "no log folder given");
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
  const auto data_path = options.dir / "data.mdb";
  std::error_code fs_ec;
  if (options.read_only) {
    if (!std::filesystem::exists(data_path, fs_ec))
      return fail(errc::not_found, "no sequence log in " + options.dir.string() + " (no data.mdb)");
  } else {
    std::filesystem::create_directories(options.dir, fs_ec);
    if (fs_ec) return fail(errc::io_error, "cannot create " + options.dir.string() + ": " + fs_ec.message());
  }

  auto p = std::make_unique<impl>();
  p->opts = std::move(options);
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
  std::size_t map = std::min(o.initial_map_size, p->append_ceiling());
  if (o.read_only) {
    // Room for what a writer next door adds while we read.
    const auto size = std::filesystem::file_size(data_path, fs_ec);
    map = std::max(o.max_map_size, fs_ec ? std::size_t{0} : static_cast<std::size_t>(size) * 2);
  }
  if (auto ec = from_lmdb(mdb_env_set_mapsize(p->env, map))) return fail(ec, "cannot size the LMDB map");
  // NOTLS: read transactions are not tied to threads. The sync modes other
  // than `sync` commit without fsync and rely on sync().
  unsigned flags = MDB_NOTLS;
  if (o.read_only) flags |= MDB_RDONLY;
  else if (o.mode != durability::sync) flags |= MDB_NOSYNC;
  if (const int rc = mdb_env_open(p->env, o.dir.c_str(), flags, 0644); rc != MDB_SUCCESS)
    return fail(from_lmdb(rc), std::string("LMDB cannot open ") + data_path.string() + ": " + mdb_strerror(rc));
  MDB_envinfo info{};
  mdb_env_info(p->env, &info);
  p->map_size = info.me_mapsize;  // at least what the data in an existing log occupies
  MDB_stat env_stat{};
  mdb_env_stat(p->env, &env_stat);
  p->page_size = env_stat.ms_psize;
  p->page_shift = static_cast<unsigned>(std::countr_zero(p->page_size));
  int major = 0, minor = 0;
  mdb_version(&major, &minor, nullptr);
  p->know_layout = major == 0 && minor == 9 && p->page_size > lmdb_layout::page_header;
  if (mdb_env_get_fd(p->env, &p->data_fd) != MDB_SUCCESS) return fail(errc::internal, "LMDB has no data file");
  // A writer next door may have committed since the check above.
  if ((info.me_last_pgno + 1) * p->page_size > p->refresh_file_size()) {
    std::string detail;
    if (auto ec = data_file::check(data_path, &detail)) return fail(ec, detail);
  }
  if (auto ec = p->prepare_space()) return std::unexpected(ec);

  txn t;
  if (auto ec = t.begin(p->env, o.read_only ? MDB_RDONLY : 0))
    return fail(ec, std::string("cannot begin a transaction: ") + ec.message());
  const unsigned create = o.read_only ? 0 : MDB_CREATE;
  for (const auto& [name, dbi] : {std::pair{"streams", &p->streams}, {"records", &p->records}, {"meta", &p->metadata}}) {
    const int rc = lmdb_guard::dbi_open(t.get(), name, create, dbi);
    if (rc == MDB_NOTFOUND) return fail(errc::not_found, "no sequence log in " + o.dir.string());
    if (rc != MDB_SUCCESS)
      return fail(from_lmdb(rc), std::string("cannot open the \"") + name + "\" database: " + mdb_strerror(rc));
  }
  if (auto ec = p->check_format(t.get())) {  // aborts: nothing written
    return fail(ec, ec == errc::unsupported_format
                        ? "this build reads format " + std::to_string(log_format_version)
                        : "the log's format stamp is damaged");
  }
  if (const int rc = lmdb_guard::dbi_open(t.get(), "retention", create, &p->own_retention);
      rc == MDB_NOTFOUND && o.read_only)
    p->has_retention_db = false;
  else if (rc != MDB_SUCCESS)
    return fail(from_lmdb(rc), std::string("cannot open the \"retention\" database: ") + mdb_strerror(rc));
  MDB_val k = view(last_stream_key), v{};
  const int rc = lmdb_guard::get(t.get(), p->metadata, &k, &v);
  if (rc == MDB_SUCCESS && v.mv_size == 8 && p->readable(v.mv_data, 8))
    p->last_stream_id = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
  else if (rc == MDB_SUCCESS)
    return fail(errc::corrupted, "the last stream id in the \"meta\" database is damaged");
  else if (rc != MDB_NOTFOUND)
    return fail(from_lmdb(rc), std::string("cannot read the last stream id: ") + mdb_strerror(rc));
  if (auto ec = from_lmdb(p->commit_counted(t))) return fail(ec, std::string("cannot commit: ") + ec.message());
  p->locate_map_now();
  if (auto ec = p->preallocate()) return fail(ec, std::string("cannot reserve disk space: ") + ec.message());
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
      const std::size_t destination = item.destination.size();
      const std::size_t stored = destination + item.payload.size();
      MDB_val k = key.val(), v{record_header + stored, nullptr};
      // Keys of the newest stream sort after every other key: append at the
      // end of the B-tree without a search.
      const unsigned flags = MDB_RESERVE | (m.id == last_id ? MDB_APPEND : 0u);
      if (const int rc = mdb_put(t, p.records, &k, &v, flags); rc != MDB_SUCCESS) return from_lmdb(rc);
      // Written in place into the reserved value; the checksum last, over
      // what was written.
      auto* out = static_cast<std::byte*>(v.mv_data);
      put_le<std::uint64_t>(out + 8, now);
      put_le<std::uint32_t>(out + 16, static_cast<std::uint32_t>(destination));
      put_le<std::uint32_t>(out + 20, 0);
      if (destination != 0) std::memcpy(out + record_header, item.destination.data(), destination);
      if (!item.payload.empty()) std::memcpy(out + record_header + destination, item.payload.data(), item.payload.size());
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
        auto n = p.trim_in(t, ts.m, ts.appended + retain->slack, ts.m.last - ts.appended, over_limits(limits, now));
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
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.load(t.get(), stream, diag);
  if (!m) return std::unexpected(m.error());
  if (from < m->first) return std::unexpected(make_error_code(errc::trimmed));
  read_result out;
  out.epoch = m->epoch;
  out.first_seq = m->first;
  out.last_seq = m->last;
  // (records == 0: empty, also when first = last + 1 wrapped to 0 after
  // sequence 2^64 - 1.)
  if (from > m->last || m->records == 0 || max_count == 0) return out;
  cursor c(t.get(), p.records);
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
    if (const char* why = p.check_record(k, v)) return damaged(why);
    const auto* kb = static_cast<const std::byte*>(k.mv_data);
    // A hole is damage, not a gap to skip.
    if (get_be64(kb) != m->id || get_be64(kb + 8) != expect) return damaged("missing (a hole in the sequence)");
    const auto* vb = static_cast<const std::byte*>(v.mv_data);
    const std::size_t size = v.mv_size - record_header;  // destination + payload
    if (!out.records.empty() && bytes + size > max_bytes) break;
    const std::uint64_t ts = get_le<std::uint64_t>(vb + 8);
    if (get_le<std::uint64_t>(vb) != checksum(expect, ts, vb, v.mv_size)) return damaged("checksum mismatch");
    // Checksummed, so only a writer bug could get these wrong; never read
    // past the value all the same.
    const std::size_t destination = get_le<std::uint32_t>(vb + 16);
    if (destination > size || get_le<std::uint32_t>(vb + 20) != 0) return damaged("its destination length is damaged");
    const auto* body = vb + record_header;
    out.records.push_back({expect, ts, std::vector<std::byte>(body + destination, body + size),
                           std::vector<std::byte>(body, body + destination)});
    bytes += size;
    // Step on only for a record that will be read: the cursor touches no
    // page beyond the answer (a damaged neighbour stays unread).
    if (expect < m->last && out.records.size() < max_count)
      rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT);
  }
  return out;
}

std::expected<stream_info, std::error_code> sequence_log::info(std::string_view stream, diagnostics* diag) const {
  auto& p = *impl_;
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  auto m = p.load(t.get(), stream, diag);
  if (!m) return std::unexpected(m.error());
  return p.describe(t.get(), stream, *m, diag);
}

std::expected<std::size_t, std::error_code> sequence_log::stream_count() const {
  auto& p = *impl_;
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  MDB_stat s{};
  if (const int rc = lmdb_guard::stat(t.get(), p.streams, &s); rc != MDB_SUCCESS)
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
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) return std::unexpected(ec);
  cursor c(t.get(), p.streams);
  if (c.status() != MDB_SUCCESS) return std::unexpected(from_lmdb(c.status()));
  std::vector<stream_info> out;
  // Names sort bytewise: those with the prefix are one range from it on.
  MDB_val k = view(prefix), v{};
  int rc = lmdb_guard::cursor_get(c.get(), &k, &v, prefix.empty() ? MDB_FIRST : MDB_SET_RANGE);
  for (; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
    if (!p.readable(k.mv_data, k.mv_size)) {
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
    auto m = p.decode_meta(name, v, diag);
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
  std::byte value[retention_size];
  put_le<std::uint64_t>(value, limits.max_records);
  put_le<std::uint64_t>(value + 8, static_cast<std::uint64_t>(limits.max_age.count()));
  put_le<std::uint64_t>(value + 16, limits.max_bytes);
  stream_info out;
  std::uint64_t last_id = p.last_stream_id;
  bool made = false;
  // A tiny write that may use the trim reserve: on a full log, setting a
  // retention is how an operator makes room again.
  const auto ec = p.write([&](MDB_txn* t) -> std::error_code {
    last_id = p.last_stream_id;  // a retry starts from what is committed
    auto m = p.load(t, stream);
    made = !m && m.error() == errc::not_found;
    if (made) m = p.load_or_create(t, stream, last_id);
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
  if (created) *created = made;
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

std::expected<stream_info, std::error_code> sequence_log::delete_stream(std::string_view stream) {
  auto& p = *impl_;
  if (auto ec = check(stream, 0)) return std::unexpected(ec);
  const auto every = [](const meta&, std::uint64_t, std::uint64_t) { return true; };
  std::optional<stream_info> original;  // as the first attempt found it
  // Records, metadata and own retention in one transaction. The records go
  // through trim_in, which checks each record and leaf page before it
  // deletes from it and stops before damage: a stream it cannot empty is
  // left whole (the transaction is not committed).
  const auto remove = [&](MDB_txn* t) -> std::error_code {
    auto m = p.load(t, stream);
    if (!m) return m.error();
    if (!original) {
      auto info = p.describe(t, stream, *m);
      if (!info) return info.error();
      original = std::move(*info);
    }
    meta left = *m;
    auto n = p.trim_in(t, left, static_cast<std::size_t>(left.records), left.last, every);
    if (!n) return n.error();
    if (left.records != 0) return errc::corrupted;
    MDB_val k = view(stream);
    if (const int rc = mdb_del(t, p.streams, &k, nullptr); rc != MDB_SUCCESS) return from_lmdb(rc);
    if (p.has_retention_db)
      if (const int rc = mdb_del(t, p.own_retention, &k, nullptr); rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
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
      if (!n) ec = n.error();
      else if (*n == 0) ec = errc::corrupted;  // no progress: stopped before damage
    }
    if (!ec) ec = p.write(remove, true);
  }
  const auto shrink = p.keep_reserve();
  if (ec) return std::unexpected(ec);
  if (shrink) return std::unexpected(shrink);
  return std::move(*original);
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

verify_report sequence_log::verify(std::size_t max_problems,
                                   const std::function<void(const verify_progress&)>& progress) const {
  auto& p = *impl_;
  const auto started = std::chrono::steady_clock::now();
  verify_report r;
  const auto problem = [&](std::string_view stream, std::uint64_t seq, std::string what) {
    ++r.problem_count;
    if (r.problems.size() < max_problems) r.problems.push_back({std::string(stream), seq, std::move(what)});
  };
  const auto lmdb_says = [](std::string_view doing, int rc) {
    return std::string(doing) + ": LMDB reports " + mdb_strerror(rc);
  };
  const auto finish = [&] {
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return r;
  };
  std::shared_lock lock(p.resize);
  txn t;
  if (auto ec = t.begin(p.env, MDB_RDONLY)) {
    problem({}, 0, "cannot begin a read transaction: " + ec.message());
    return finish();
  }
  MDB_envinfo env_info{};
  mdb_env_info(p.env, &env_info);
  const bool same_snapshot = env_info.me_last_txnid == mdb_txn_id(t.get());
  // Every walk below ends within this many steps, even over a damaged
  // B-tree that loops: no entry takes less than 8 bytes of the file.
  const std::uint64_t max_steps = p.refresh_file_size() / 8 + 16;

  // Streams and their retention entries.
  struct stream_state {
    std::string name;
    meta m;
    std::uint64_t next = 0;     // the sequence the walk expects next
    bool ended = false;         // the walk met record last_seq (next may have wrapped past 2^64 - 1)
    std::uint64_t present = 0;  // records found in first..last
    std::uint64_t bytes = 0;    // their destination + payload bytes
    bool holes = false;         // a missing or damaged record was reported
  };
  std::unordered_map<std::uint64_t, stream_state> by_id;
  std::unordered_set<std::string> names;
  std::uint64_t max_id = 0;
  {
    cursor c(t.get(), p.streams);
    MDB_val k{}, v{};
    int rc = c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : c.status();
    for (std::uint64_t step = 0; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
      if (++step > max_steps) {
        problem({}, 0, "the streams database does not end (a loop in a damaged B-tree)");
        break;
      }
      if (!p.readable(k.mv_data, k.mv_size)) {
        problem({}, 0, "a stream name lies outside the data file");
        continue;
      }
      const std::string name(static_cast<const char*>(k.mv_data), k.mv_size);
      diagnostics d;
      auto m = p.decode_meta(name, v, &d);
      if (!m) {
        problem(name, 0, d.message);
        continue;
      }
      if (m->id == 0 || by_id.contains(m->id)) {
        problem(name, 0,
                where(name) + ": its id " + std::to_string(m->id) +
                    (m->id == 0 ? " is not valid" : " is also stream '" + by_id.at(m->id).name + "''s"));
        continue;
      }
      if (auto own = p.load_retention(t.get(), name, &d); !own) problem(name, 0, d.message);
      ++r.streams;
      max_id = std::max(max_id, m->id);
      names.insert(name);
      by_id.emplace(m->id, stream_state{name, *m, m->first});
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) problem({}, 0, lmdb_says("walking the streams", rc));
  }
  if (p.has_retention_db) {
    cursor c(t.get(), p.own_retention);
    MDB_val k{}, v{};
    int rc = c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : c.status();
    for (std::uint64_t step = 0; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
      if (++step > max_steps) {
        problem({}, 0, "the retention database does not end (a loop in a damaged B-tree)");
        break;
      }
      if (!p.readable(k.mv_data, k.mv_size)) {
        problem({}, 0, "a retention entry's stream name lies outside the data file");
        continue;
      }
      const std::string name(static_cast<const char*>(k.mv_data), k.mv_size);
      if (!names.contains(name)) problem(name, 0, where(name) + " has a retention entry but no metadata");
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) problem({}, 0, lmdb_says("walking the retention entries", rc));
  }

  // The format stamp and the last stream id.
  {
    MDB_val k = view(format_key), v{};
    const int rc = lmdb_guard::get(t.get(), p.metadata, &k, &v);
    if (rc == MDB_SUCCESS) {
      if (v.mv_size != 8 || !p.readable(v.mv_data, 8))
        problem({}, 0, "the format stamp is damaged");
      else if (const auto version = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
               version != log_format_version)
        problem({}, 0, "the format stamp says " + std::to_string(version));
    } else if (rc != MDB_NOTFOUND || !by_id.empty()) {
      problem({}, 0, rc == MDB_NOTFOUND ? std::string("the format stamp is missing") : lmdb_says("reading the format stamp", rc));
    }
    k = view(last_stream_key);
    const int rc2 = lmdb_guard::get(t.get(), p.metadata, &k, &v);
    if (rc2 == MDB_SUCCESS && (v.mv_size != 8 || !p.readable(v.mv_data, 8)))
      problem({}, 0, "the last stream id is damaged");
    else if (rc2 == MDB_SUCCESS && get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data)) < max_id)
      problem({}, 0, "the last stream id is below a stream's id " + std::to_string(max_id));
    else if (rc2 == MDB_NOTFOUND && max_id != 0)
      problem({}, 0, "the last stream id is missing");
    else if (rc2 != MDB_SUCCESS && rc2 != MDB_NOTFOUND)
      problem({}, 0, lmdb_says("reading the last stream id", rc2));
  }

  // Every record, in key order: stream by stream, sequence by sequence.
  std::optional<std::uint64_t> walk_stopped_at;  // the stream id where LMDB gave up, if it did
  {
    cursor c(t.get(), p.records);
    MDB_val k{}, v{};
    int rc = c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : c.status();
    std::uint64_t prev_id = 0, prev_seq = 0;
    std::unordered_set<std::uint64_t> orphans;
    for (std::uint64_t step = 0; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
      if (++step > max_steps) {
        problem({}, 0, "the records database does not end (a loop in a damaged B-tree)");
        break;
      }
      if (progress && step % 65536 == 0) progress({r.streams, r.records, r.bytes});
      const auto* kb = static_cast<const std::byte*>(k.mv_data);
      if (k.mv_size != record_key_size || !p.readable(kb, record_key_size)) {
        problem({}, 0, "a record key after stream id " + std::to_string(prev_id) + ", sequence " +
                           std::to_string(prev_seq) + " is damaged");
        continue;
      }
      const std::uint64_t id = get_be64(kb), seq = get_be64(kb + 8);
      if (step > 1 && (id < prev_id || (id == prev_id && seq <= prev_seq)))
        problem({}, 0, "record keys out of order after stream id " + std::to_string(prev_id) + ", sequence " +
                           std::to_string(prev_seq));
      prev_id = id;
      prev_seq = seq;
      const auto it = by_id.find(id);
      if (it == by_id.end()) {
        if (orphans.insert(id).second)
          problem({}, seq, "records of stream id " + std::to_string(id) + ", which no stream has");
        continue;
      }
      auto& st = it->second;
      if (seq < st.m.first || seq > st.m.last) {
        st.holes = true;
        problem(st.name, seq,
                where(st.name, seq) + ": outside the stream's range " + std::to_string(st.m.first) + ".." +
                    std::to_string(st.m.last));
        continue;
      }
      if (seq != st.next) {
        st.holes = true;
        problem(st.name, st.next,
                where(st.name, st.next) + ": missing" +
                    (seq > st.next + 1 ? " (records up to " + std::to_string(seq - 1) + " too)" : std::string{}));
      }
      st.next = seq + 1;
      st.ended = seq == st.m.last;
      ++st.present;
      if (const char* why = p.check_record(k, v)) {
        st.holes = true;
        problem(st.name, seq, where(st.name, seq) + ": " + why);
        continue;
      }
      const auto* vb = static_cast<const std::byte*>(v.mv_data);
      const std::uint64_t ts = get_le<std::uint64_t>(vb + 8);
      const std::size_t size = v.mv_size - record_header;
      ++r.records;
      r.bytes += v.mv_size;
      st.bytes += size;
      if (get_le<std::uint64_t>(vb) != checksum(seq, ts, vb, v.mv_size)) {
        problem(st.name, seq, where(st.name, seq) + ": checksum mismatch");
        continue;
      }
      if (get_le<std::uint32_t>(vb + 16) > size || get_le<std::uint32_t>(vb + 20) != 0)
        problem(st.name, seq, where(st.name, seq) + ": its destination length is damaged");
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
      // LMDB cannot go on (and ends the transaction): what lies beyond is
      // unchecked, not missing.
      walk_stopped_at = prev_id;
      problem(prev_id != 0 && by_id.contains(prev_id) ? by_id.at(prev_id).name : std::string{}, 0,
              lmdb_says(prev_id == 0 ? std::string("walking the records from the first")
                                     : "walking the records after stream id " + std::to_string(prev_id) +
                                           ", sequence " + std::to_string(prev_seq),
                        rc) +
                  "; the records after it were not checked");
    }
  }
  for (auto& [id, st] : by_id) {
    if (walk_stopped_at && id >= *walk_stopped_at) continue;
    if (st.m.records != 0 && !st.ended && st.next <= st.m.last) {
      problem(st.name, st.next,
              where(st.name, st.next) + ": missing" +
                  (st.m.last > st.next ? " (records up to " + std::to_string(st.m.last) + " too)" : std::string{}));
      st.holes = true;
    }
    if (st.holes) continue;  // the counts are off for the reasons already given
    if (st.present != st.m.records)
      problem(st.name, 0,
              where(st.name) + ": holds " + std::to_string(st.present) + " records, its metadata says " +
                  std::to_string(st.m.records));
    else if (st.bytes != st.m.bytes)
      problem(st.name, 0,
              where(st.name) + ": holds " + std::to_string(st.bytes) + " bytes, its metadata says " +
                  std::to_string(st.m.bytes));
  }

  // Pages: each page up to the last is used by exactly one database or on
  // the free list (LMDB's own invariant, its mdb_audit). Checked against
  // the current meta page, so only if no writer committed since the
  // snapshot was taken.
  if (same_snapshot && !walk_stopped_at) {
    std::uint64_t used = 0, free = 0;
    bool counted = true;
    const auto add = [&](MDB_dbi dbi) {
      MDB_stat st{};
      if (mdb_stat(t.get(), dbi, &st) != MDB_SUCCESS) return false;
      used += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
      return true;
    };
    MDB_dbi main_db = 0;
    counted = add(0) && lmdb_guard::dbi_open(t.get(), nullptr, 0, &main_db) == MDB_SUCCESS && add(main_db);
    // Every named database: the keys of the main one.
    {
      cursor c(t.get(), main_db);
      MDB_val k{}, v{};
      int rc = counted && c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : MDB_NOTFOUND;
      for (std::uint64_t step = 0; counted && rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
        MDB_dbi dbi = 0;
        if (++step > max_steps || !p.readable(k.mv_data, k.mv_size)) {
          counted = false;
          break;
        }
        const std::string name(static_cast<const char*>(k.mv_data), k.mv_size);
        counted = lmdb_guard::dbi_open(t.get(), name.c_str(), 0, &dbi) == MDB_SUCCESS && add(dbi);
      }
      if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) counted = false;
    }
    {
      cursor c(t.get(), 0);  // LMDB's free list: txn id -> count, then page numbers
      MDB_val k{}, v{};
      int rc = counted && c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : MDB_NOTFOUND;
      for (std::uint64_t step = 0; counted && rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
        if (++step > max_steps || v.mv_size < 8 || !p.readable(v.mv_data, v.mv_size)) {
          problem({}, 0, "LMDB's free list is damaged");
          counted = false;
          break;
        }
        const auto n = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
        if (n > (v.mv_size - 8) / 8) {
          problem({}, 0, "LMDB's free list is damaged (a record claims " + std::to_string(n) + " pages)");
          counted = false;
          break;
        }
        free += n;
      }
      if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
        problem({}, 0, lmdb_says("walking LMDB's free list", rc));
        counted = false;
      }
    }
    if (counted) {
      r.pages_checked = true;
      const std::uint64_t pages = env_info.me_last_pgno + 1;
      if (used + free + 2 != pages)
        problem({}, 0,
                "LMDB's pages do not add up: " + std::to_string(used) + " in use + " + std::to_string(free) +
                    " free + 2 meta pages, but the file has " + std::to_string(pages) +
                    " (damaged B-tree counts or free list)");
    }
  }
  if (progress) progress({r.streams, r.records, r.bytes});
  return finish();
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
  std::shared_lock lock(impl_->resize);
  return impl_->map_size;
}

durability sequence_log::mode() const noexcept { return impl_->opts.mode; }

std::uint64_t sequence_log::wall_clock_ms() const { return impl_->now_ms(); }

sequence_log::space_info sequence_log::space() const noexcept {
  return {impl_->allocated, std::uint64_t{impl_->disk_reserve_pages()} * impl_->page};
}

std::error_code rewrite_raw(sequence_log& log, std::span<const raw_entry> entries) {
  auto& p = *log.impl_;
  if (p.opts.read_only) return make_error_code(errc::invalid_argument);
  const auto ec = p.write([&](MDB_txn* t) -> std::error_code {
    for (const MDB_dbi dbi : {p.streams, p.records, p.own_retention})
      if (const int rc = mdb_drop(t, dbi, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
    for (const auto& e : entries) {
      const MDB_dbi dbi = e.db == raw_db::streams   ? p.streams
                          : e.db == raw_db::records ? p.records
                          : e.db == raw_db::meta    ? p.metadata
                                                    : p.own_retention;
      MDB_val k{e.key.size(), const_cast<std::byte*>(e.key.data())};
      MDB_val v{e.value.size(), const_cast<std::byte*>(e.value.data())};
      if (const int rc = mdb_put(t, dbi, &k, &v, 0); rc != MDB_SUCCESS) return from_lmdb(rc);
    }
    return {};
  }, true);
  // Like a trim, this may have used the reserves: appends get their limit back.
  const auto shrink = p.keep_reserve();
  return ec ? ec : shrink;
}

std::uint64_t record_checksum(std::uint64_t seq, std::span<const std::byte> value) {
  if (value.size() < record_header) return 0;
  return checksum(seq, get_le<std::uint64_t>(value.data() + 8), value.data(), value.size());
}

}  // namespace switchyard::storage

#include "storage/map_space.hpp"

#include "storage/data_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>

namespace switchyard::storage {

namespace {

namespace L = lmdb_layout;

// Disk space (docs/storage.md, "Space"). The LMDB 0.9 facts these bounds
// rely on (storage/data_file.hpp, lmdb_layout): two meta pages; a page
// header of 16 bytes; a node header of 8 bytes; a node larger than
// ((page - 16) / 2 & ~1) - 2 bytes goes to overflow pages; a page number
// p + n is refused unless below map_size / page.
//
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

}  // namespace

map_space::map_space(const log_options& opts, const log_codec::dbs& dbs, std::function<void()> on_remap)
    : opts_(opts), dbs_(dbs), on_remap_(std::move(on_remap)) {}

std::size_t map_space::initial_map_size(const std::filesystem::path& data_file) const {
  std::size_t map = std::min(opts_.initial_map_size, append_ceiling());
  if (opts_.read_only) {
    // Room for what a writer next door adds while we read.
    std::error_code fs_ec;
    const auto size = std::filesystem::file_size(data_file, fs_ec);
    map = std::max(opts_.max_map_size, fs_ec ? std::size_t{0} : static_cast<std::size_t>(size) * 2);
  }
  return map;
}

std::error_code map_space::attach(MDB_env* env) {
  env_ = env;
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  map_size_ = info.me_mapsize;  // at least what the data in an existing log occupies
  MDB_stat st{};
  if (auto ec = from_lmdb(mdb_env_stat(env_, &st))) return ec;
  page_size_ = st.ms_psize;
  page_shift_ = static_cast<unsigned>(std::countr_zero(page_size_));
  pool_pages_ = std::max(min_trim_pool_pages, std::min(trim_pool_bytes, opts_.max_map_size / 8) / page_size_);
  const std::size_t record_pages =
      (log_codec::record_header + opts_.max_record_bytes + max_destination_bytes + 16 + L::page_header) / page_size_ +
      1;
  tail_pages_ = ((record_pages + 64) * 8 + L::page_header) / page_size_ + 1 + 4;
  mdb_filehandle_t h{};
  if (mdb_env_get_fd(env_, &h) != MDB_SUCCESS) return errc::internal;
  fd_ = h;
  return {};
}

// Appends may fill the map only up to this; the rest of max_map_size is
// kept for trims: a delete needs fresh pages for its copy-on-write, so a
// log filled to the brim could otherwise never be trimmed again.
std::size_t map_space::append_ceiling() const {
  const std::size_t max = opts_.max_map_size;
  const std::size_t reserve = std::clamp<std::size_t>(max / 32, std::min<std::size_t>(256u << 10, max / 4), max / 4);
  return max - reserve;
}

// The largest map a write may use: appends up to the append ceiling and,
// preallocating, the allocated file less the tail reserve; reserve users
// (trims, retention changes) up to max_map_size and the allocated file.
std::size_t map_space::map_limit(bool reserve) const {
  std::uint64_t limit = reserve ? opts_.max_map_size : append_ceiling();
  if (allocated_ != 0) {
    const std::uint64_t tail = reserve ? 0 : std::uint64_t{tail_pages_} * page_size_;
    limit = std::min(limit, allocated_ > tail ? allocated_ - tail : 0);
  }
  return static_cast<std::size_t>(limit);
}

// Bytes of the file LMDB uses (through its last page), as last committed.
std::size_t map_space::used_bytes() const {
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  return (static_cast<std::size_t>(info.me_last_pgno) + 1) * page_size_;
}

std::error_code map_space::keep_reserve() {
  // LMDB keeps whatever the data now occupies; a map already at that size
  // is left alone.
  const std::size_t fit = std::max(map_limit(false), used_bytes());
  if (map_size_ > fit) return resize_map(fit);
  return {};
}

// Sets the map size (LMDB never goes below the data in use) and records
// what it became; then on_remap_, the lock still held.
std::error_code map_space::resize_map(std::size_t size) {
  std::unique_lock lock(resize_);
  if (auto ec = from_lmdb(mdb_env_set_mapsize(env_, size))) return ec;
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  map_size_ = info.me_mapsize;
  on_remap_();
  return {};
}

// Grows the map towards map_limit(reserve) (doubling; straight to the
// limit when preallocating, as the allocation steps are the growth
// policy), or, when the allocated file is what limits (or the append's
// reserve check failed), allocates more of the file.
std::error_code map_space::grow(bool reserve) {
  if (disk_refused_) return errc::storage_full;
  const std::size_t limit = map_limit(reserve);
  if (!short_of_reserve_ && map_size_ < limit)
    return resize_map(allocated_ != 0 ? limit : std::min(limit, map_size_ * 2));
  const std::uint64_t ceiling = reserve ? opts_.max_map_size : append_ceiling();
  const bool file_bound = allocated_ != 0 && (short_of_reserve_ || limit < ceiling);
  if (!file_bound || !extend_file()) return errc::storage_full;
  const std::size_t wider = map_limit(reserve);
  return wider > map_size_ ? resize_map(wider) : std::error_code{};
}

// Allocates more of the data file on disk (writer thread): a step of an
// eighth of what is allocated (1..64 MiB) or, if the disk refuses that,
// 64 KiB; never past max_map_size. False if nothing was allocated (not
// preallocating, at the maximum, the disk or quota full, an error).
bool map_space::extend_file() {
  const std::uint64_t page = page_size_;
  const std::uint64_t max = opts_.max_map_size / page * page;
  if (allocated_ == 0 || allocated_ >= max) return false;
  const std::uint64_t step = std::clamp(allocated_ / 8, min_prealloc_step, max_prealloc_step);
  for (const std::uint64_t want : {step, last_prealloc_step}) {
    const std::uint64_t target = std::min(max, (allocated_ + want + page - 1) / page * page);
    const int e = allocate(fd_, allocated_, target - allocated_);
    if (e == 0) {
      allocated_ = target;
      return true;
    }
    if (!no_space(e)) return false;
  }
  return false;
}

// The lock file's pages are allocated too, so that a reader slot never
// faults on a full tmpfs.
std::error_code map_space::preallocate() {
  if (!opts_.preallocate || opts_.read_only) return {};  // a read-only open writes nothing
  struct stat file {};
  if (::fstat(fd_, &file) != 0) return errc::io_error;
  const std::uint64_t page = page_size_;
  const std::uint64_t size = static_cast<std::uint64_t>(file.st_size);
  const std::uint64_t have = (std::max<std::uint64_t>(size, used_bytes()) + page - 1) / page * page;
  const std::uint64_t max = std::max<std::uint64_t>(have, opts_.max_map_size / page * page);
  const std::uint64_t want = std::min(max, have + std::uint64_t{disk_reserve_pages()} * page + min_prealloc_step);
  if (const int e = allocate(fd_, 0, want); e == 0) {
    allocated_ = want;
  } else if (!no_space(e)) {
    allocated_ = 0;  // EOPNOTSUPP and the like: the file grows as LMDB writes it
    return {};
  } else if (allocate(fd_, 0, have) == 0) {
    allocated_ = have;
  } else {
    allocated_ = std::max<std::uint64_t>(size / page * page, page);  // pages past it may be holes
  }
  const auto lock_path = opts_.dir / "lock.mdb";
  if (const int lfd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC); lfd >= 0) {
    struct stat lock_file {};
    if (::fstat(lfd, &lock_file) == 0 && lock_file.st_size > 0)
      (void)allocate(lfd, 0, static_cast<std::uint64_t>(lock_file.st_size));
    ::close(lfd);
  }
  // The map starts at initial_map_size (as set before mdb_env_open) or
  // the appends' limit, whichever is smaller, and grows on demand.
  const std::size_t fit = std::max(std::min(map_size_, map_limit(false)), used_bytes());
  return fit != map_size_ ? resize_map(fit) : std::error_code{};
}

std::expected<map_space::tree_pages, std::error_code> map_space::count_pages(MDB_txn* t) const {
  tree_pages out;
  std::size_t* depth[] = {&out.depth_free,    &out.depth_main, &out.depth_streams,
                          &out.depth_records, &out.depth_meta, nullptr};
  const MDB_dbi dbis[] = {L::free_dbi, L::main_dbi, dbs_.streams, dbs_.records, dbs_.metadata, dbs_.own_retention};
  for (std::size_t i = 0; i < std::size(dbis); ++i) {
    MDB_stat st{};
    if (const int rc = mdb_stat(t, dbis[i], &st); rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
    out.total += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
    if (depth[i]) *depth[i] = st.ms_depth;
  }
  return out;
}

// Of the pages the file can hold (map_limit(true); LMDB never uses a map's
// last page), in use or unusable after this commit are: the metas, every
// tree as it will be, the pages this commit frees (LMDB reuses a freed
// page only from the commit after next, so a trim right after could not)
// and the free-list entry that lists them. The freed pages are bounded
// from above: the old copies of the pages changed (per stream touched, the
// paths to its last record and its metadata; per trimmed stream, the path
// to its first record; the metadata and main trees' paths) and, twice
// over, the pages retention emptied (`removed`, counted). Every tree must
// be in count_pages, or this undercounts. Sets short_of_reserve_ when it
// fails.
std::error_code map_space::check_disk_reserve(MDB_txn* t, std::size_t streams_touched, std::size_t streams_trimmed,
                                              std::size_t removed) {
  auto now = count_pages(t);
  if (!now) return now.error();
  const std::size_t page = page_size_;
  const std::size_t freed = streams_touched * (now->depth_records + now->depth_streams) +
                            streams_trimmed * now->depth_records + now->depth_meta + now->depth_main + 2 * removed + 8;
  const std::size_t list_bytes = 8 * (freed + 1);
  const std::size_t node_max = ((page - L::page_header) / 2 & ~std::size_t{1}) - 2;
  const std::size_t list_pages =
      now->depth_free + 2 + (list_bytes + 8 + L::node_header > node_max ? (list_bytes + L::page_header) / page + 1 : 0);
  const std::size_t capacity = map_limit(true) / page;
  const std::size_t needed = L::metas + now->total + freed + list_pages + disk_reserve_pages() + 1;
  if (needed <= capacity) return {};
  short_of_reserve_ = true;
  return errc::storage_full;
}

void map_space::begin_write() noexcept {
  short_of_reserve_ = false;
  disk_refused_ = false;
}

// Sets disk_refused_ when the filesystem had no room.
std::error_code map_space::commit_error(int rc) {
  if (no_space(rc)) disk_refused_ = true;  // storage_full; MDB_MAP_FULL (the free list's save) is not
  if (rc != EIO || fd_ < 0) return from_lmdb(rc);
  struct statvfs vfs {};
  if (::fstatvfs(fd_, &vfs) != 0) return from_lmdb(rc);
  const std::uint64_t free = static_cast<std::uint64_t>(::geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail) * vfs.f_frsize;
  if (free >= short_write_free_bytes) return from_lmdb(rc);
  disk_refused_ = true;
  return errc::storage_full;
}

}  // namespace switchyard::storage

#pragma once
// LMDB's data file (data.mdb) as it is on disk, read with pread() and never
// through LMDB's memory map: a page past the end of a mapped file raises
// SIGBUS when touched, so the log checks the file this way before LMDB maps
// it.
//
// LMDB 0.9 (the version this log is built on) keeps two meta pages at the
// start of the file; the one with the higher transaction id is current and
// names the last page in use (mm_last_pg). The file holds every page up to
// that one, except that pages freed in the transaction that allocated them
// are never written: the file may end early where LMDB's free list lists
// the pages past its end (LMDB documents this at MDB_meta.mm_last_pg). A
// file that ends before a page not on the free list was cut short.
//
// The layout constants below are LMDB 0.9's (mdb.c: MDB_page, MDB_meta,
// MDB_db, MDB_node on a 64-bit build); data_file only reads them, and a
// meta page that does not carry LMDB's magic and version is reported as
// damaged rather than interpreted.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace switchyard::storage {

// LMDB 0.9 on-disk layout, as far as the log's checks need it.
namespace lmdb_layout {
inline constexpr std::size_t page_header =
    16;  // PAGEHDRSZ: pgno (8), pad (2), flags (2), lower/upper or page count (4)
inline constexpr std::size_t flags_offset = 10;
inline constexpr std::size_t pages_offset = 12;  // mp_pages of an overflow page (u32)
inline constexpr std::uint16_t p_branch = 0x01, p_leaf = 0x02, p_overflow = 0x04, p_meta = 0x08;
inline constexpr std::size_t node_header = 8;     // NODESIZE: size or page number (lo, hi), flags, key size
inline constexpr std::uint16_t f_bigdata = 0x01;  // the node's value is on overflow pages
inline constexpr std::uint32_t magic = 0xBEEFC0DE;
inline constexpr std::uint32_t data_version = 1;
inline constexpr std::size_t metas = 2;  // meta pages at the start of the file (NUM_METAS)
// LMDB's own databases (FREE_DBI, MAIN_DBI): handles mdb_stat and cursors take.
inline constexpr unsigned free_dbi = 0;
inline constexpr unsigned main_dbi = 1;
// Pages an overflow value of `size` bytes takes (OVPAGES).
constexpr std::uint64_t overflow_pages(std::uint64_t size, std::uint64_t page_size) {
  return (page_header - 1 + size) / page_size + 1;
}
}  // namespace lmdb_layout

// The current meta page of a data file, as far as the checks need it.
struct data_file_meta {
  std::uint64_t page_size = 0;
  std::uint64_t last_page = 0;   // mm_last_pg
  std::uint64_t txn_id = 0;      // mm_txnid
  std::uint64_t free_root = 0;   // root page of LMDB's free list (~0: empty)
  std::uint64_t main_root = 0;   // root page of the main database, which names the others (~0: empty)
  std::uint64_t file_bytes = 0;  // the file's size when it was read
};

class data_file {
 public:
  // Checks the data file `file` (<log dir>/data.mdb) before LMDB maps it:
  // both meta pages readable and valid (magic, version, page size,
  // transaction ids one apart, root pages within the file), the file long
  // enough for the current one (see above), and the root pages it names
  // headed as branch or leaf pages of that number. A missing file is fine (a new log). Errors:
  // corrupted, with `*detail` (if given) saying what is wrong in one line,
  // e.g. "file shorter than 8192 bytes (data.mdb is 4096 bytes)";
  // io_error (the file cannot be read). Reads the metas and, only when the
  // file is short, LMDB's free list; never maps anything.
  static std::error_code check(const std::filesystem::path& file, std::string* detail = nullptr);

  // The current meta page (the valid one with the higher transaction id).
  // Errors as for check().
  static std::error_code read_meta(int fd, data_file_meta& out, std::string* detail = nullptr);

  // How many pages of [first, last] LMDB's free list (rooted at
  // meta.free_root) lists; pages of the free list itself must lie inside
  // the file. Errors: corrupted (the free list is damaged or past the end
  // of the file), io_error.
  static std::error_code count_free(int fd, const data_file_meta& meta, std::uint64_t first, std::uint64_t last,
                                    std::uint64_t& count, std::string* detail = nullptr);
};

}  // namespace switchyard::storage

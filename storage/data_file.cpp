#include "storage/data_file.hpp"

#include "storage/errc.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace switchyard::storage {

namespace {

namespace L = lmdb_layout;

// MDB_meta fields, as offsets from the start of a meta page.
constexpr std::size_t meta_magic = 16, meta_version = 20;
constexpr std::size_t meta_free_db = 40;                        // mm_dbs[FREE_DBI]; its md_pad is the page size
constexpr std::size_t meta_free_root = meta_free_db + 40;       // md_root
constexpr std::size_t meta_main_root = meta_free_db + 48 + 40;  // mm_dbs[MAIN_DBI].md_root
constexpr std::size_t meta_last_page = 136, meta_txn_id = 144;
constexpr std::size_t meta_bytes = 152;
constexpr std::uint64_t no_page = ~std::uint64_t{0};  // P_INVALID: an empty tree
// A free-list walk deeper than this is a loop in a damaged tree (LMDB's
// own cursor stack holds 32 levels).
constexpr int max_depth = 32;

std::uint64_t le(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

void say(std::string* detail, std::string text) {
  if (detail) *detail = std::move(text);
}

// Reads exactly `n` bytes at `off`: 0, EIO-style errno, or -1 for a short read.
int read_at(int fd, void* buf, std::size_t n, std::uint64_t off) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return -1;
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
  return 0;
}

std::error_code io_failed(std::string* detail, int err) {
  say(detail, std::string("cannot read data.mdb: ") + std::strerror(err));
  return errc::io_error;
}

// Walks LMDB's free list with pread, counting the pages it lists in
// [first, last]. Every page it reads must lie inside the file.
class free_list_walk {
 public:
  free_list_walk(int fd, const data_file_meta& m, std::uint64_t first, std::uint64_t last, std::string* detail)
      : fd_(fd), m_(m), first_(first), last_(last), detail_(detail), page_(m.page_size) {}

  std::error_code run(std::uint64_t& count) {
    if (m_.free_root != no_page)
      if (auto ec = visit(m_.free_root, 0)) return ec;
    std::sort(found_.begin(), found_.end());
    count = static_cast<std::uint64_t>(std::unique(found_.begin(), found_.end()) - found_.begin());
    return {};
  }

 private:
  std::error_code damaged(const std::string& what) {
    say(detail_, "LMDB's free list is damaged: " + what);
    return errc::corrupted;
  }

  std::uint64_t file_pages() const { return m_.file_bytes / m_.page_size; }

  std::error_code visit(std::uint64_t pgno, int depth) {
    if (depth > max_depth) return damaged("deeper than " + std::to_string(max_depth) + " levels");
    if (++visits_ > file_pages()) return damaged("it visits more pages than the file holds");
    if (pgno < 2 || pgno >= file_pages())
      return damaged("page " + std::to_string(pgno) + " lies outside the file (" + std::to_string(file_pages()) +
                     " pages)");
    if (int err = read_at(fd_, page_.data(), page_.size(), pgno * m_.page_size)) {
      if (err < 0) return damaged("page " + std::to_string(pgno) + " lies past the end of the file");
      return io_failed(detail_, err);
    }
    const unsigned char* p = page_.data();
    const std::uint16_t flags = static_cast<std::uint16_t>(le(p + L::flags_offset, 2));
    const std::size_t lower = le(p + 12, 2);
    if (le(p, 8) != pgno) return damaged("page " + std::to_string(pgno) + " carries another page number");
    if (lower < L::page_header || lower > page_.size())
      return damaged("page " + std::to_string(pgno) + " has an impossible node count");
    const std::size_t nodes = (lower - L::page_header) / 2;
    // Copy what the nodes say first: visiting a child reuses page_.
    std::vector<std::uint64_t> children;
    for (std::size_t i = 0; i < nodes; ++i) {
      const std::size_t at = le(p + L::page_header + 2 * i, 2);
      if (at + L::node_header > page_.size())
        return damaged("a node of page " + std::to_string(pgno) + " lies outside it");
      const unsigned char* node = p + at;
      const std::uint64_t lo = le(node, 2), hi = le(node + 2, 2), nflags = le(node + 4, 2), ksize = le(node + 6, 2);
      if (flags & L::p_branch) {
        children.push_back(lo | hi << 16 | nflags << 32);
        continue;
      }
      if (!(flags & L::p_leaf)) return damaged("page " + std::to_string(pgno) + " is neither a branch nor a leaf");
      const std::uint64_t size = lo | hi << 16;
      const std::size_t data_at = at + L::node_header + ksize;
      if (nflags & L::f_bigdata) {
        if (data_at + 8 > page_.size()) return damaged("a node of page " + std::to_string(pgno) + " lies outside it");
        const std::uint64_t ov = le(p + data_at, 8);
        if (ov < 2 || ov >= file_pages() || size > m_.file_bytes - ov * m_.page_size - L::page_header)
          return damaged("overflow page " + std::to_string(ov) + " lies outside the file");
        std::vector<unsigned char> value(size);
        if (int err = read_at(fd_, value.data(), value.size(), ov * m_.page_size + L::page_header))
          return err < 0 ? damaged("overflow page " + std::to_string(ov) + " lies past the end")
                         : io_failed(detail_, err);
        if (auto ec = take(value.data(), size, pgno)) return ec;
      } else {
        if (data_at + size > page_.size())
          return damaged("a node of page " + std::to_string(pgno) + " lies outside it");
        if (auto ec = take(p + data_at, size, pgno)) return ec;
      }
    }
    for (const std::uint64_t child : children)
      if (auto ec = visit(child, depth + 1)) return ec;
    return {};
  }

  // One free-list record: a count, then that many page numbers (u64).
  std::error_code take(const unsigned char* v, std::uint64_t size, std::uint64_t pgno) {
    if (size < 8) return damaged("a record of page " + std::to_string(pgno) + " is too short");
    const std::uint64_t n = le(v, 8);
    if (n > (size - 8) / 8) return damaged("a record of page " + std::to_string(pgno) + " claims too many pages");
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t free = le(v + 8 + 8 * i, 8);
      if (free >= first_ && free <= last_) found_.push_back(free);
    }
    return {};
  }

  int fd_;
  const data_file_meta& m_;
  std::uint64_t first_, last_;
  std::string* detail_;
  std::vector<unsigned char> page_;
  std::vector<std::uint64_t> found_;
  std::uint64_t visits_ = 0;
};

}  // namespace

std::error_code data_file::read_meta(int fd, data_file_meta& out, std::string* detail) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_failed(detail, errno);
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes == 0) {
    say(detail, "data.mdb is empty (0 bytes)");
    return errc::corrupted;
  }
  unsigned char buf[meta_bytes];
  std::uint64_t page_size = 0;
  std::uint64_t txn_ids[2] = {0, 0};
  bool have = false;
  for (int i = 0; i < 2; ++i) {
    const std::string which = "meta page " + std::to_string(i);
    if (int err = read_at(fd, buf, sizeof buf, i * page_size)) {
      if (err > 0) return io_failed(detail, err);
      say(detail, "file shorter than its two meta pages (data.mdb is " + std::to_string(file_bytes) + " bytes)");
      return errc::corrupted;
    }
    if (!(le(buf + L::flags_offset, 2) & L::p_meta) || le(buf + meta_magic, 4) != L::magic) {
      say(detail, which + " is damaged (it is not an LMDB meta page)");
      return errc::corrupted;
    }
    if (le(buf + meta_version, 4) != L::data_version) {
      say(detail, which + " is damaged or of another LMDB version (data version " +
                      std::to_string(le(buf + meta_version, 4)) + ")");
      return errc::corrupted;
    }
    if (i == 0) {
      page_size = le(buf + meta_free_db, 4);
      // LMDB 0.9 pages are a power of two, at most 32 KiB.
      if (page_size < 256 || page_size > 32768 || (page_size & (page_size - 1)) != 0) {
        say(detail, "meta page 0 is damaged (page size " + std::to_string(page_size) + ")");
        return errc::corrupted;
      }
    }
    // LMDB uses the meta with the higher transaction id (mdb_env_read_header).
    const std::uint64_t txn = le(buf + meta_txn_id, 8);
    txn_ids[i] = txn;
    if (!have || txn > out.txn_id) {
      out.txn_id = txn;
      out.last_page = le(buf + meta_last_page, 8);
      out.free_root = le(buf + meta_free_root, 8);
      out.main_root = le(buf + meta_main_root, 8);
      have = true;
    }
  }
  out.page_size = page_size;
  out.file_bytes = file_bytes;
  // Transaction N writes meta page N % 2, so the two are one apart (both 0
  // in a new file): anything else is a damaged transaction id.
  if ((txn_ids[0] > txn_ids[1] ? txn_ids[0] - txn_ids[1] : txn_ids[1] - txn_ids[0]) > 1) {
    say(detail, "the meta pages disagree (transaction ids " + std::to_string(txn_ids[0]) + " and " +
                    std::to_string(txn_ids[1]) + ")");
    return errc::corrupted;
  }
  if (out.last_page < 1 || out.last_page > (std::uint64_t{1} << 48) / page_size) {
    say(detail, "the current meta page is damaged (last page " + std::to_string(out.last_page) + ")");
    return errc::corrupted;
  }
  for (const std::uint64_t root : {out.free_root, out.main_root})
    if (root != no_page && (root < 2 || root > out.last_page)) {
      say(detail, "the current meta page is damaged (a root page " + std::to_string(root) + " beyond its last page " +
                      std::to_string(out.last_page) + ")");
      return errc::corrupted;
    }
  return {};
}

std::error_code data_file::count_free(int fd, const data_file_meta& meta, std::uint64_t first, std::uint64_t last,
                                      std::uint64_t& count, std::string* detail) {
  free_list_walk walk(fd, meta, first, last, detail);
  return walk.run(count);
}

std::error_code data_file::check(const std::filesystem::path& file, std::string* detail) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};  // a new log
    return io_failed(detail, errno);
  }
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_it{fd};
  data_file_meta m;
  if (auto ec = read_meta(fd, m, detail)) return ec;
  const std::uint64_t need = (m.last_page + 1) * m.page_size;
  if (m.file_bytes >= need) {
    // The two trees the meta page names start at a branch or leaf page
    // that knows its own number.
    for (const std::uint64_t root : {m.free_root, m.main_root}) {
      if (root == no_page) continue;
      unsigned char header[L::page_header];
      if (int err = read_at(fd, header, sizeof header, root * m.page_size))
        return io_failed(detail, err < 0 ? EIO : err);
      if (le(header, 8) != root || !(le(header + L::flags_offset, 2) & (L::p_branch | L::p_leaf))) {
        say(detail, "the root page " + std::to_string(root) + " the current meta page names is damaged");
        return errc::corrupted;
      }
    }
    return {};
  }
  // Short: fine only if every page past the end is on the free list.
  const std::uint64_t first_missing = m.file_bytes / m.page_size;
  std::uint64_t free = 0;
  std::string why;
  const auto ec = count_free(fd, m, first_missing, m.last_page, free, &why);
  if (ec == errc::io_error) {
    say(detail, why);
    return ec;
  }
  if (ec || free != m.last_page - first_missing + 1) {
    say(detail, "file shorter than " + std::to_string(need) + " bytes (data.mdb is " + std::to_string(m.file_bytes) +
                    " bytes)" + (ec ? "; " + why : std::string{}));
    return errc::corrupted;
  }
  return {};
}

}  // namespace switchyard::storage

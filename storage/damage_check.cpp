#include "storage/damage_check.hpp"

#include "storage/data_file.hpp"
#include "storage/lmdb_guard.hpp"
#include "storage/lmdb_txn.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace switchyard::storage {

using log_codec::get_le;
using log_codec::record_key_size;
using log_codec::stream_meta;

void report(diagnostics* diag, std::string_view stream, std::uint64_t seq, std::string message) {
  if (!diag) return;
  diag->stream = std::string(stream);
  diag->seq = seq;
  diag->message = std::move(message);
}

std::string where(std::string_view stream, std::uint64_t seq) {
  std::string out = "stream '" + std::string(stream) + "'";
  if (seq != 0) out += ", record " + std::to_string(seq);
  return out;
}

damage_check::damage_check(const map_space& space, const log_codec::dbs& dbs) : space_(space), dbs_(dbs) {}

void damage_check::attach(MDB_env* env) {
  env_ = env;
  int major = 0, minor = 0;
  mdb_version(&major, &minor, nullptr);
  know_layout_ = major == 0 && minor == 9 && space_.page_size() > lmdb_layout::page_header;
}

// Looks up the mapping holding `p`, a pointer LMDB handed out, in
// /proc/self/maps: if it is a mapping of data.mdb, `base` becomes the
// address of file offset 0 (and is kept in map_base_); else `p` is in a
// page a write transaction copied or made (LMDB keeps those on the heap).
damage_check::located damage_check::locate_map(std::uintptr_t p, std::uintptr_t& base) const {
  switchyard::lock_guard guard(map_lookup_);
  if ((base = map_base_.load(std::memory_order_acquire)) != 0) return located::map;
  if (map_unknown_) return located::unknown;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) {
    map_unknown_ = true;
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
  map_base_.store(base, std::memory_order_release);
  return located::map;
}

void damage_check::locate_map_now() {
  txn t;
  if (t.begin(env_, MDB_RDONLY)) return;
  MDB_val k = view(log_codec::format_key), v{};
  std::uintptr_t base = 0;
  if (lmdb_guard::get(t.get(), dbs_.metadata, &k, &v) == MDB_SUCCESS)
    locate_map(reinterpret_cast<std::uintptr_t>(v.mv_data), base);
}

void damage_check::map_moved() {
  map_base_.store(0, std::memory_order_release);  // the map may have moved: look it up again
  locate_map_now();
}

std::uint64_t damage_check::refresh_file_size() const {
  struct stat st {};
  if (::fstat(space_.data_fd(), &st) != 0) return file_bytes_.load(std::memory_order_relaxed);
  const auto now = static_cast<std::uint64_t>(st.st_size);
  std::uint64_t seen = file_bytes_.load(std::memory_order_relaxed);
  while (seen < now && !file_bytes_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  return std::max(seen, now);
}

bool damage_check::readable(const void* ptr, std::size_t n) const {
  const std::size_t map_size = space_.map_size(), page_size = space_.page_size();
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::uintptr_t base = map_base_.load(std::memory_order_acquire);
  if (base == 0) {
    const auto where = locate_map(p, base);
    if (where == located::unknown) return true;  // cannot tell: LMDB's word
    if (where == located::elsewhere) return n <= page_size;
  }
  if (p < base || p - base >= map_size) return n <= page_size;
  const std::uint64_t off = p - base;
  if (n > map_size - off) return false;
  const std::uint64_t end = off + n;
  return end <= file_bytes_.load(std::memory_order_relaxed) || end <= refresh_file_size();
}

bool damage_check::in_map(const void* ptr) const {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  const std::uintptr_t base = map_base_.load(std::memory_order_acquire);
  return base != 0 && p >= base && p - base < space_.map_size();
}

std::uint64_t damage_check::page_of(const void* p) const {
  return (reinterpret_cast<std::uintptr_t>(p) - map_base_.load(std::memory_order_acquire)) / space_.page_size();
}

const char* damage_check::check_record(const MDB_val& k, const MDB_val& v) const {
  if (k.mv_size != record_key_size) return "its key is damaged";
  if (v.mv_size < log_codec::record_header) return "its value is shorter than a record header";
  const std::size_t map_size = space_.map_size(), page_size = space_.page_size();
  // The common case first (a few compares per record, no division): a
  // value in its key's page, so key and value are one range of a page.
  const std::uintptr_t base = map_base_.load(std::memory_order_acquire);
  const auto kp = reinterpret_cast<std::uintptr_t>(k.mv_data), vp = reinterpret_cast<std::uintptr_t>(v.mv_data);
  if (know_layout_ && base != 0 && kp >= base && kp - base < map_size && vp > kp) {
    const std::uint64_t koff = kp - base, end = vp - base + v.mv_size;
    const unsigned page_shift = space_.page_shift();
    if ((end - 1) >> page_shift == koff >> page_shift)
      return end <= file_bytes_.load(std::memory_order_relaxed) || end <= refresh_file_size()
                 ? nullptr
                 : "its value lies outside the data file (a damaged length or page number)";
  }
  if (!readable(k.mv_data, k.mv_size)) return "its key is damaged";
  if (!readable(v.mv_data, v.mv_size)) return "its value lies outside the data file (a damaged length or page number)";
  if (!know_layout_ || base == 0) return nullptr;
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
// agrees with their length. Reads only the page and overflow headers;
// nullptr when fine or when the layout or the map is unknown.
const char* damage_check::check_leaf(std::uint64_t pgno) const {
  namespace L = lmdb_layout;
  const std::size_t map_size = space_.map_size(), page_size = space_.page_size();
  const std::uintptr_t base = map_base_.load(std::memory_order_acquire);
  if (!know_layout_ || base == 0) return nullptr;
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
    if (!(get_le<std::uint16_t>(op + L::flags_offset) & L::p_overflow) ||
        get_le<std::uint32_t>(op + L::pages_offset) != pages)
      return "a node's overflow pages disagree with its length";
  }
  return nullptr;
}

const char* damage_check::check_trim_pages(MDB_txn* t, const MDB_val& key) const {
  namespace L = lmdb_layout;
  if (!know_layout_ || !in_map(key.mv_data)) return nullptr;
  const std::uint64_t here = page_of(key.mv_data);
  if (const char* why = check_leaf(here)) return why;
  const auto* pg =
      reinterpret_cast<const std::byte*>(map_base_.load(std::memory_order_acquire) + here * space_.page_size());
  const std::size_t nodes = (get_le<std::uint16_t>(pg + 12) - L::page_header) / 2;
  if (nodes == 0) return nullptr;
  cursor c(t, dbs_.records);
  if (c.status() != MDB_SUCCESS) return "LMDB cannot open a cursor";
  for (const auto& [index, step] : {std::pair{std::size_t{0}, MDB_PREV}, {nodes - 1, MDB_NEXT}}) {
    // The first (last) key of the page, then the one before (after) it.
    MDB_val k{record_key_size,
              const_cast<std::byte*>(pg + get_le<std::uint16_t>(pg + L::page_header + 2 * index) + L::node_header)},
        v{};
    int rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_SET_KEY);
    if (rc == MDB_SUCCESS) rc = lmdb_guard::cursor_get(c.get(), &k, &v, step);
    if (rc == MDB_NOTFOUND) continue;
    if (rc != MDB_SUCCESS || !in_map(k.mv_data)) return "LMDB cannot step to a neighbouring page";
    if (const char* why = check_leaf(page_of(k.mv_data))) return why;
  }
  return nullptr;
}

std::expected<stream_meta, std::error_code> damage_check::load_meta(MDB_txn* t, std::string_view name,
                                                                    diagnostics* diag) const {
  MDB_val k = view(name), v{};
  const int rc = lmdb_guard::get(t, dbs_.streams, &k, &v);
  if (rc != MDB_SUCCESS) {
    const auto ec = from_lmdb(rc);
    if (ec == errc::corrupted) report(diag, name, 0, where(name) + ": LMDB reports " + mdb_strerror(rc));
    return std::unexpected(ec);
  }
  return check_meta(name, v, diag);
}

std::expected<stream_meta, std::error_code> damage_check::check_meta(std::string_view name, const MDB_val& v,
                                                                     diagnostics* diag) const {
  if (!readable(v.mv_data, v.mv_size)) {
    report(diag, name, 0, where(name) + ": its metadata lies outside the data file");
    return std::unexpected(make_error_code(errc::corrupted));
  }
  auto m = stream_meta::decode(v);
  if (!m) {
    report(diag, name, 0, where(name) + ": its metadata has the wrong size (" + std::to_string(v.mv_size) + " bytes)");
    return m;
  }
  const bool consistent = m->records == 0
                              ? m->first == m->last + 1
                              : m->first >= 1 && m->first <= m->last && m->records == m->last - m->first + 1;
  if (!consistent) {
    report(diag, name, 0,
           where(name) + ": its metadata is inconsistent (first " + std::to_string(m->first) + ", last " +
               std::to_string(m->last) + ", " + std::to_string(m->records) + " records)");
    return std::unexpected(make_error_code(errc::corrupted));
  }
  return m;
}

std::expected<std::optional<retention>, std::error_code> damage_check::load_retention(MDB_txn* t, std::string_view name,
                                                                                      diagnostics* diag) const {
  if (!dbs_.has_retention) return std::optional<retention>{};
  MDB_val k = view(name), v{};
  const int rc = lmdb_guard::get(t, dbs_.own_retention, &k, &v);
  if (rc == MDB_NOTFOUND) return std::optional<retention>{};
  if (rc != MDB_SUCCESS) return std::unexpected(from_lmdb(rc));
  if (!readable(v.mv_data, v.mv_size)) {
    report(diag, name, 0, where(name) + ": its retention entry lies outside the data file");
    return std::unexpected(make_error_code(errc::corrupted));
  }
  auto r = log_codec::decode_retention(v);
  if (!r) {
    report(diag, name, 0, where(name) + ": its retention entry is damaged");
    return std::unexpected(r.error());
  }
  return std::optional<retention>{*r};
}

}  // namespace switchyard::storage

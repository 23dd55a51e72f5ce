#pragma once
// The sequence log's checks against damage (docs/storage.md, "Damage"; the
// contract in storage/sequence_log.hpp): before a byte of a key or value
// LMDB hands out is read, it is checked against LMDB's map and data.mdb's
// current size, and (LMDB 0.9) against LMDB's page layout; a stream's
// metadata and retention entry are checked for size and consistency; a
// trim checks the leaf pages it deletes from and their neighbours. Private
// to storage; sequence_log, its trims and verify (storage/log_walker.hpp)
// use it.
//
// Where LMDB mapped data.mdb is learnt from the first pointer into the map
// it hands out (LMDB 0.9 does not say: /proc/self/maps), and again after
// the map moved (map_moved()).
//
// Threads: the checks are const and run on any thread, inside a
// transaction during which the caller holds the map (map_space::hold(), or
// the writer thread); they read only the bytes they check, the map's page
// headers, /proc/self/maps (once per map) and fstat (when the file grew).
// attach() and map_moved() are open()'s and the resizing writer's.

#include "storage/log_codec.hpp"
#include "storage/map_space.hpp"
#include "storage/sequence_log.hpp"

#include "common/mutex.hpp"

#include <lmdb.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace switchyard::storage {

// Fills `diag` (if given) for an error about `stream` (and record `seq`).
void report(diagnostics* diag, std::string_view stream, std::uint64_t seq, std::string message);
// "stream 'orders'" / "stream 'orders', record 8", for messages.
std::string where(std::string_view stream, std::uint64_t seq = 0);

class damage_check {
 public:
  // Borrows `space` (page size, map size, data file) and `dbs` for its
  // lifetime (the log's).
  damage_check(const map_space& space, const log_codec::dbs& dbs);
  damage_check(const damage_check&) = delete;
  damage_check& operator=(const damage_check&) = delete;

  // At open, after map_space::attach(): borrows `env` (it outlives this
  // object) and learns whether the LMDB library is 0.9, whose page layout
  // (storage/data_file.hpp, lmdb_layout) the record checks use; with
  // another version only the bounds are checked.
  void attach(MDB_env* env);
  // Looks the map up at once, from a value read in a read transaction (so
  // from the map, not from a write transaction's heap copies): after open.
  // Without a value to go by (an empty log), the first pointer a read hands
  // out does it. Caller holds the map exclusively, or is open().
  void locate_map_now();
  // The map was resized and may have moved: forgets where it was and looks
  // it up again. Caller holds the map exclusively (map_space's on_remap).
  void map_moved();

  // data.mdb's size now (fstat), kept as the size last seen; it only grows
  // while the log is open.
  std::uint64_t refresh_file_size() const;
  // Whether [ptr, ptr + n), from LMDB, lies inside the map and inside
  // data.mdb as it is now; nothing of it is read. No system call unless
  // the range passes the size last seen (the file grows): then one fstat.
  // A pointer outside the map is into a page a write transaction copied
  // (LMDB keeps those on the heap; read transactions only see the map):
  // fine if no longer than a page.
  bool readable(const void* ptr, std::size_t n) const;
  // Whether `ptr` (from LMDB) points into the map, its place known.
  bool in_map(const void* ptr) const;
  // The page of a pointer into the map (its place known).
  std::uint64_t page_of(const void* p) const;

  // A record as a read transaction got it from LMDB (so from the map),
  // checked before any byte of it is read: the key 16 bytes inside the
  // file; the value at least a header, inside the map and the file, and
  // (LMDB 0.9) where LMDB stores values: in the key's page, or on overflow
  // pages whose header agrees with its length (a record failing this must
  // not be deleted either: LMDB would move or free bytes by the damaged
  // length). Returns what is wrong (a static string), or nullptr.
  const char* check_record(const MDB_val& k, const MDB_val& v) const;
  // Before a trim deletes from the leaf holding `key` (read in `t`, a read
  // transaction): that leaf and the leaves before and after it in key
  // order (the siblings LMDB may merge it with) hold only nodes LMDB can
  // move, merge and delete by what they store. Returns what is wrong (a
  // static string), or nullptr.
  const char* check_trim_pages(MDB_txn* t, const MDB_val& key) const;

  // A stream's metadata as LMDB handed it out (`v`, stored under `name`),
  // checked: inside the file, of the right size, and consistent
  // (sequences first..last hold `records` records). Errors: corrupted
  // (`diag` says what).
  std::expected<log_codec::stream_meta, std::error_code> check_meta(std::string_view name, const MDB_val& v,
                                                                    diagnostics* diag = nullptr) const;
  // The metadata of stream `name` in transaction `t`, checked as above.
  // Errors: not_found, corrupted (`diag` says what), LMDB's.
  std::expected<log_codec::stream_meta, std::error_code> load_meta(MDB_txn* t, std::string_view name,
                                                                   diagnostics* diag = nullptr) const;
  // The stream's own retention limits in transaction `t`, nullopt if it
  // has none, its entry checked (inside the file, decodable). Errors:
  // corrupted (`diag` says what), LMDB's (`diag` untouched).
  std::expected<std::optional<retention>, std::error_code> load_retention(MDB_txn* t, std::string_view name,
                                                                          diagnostics* diag = nullptr) const;

 private:
  enum class located { map, elsewhere, unknown };
  located locate_map(std::uintptr_t p, std::uintptr_t& base) const;
  const char* check_leaf(std::uint64_t pgno) const;

  const map_space& space_;
  const log_codec::dbs& dbs_;
  MDB_env* env_ = nullptr;  // borrowed, from attach()
  bool know_layout_ = false;
  // Where LMDB mapped data.mdb (the address of file offset 0). LMDB 0.9
  // does not say (me_mapaddr is only the MDB_FIXEDMAP hint), so it is
  // looked up in /proc/self/maps from the first pointer into the map LMDB
  // hands out, and again after the map moved (map_moved clears it). 0: not
  // known yet.
  mutable std::atomic<std::uintptr_t> map_base_{0};
  mutable switchyard::mutex map_lookup_;  // one lookup at a time (locate_map)
  // /proc/self/maps cannot be read: no bounds checks.
  mutable bool map_unknown_ SWITCHYARD_GUARDED_BY(map_lookup_) = false;
  // data.mdb's size at the last look; it only grows while the log is open.
  mutable std::atomic<std::uint64_t> file_bytes_{0};
};

}  // namespace switchyard::storage

#pragma once
// The sequence log's space management (docs/storage.md, "Space"; the
// contract in storage/sequence_log.hpp): the size of LMDB's map (its
// first size, growing it when full towards the appends' ceiling or, for
// trims, max_map_size, and giving appends back only their limit after a
// write used the reserves), the data file allocated on disk ahead of the
// data (fallocate), the disk reserve every append leaves for trims, and
// what a commit refused for want of space means (storage_full). Private to
// storage; sequence_log delegates to it.
//
// It owns the log's page size: page_size() is LMDB's, read once when the
// environment is attached, and every other part of the log uses it.
//
// Threads: page_size(), page_shift() and data_fd() are fixed after
// attach(), any thread. map_size() changes only under the resize lock:
// read it holding hold() (readers), or from the writer thread. Everything
// else is the writer's (one thread at a time: the group committer), or
// open()'s before the log is shared.

#include "storage/log_codec.hpp"
#include "storage/sequence_log.hpp"

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <system_error>

namespace switchyard::storage {

class map_space {
 public:
  // Borrows `opts` and `dbs` for its lifetime (the log's). `on_remap` runs
  // after every resize, with the resize lock held exclusively (the map may
  // have moved): it must not call hold().
  map_space(const log_options& opts, const log_codec::dbs& dbs, std::function<void()> on_remap);
  map_space(const map_space&) = delete;
  map_space& operator=(const map_space&) = delete;

  // The map to give LMDB before mdb_env_open, for the data file
  // `data_file`: initial_map_size within the appends' ceiling; read-only,
  // room for what a writer next door adds meanwhile.
  std::size_t initial_map_size(const std::filesystem::path& data_file) const;
  // At open, after mdb_env_open: borrows `env` (it outlives this object)
  // and takes from it the map size, the page size and the data file's
  // descriptor (LMDB's own), and sizes the disk reserve. Changes nothing on
  // disk. Errors: internal (LMDB has no data file), LMDB's error reading
  // its page size.
  std::error_code attach(MDB_env* env);

  // LMDB's page size, a power of two (0 before attach()), and its log2.
  std::size_t page_size() const noexcept { return page_size_; }
  unsigned page_shift() const noexcept { return page_shift_; }
  // The map's size now (see above for who may read it).
  std::size_t map_size() const noexcept { return map_size_; }
  // data.mdb's descriptor, LMDB's own (borrowed; -1 before attach()).
  int data_fd() const noexcept { return fd_; }
  // Bytes of the data file allocated on disk (0 when not preallocating),
  // and the disk reserve appends leave free, as the writer last saw them.
  std::uint64_t allocated() const noexcept { return allocated_; }
  std::uint64_t reserve_bytes() const noexcept { return std::uint64_t{disk_reserve_pages()} * page_size_; }

  // Keeps the map where it is while the caller's transaction reads it:
  // readers and the writer hold this for each transaction; a resize waits
  // for them (LMDB requires no live transaction then).
  [[nodiscard]] std::shared_lock<std::shared_mutex> hold() const { return std::shared_lock(resize_); }

  // At the end of open, once the log is known to be ours (its format
  // checked): preallocating, the file allocated on disk over the data
  // (holes LMDB never wrote included), the disk reserve and one step
  // ahead, then the map kept within the appends' limit. Best effort on a
  // full disk: the log opens with what is allocated. A filesystem without
  // fallocate turns preallocation off. Does nothing read-only. Errors:
  // io_error (fstat), a resize's.
  std::error_code preallocate();

  // Before each attempt of a write transaction: forgets why the last one
  // was short of space.
  void begin_write() noexcept;
  // A commit's error as callers see it (`rc`: LMDB's return code): LMDB 0.9
  // reports a short write as EIO, which on a nearly full filesystem is the
  // disk filling up (storage_full). Notes when the filesystem had no room,
  // for grow().
  std::error_code commit_error(int rc);
  // Makes room after a write failed with storage_full: grows the map
  // towards its limit for the write (`reserve`: a write that may use the
  // reserves: trims, retention changes), or allocates more of the file.
  // storage_full if nothing helps (then the write fails with it).
  std::error_code grow(bool reserve);
  // A write that may have used the reserves gives appends back only their
  // own limit. Errors: a resize's.
  std::error_code keep_reserve();

  // Pages of every B-tree (LMDB's free list and main tree, and the log's)
  // and each one's depth, as transaction `t` sees them.
  struct tree_pages {
    std::size_t total = 0;
    std::size_t depth_free = 0, depth_main = 0, depth_streams = 0, depth_records = 0, depth_meta = 0;
  };
  // Errors: LMDB's (mdb_stat).
  std::expected<tree_pages, std::error_code> count_pages(MDB_txn* t) const;
  // An append's disk reserve check, in its write transaction `t` just
  // before the commit: storage_full unless the file keeps the disk reserve
  // free for the next transaction. `streams_touched`: streams the append
  // wrote to; `streams_trimmed`: of them, those its retention trimmed;
  // `removed`: pages that retention emptied. Errors: storage_full, LMDB's.
  std::error_code check_disk_reserve(MDB_txn* t, std::size_t streams_touched, std::size_t streams_trimmed,
                                     std::size_t removed);

 private:
  std::size_t append_ceiling() const;
  std::size_t map_limit(bool reserve) const;
  std::size_t disk_reserve_pages() const noexcept { return pool_pages_ + tail_pages_; }
  std::size_t used_bytes() const;
  std::error_code resize_map(std::size_t size);
  bool extend_file();

  const log_options& opts_;
  const log_codec::dbs& dbs_;
  std::function<void()> on_remap_;
  MDB_env* env_ = nullptr;  // borrowed, from attach()
  std::size_t map_size_ = 0;
  std::size_t page_size_ = 0;  // the log's one page size: LMDB's
  unsigned page_shift_ = 0;
  // Readers and the writer hold it shared for a transaction; growing the
  // map takes it exclusively.
  mutable std::shared_mutex resize_;
  // The data file (borrowed from the env), the bytes of it allocated on
  // disk (0: not preallocating), and the disk reserve appends leave free:
  // a pool of pages for trims, and a tail of contiguous pages past the
  // appends' map limit (a trim of the largest record lists all its freed
  // pages in one free-list entry, whose overflow pages must be contiguous).
  // Both sized by attach().
  int fd_ = -1;
  std::uint64_t allocated_ = 0;
  std::size_t pool_pages_ = 16;
  std::size_t tail_pages_ = 4;
  // Set by a write that failed for want of disk space, and why: the
  // append's reserve check (more of the file would help), or the
  // filesystem refused the commit (a bigger map would not help).
  bool short_of_reserve_ = false;
  bool disk_refused_ = false;
};

}  // namespace switchyard::storage

#pragma once
// The full walk behind sequence_log::verify(): one read transaction over
// the whole log. What it checks, what it reports and its thread rules are
// verify()'s contract in storage/sequence_log.hpp (docs/storage.md,
// "Damage": "On demand, or at start"); this class only carries one walk's
// state through its steps. Private to storage; storage/log_verifier.hpp
// runs verify() in a child process, as damage LMDB itself trips on can
// still fault here.

#include "storage/damage_check.hpp"
#include "storage/log_codec.hpp"
#include "storage/map_space.hpp"
#include "storage/sequence_log.hpp"

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace switchyard::storage {

class log_walker {
 public:
  // Borrows the log's environment, databases, checks and space (which
  // holds the map in place during the walk) for the walker's lifetime.
  // Records at most `max_problems` problems (all are counted).
  log_walker(MDB_env* env, const log_codec::dbs& dbs, const damage_check& checks, const map_space& space,
             std::size_t max_problems);
  log_walker(const log_walker&) = delete;
  log_walker& operator=(const log_walker&) = delete;

  // Walks the log once (see above) and returns what it found. `progress`,
  // if set, is called on this thread every 65,536 records and at the end.
  // A walk that cannot begin is a report with that problem, not an error.
  verify_report run(const std::function<void(const verify_progress&)>& progress);

 private:
  // A stream as the walk found it.
  struct stream_state {
    std::string name;
    log_codec::stream_meta m;
    std::uint64_t next = 0;     // the sequence the walk expects next
    bool ended = false;         // the walk met record last_seq (next may have wrapped past 2^64 - 1)
    std::uint64_t present = 0;  // records found in first..last
    std::uint64_t bytes = 0;    // their destination + payload bytes
    bool holes = false;         // a missing or damaged record was reported
  };

  void problem(std::string_view stream, std::uint64_t seq, std::string what);
  // Each step reads in `t`, the walk's transaction.
  template <class Visit>
  void walk_names(MDB_txn* t, MDB_dbi dbi, std::string_view no_end, std::string_view bad_name, std::string_view doing,
                  Visit visit);
  void walk_streams(MDB_txn* t);
  void walk_retention(MDB_txn* t);
  void check_meta_db(MDB_txn* t);
  void walk_records(MDB_txn* t, const std::function<void(const verify_progress&)>& progress);
  void check_stream_counts();
  void check_pages(MDB_txn* t, std::uint64_t last_page);

  MDB_env* env_;
  const log_codec::dbs& dbs_;
  const damage_check& checks_;
  const map_space& space_;
  std::size_t max_problems_;
  verify_report r_;
  // Every walk below ends within this many steps, even over a damaged
  // B-tree that loops: no entry takes less than 8 bytes of the file.
  std::uint64_t max_steps_ = 0;
  std::unordered_map<std::uint64_t, stream_state> by_id_;
  std::unordered_set<std::string> names_;
  std::uint64_t max_id_ = 0;
  std::optional<std::uint64_t> walk_stopped_at_;  // the stream id where LMDB gave up on the records, if it did
};

}  // namespace switchyard::storage

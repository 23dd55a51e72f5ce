#include "storage/log_walker.hpp"

#include "storage/data_file.hpp"
#include "storage/lmdb_guard.hpp"
#include "storage/lmdb_txn.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace switchyard::storage {

namespace {

using log_codec::get_le;

std::string lmdb_says(std::string_view doing, int rc) {
  return std::string(doing) + ": LMDB reports " + mdb_strerror(rc);
}

}  // namespace

log_walker::log_walker(MDB_env* env, const log_codec::dbs& dbs, const damage_check& checks, const map_space& space,
                       std::size_t max_problems)
    : env_(env), dbs_(dbs), checks_(checks), space_(space), max_problems_(max_problems) {}

void log_walker::problem(std::string_view stream, std::uint64_t seq, std::string what) {
  ++r_.problem_count;
  if (r_.problems.size() < max_problems_) r_.problems.push_back({std::string(stream), seq, std::move(what)});
}

verify_report log_walker::run(const std::function<void(const verify_progress&)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  const auto finish = [&] {
    r_.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return r_;
  };
  const auto hold = space_.hold();
  txn t;
  if (auto ec = t.begin(env_, MDB_RDONLY)) {
    problem({}, 0, "cannot begin a read transaction: " + ec.message());
    return finish();
  }
  MDB_envinfo env_info{};
  mdb_env_info(env_, &env_info);
  const bool same_snapshot = env_info.me_last_txnid == mdb_txn_id(t.get());
  max_steps_ = checks_.refresh_file_size() / 8 + 16;

  walk_streams(t.get());
  if (dbs_.has_retention) walk_retention(t.get());
  check_meta_db(t.get());
  walk_records(t.get(), progress);
  check_stream_counts();
  // Checked against the current meta page, so only if no writer committed
  // since the snapshot was taken.
  if (same_snapshot && !walk_stopped_at_) check_pages(t.get(), env_info.me_last_pgno);
  if (progress) progress({r_.streams, r_.records, r_.bytes});
  return finish();
}

// Walks `dbi`, keyed by stream name, in key order: `visit(name, value)`
// for each entry whose name is readable. Reports a walk that does not end
// (`no_end`), an unreadable name (`bad_name`) and LMDB's error (`doing`).
template <class Visit>
void log_walker::walk_names(MDB_txn* t, MDB_dbi dbi, std::string_view no_end, std::string_view bad_name,
                            std::string_view doing, Visit visit) {
  cursor c(t, dbi);
  MDB_val k{}, v{};
  int rc = c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : c.status();
  for (std::uint64_t step = 0; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
    if (++step > max_steps_) {
      problem({}, 0, std::string(no_end));
      break;
    }
    if (!checks_.readable(k.mv_data, k.mv_size)) {
      problem({}, 0, std::string(bad_name));
      continue;
    }
    visit(std::string(static_cast<const char*>(k.mv_data), k.mv_size), v);
  }
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) problem({}, 0, lmdb_says(doing, rc));
}

// Streams and their retention entries.
void log_walker::walk_streams(MDB_txn* t) {
  walk_names(t, dbs_.streams, "the streams database does not end (a loop in a damaged B-tree)",
             "a stream name lies outside the data file", "walking the streams",
             [&](const std::string& name, const MDB_val& v) {
               diagnostics d;
               auto m = checks_.check_meta(name, v, &d);
               if (!m) {
                 problem(name, 0, d.message);
                 return;
               }
               if (m->id == 0 || by_id_.contains(m->id)) {
                 problem(name, 0,
                         where(name) + ": its id " + std::to_string(m->id) +
                             (m->id == 0 ? " is not valid" : " is also stream '" + by_id_.at(m->id).name + "''s"));
                 return;
               }
               if (auto own = checks_.load_retention(t, name, &d); !own) problem(name, 0, d.message);
               ++r_.streams;
               max_id_ = std::max(max_id_, m->id);
               names_.insert(name);
               by_id_.emplace(m->id, stream_state{name, *m, m->first});
             });
}

// Retention entries without a stream.
void log_walker::walk_retention(MDB_txn* t) {
  walk_names(t, dbs_.own_retention, "the retention database does not end (a loop in a damaged B-tree)",
             "a retention entry's stream name lies outside the data file", "walking the retention entries",
             [&](const std::string& name, const MDB_val&) {
               if (!names_.contains(name)) problem(name, 0, where(name) + " has a retention entry but no metadata");
             });
}

// The "meta" database: the format stamp and the last stream id.
void log_walker::check_meta_db(MDB_txn* t) {
  MDB_val k = view(log_codec::format_key), v{};
  const int rc = lmdb_guard::get(t, dbs_.metadata, &k, &v);
  if (rc == MDB_SUCCESS) {
    if (v.mv_size != 8 || !checks_.readable(v.mv_data, 8))
      problem({}, 0, "the format stamp is damaged");
    else if (const auto version = get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data));
             version != log_format_version)
      problem({}, 0, "the format stamp says " + std::to_string(version));
  } else if (rc != MDB_NOTFOUND || !by_id_.empty()) {
    problem(
        {}, 0,
        rc == MDB_NOTFOUND ? std::string("the format stamp is missing") : lmdb_says("reading the format stamp", rc));
  }
  k = view(log_codec::last_stream_key);
  const int rc2 = lmdb_guard::get(t, dbs_.metadata, &k, &v);
  if (rc2 == MDB_SUCCESS && (v.mv_size != 8 || !checks_.readable(v.mv_data, 8)))
    problem({}, 0, "the last stream id is damaged");
  else if (rc2 == MDB_SUCCESS && get_le<std::uint64_t>(static_cast<const std::byte*>(v.mv_data)) < max_id_)
    problem({}, 0, "the last stream id is below a stream's id " + std::to_string(max_id_));
  else if (rc2 == MDB_NOTFOUND && max_id_ != 0)
    problem({}, 0, "the last stream id is missing");
  else if (rc2 != MDB_SUCCESS && rc2 != MDB_NOTFOUND)
    problem({}, 0, lmdb_says("reading the last stream id", rc2));
}

// Every record, in key order: stream by stream, sequence by sequence.
void log_walker::walk_records(MDB_txn* t, const std::function<void(const verify_progress&)>& progress) {
  cursor c(t, dbs_.records);
  MDB_val k{}, v{};
  int rc = c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : c.status();
  std::uint64_t prev_id = 0, prev_seq = 0;
  std::unordered_set<std::uint64_t> orphans;
  for (std::uint64_t step = 0; rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
    if (++step > max_steps_) {
      problem({}, 0, "the records database does not end (a loop in a damaged B-tree)");
      break;
    }
    if (progress && step % 65536 == 0) progress({r_.streams, r_.records, r_.bytes});
    const auto* kb = static_cast<const std::byte*>(k.mv_data);
    if (k.mv_size != log_codec::record_key_size || !checks_.readable(kb, log_codec::record_key_size)) {
      problem({}, 0,
              "a record key after stream id " + std::to_string(prev_id) + ", sequence " + std::to_string(prev_seq) +
                  " is damaged");
      continue;
    }
    const std::uint64_t id = log_codec::key_stream(kb), seq = log_codec::key_seq(kb);
    if (step > 1 && (id < prev_id || (id == prev_id && seq <= prev_seq)))
      problem({}, 0,
              "record keys out of order after stream id " + std::to_string(prev_id) + ", sequence " +
                  std::to_string(prev_seq));
    prev_id = id;
    prev_seq = seq;
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) {
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
    if (const char* why = checks_.check_record(k, v)) {
      st.holes = true;
      problem(st.name, seq, where(st.name, seq) + ": " + why);
      continue;
    }
    const auto* vb = static_cast<const std::byte*>(v.mv_data);
    const std::size_t size = v.mv_size - log_codec::record_header;
    ++r_.records;
    r_.bytes += v.mv_size;
    st.bytes += size;
    if (!log_codec::checksum_matches(seq, vb, v.mv_size)) {
      problem(st.name, seq, where(st.name, seq) + ": checksum mismatch");
      continue;
    }
    if (!log_codec::destination_fits(vb, size))
      problem(st.name, seq, where(st.name, seq) + ": its destination length is damaged");
  }
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
    // LMDB cannot go on (and ends the transaction): what lies beyond is
    // unchecked, not missing.
    walk_stopped_at_ = prev_id;
    problem(prev_id != 0 && by_id_.contains(prev_id) ? by_id_.at(prev_id).name : std::string{}, 0,
            lmdb_says(prev_id == 0 ? std::string("walking the records from the first")
                                   : "walking the records after stream id " + std::to_string(prev_id) + ", sequence " +
                                         std::to_string(prev_seq),
                      rc) +
                "; the records after it were not checked");
  }
}

// Per stream: its records up to last, and the counts of its metadata.
void log_walker::check_stream_counts() {
  for (auto& [id, st] : by_id_) {
    if (walk_stopped_at_ && id >= *walk_stopped_at_) continue;
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
}

// Pages: each page up to the last (`last_page`, of the current meta page)
// is used by exactly one database or on the free list (LMDB's own
// invariant, its mdb_audit).
void log_walker::check_pages(MDB_txn* t, std::uint64_t last_page) {
  namespace L = lmdb_layout;
  std::uint64_t used = 0, free = 0;
  bool counted = true;
  const auto add = [&](MDB_dbi dbi) {
    MDB_stat st{};
    if (mdb_stat(t, dbi, &st) != MDB_SUCCESS) return false;
    used += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
    return true;
  };
  MDB_dbi main_db = 0;
  counted = add(L::free_dbi) && lmdb_guard::dbi_open(t, nullptr, 0, &main_db) == MDB_SUCCESS && add(main_db);
  // Every named database: the keys of the main one.
  {
    cursor c(t, main_db);
    MDB_val k{}, v{};
    int rc = counted && c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : MDB_NOTFOUND;
    for (std::uint64_t step = 0; counted && rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
      MDB_dbi dbi = 0;
      if (++step > max_steps_ || !checks_.readable(k.mv_data, k.mv_size)) {
        counted = false;
        break;
      }
      const std::string name(static_cast<const char*>(k.mv_data), k.mv_size);
      counted = lmdb_guard::dbi_open(t, name.c_str(), 0, &dbi) == MDB_SUCCESS && add(dbi);
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) counted = false;
  }
  {
    cursor c(t, L::free_dbi);  // LMDB's free list: txn id -> count, then page numbers
    MDB_val k{}, v{};
    int rc = counted && c.status() == MDB_SUCCESS ? lmdb_guard::cursor_get(c.get(), &k, &v, MDB_FIRST) : MDB_NOTFOUND;
    for (std::uint64_t step = 0; counted && rc == MDB_SUCCESS; rc = lmdb_guard::cursor_get(c.get(), &k, &v, MDB_NEXT)) {
      if (++step > max_steps_ || v.mv_size < 8 || !checks_.readable(v.mv_data, v.mv_size)) {
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
    r_.pages_checked = true;
    const std::uint64_t pages = last_page + 1;
    if (used + free + L::metas != pages)
      problem({}, 0,
              "LMDB's pages do not add up: " + std::to_string(used) + " in use + " + std::to_string(free) +
                  " free + 2 meta pages, but the file has " + std::to_string(pages) +
                  " (damaged B-tree counts or free list)");
  }
}

}  // namespace switchyard::storage

#pragma once
// Owning handles of LMDB transactions and cursors for the sequence log's
// code (private to storage): a transaction aborts and a cursor closes when
// its handle goes out of scope, on every path. A handle is used by the thread
// that made it (LMDB: a write transaction on its thread; the log opens its
// environment MDB_NOTLS, so a read transaction may move, never be shared).

#include "storage/errc.hpp"

#include <lmdb.h>

#include <string_view>
#include <system_error>

namespace switchyard::storage {

// A transaction that aborts unless committed.
class txn {
 public:
  txn() = default;
  txn(const txn&) = delete;
  txn& operator=(const txn&) = delete;
  ~txn() { abort(); }
  // Begins a transaction on `env` (borrowed; it outlives the handle) with
  // mdb_txn_begin's `flags`. Errors: LMDB's, through from_lmdb().
  std::error_code begin(MDB_env* env, unsigned flags) { return from_lmdb(mdb_txn_begin(env, nullptr, flags, &t_)); }
  std::error_code commit() { return from_lmdb(commit_rc()); }
  // The same with LMDB's own return code (MDB_* or errno). The handle is
  // empty afterwards, whatever the result (LMDB frees a failed commit).
  int commit_rc() {
    const int rc = mdb_txn_commit(t_);
    t_ = nullptr;
    return rc;
  }
  void abort() noexcept {
    if (t_) mdb_txn_abort(t_);
    t_ = nullptr;
  }
  // The transaction, or nullptr; borrowed while the handle holds it.
  MDB_txn* get() const noexcept { return t_; }

 private:
  MDB_txn* t_ = nullptr;
};

// A cursor on database `dbi` in transaction `t` (borrowed: it must outlive
// the cursor). status() is mdb_cursor_open's result; check it before use.
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

// An MDB_val over `s` (borrowed: LMDB only reads a key it is given).
inline MDB_val view(std::string_view s) { return {s.size(), const_cast<char*>(s.data())}; }

}  // namespace switchyard::storage

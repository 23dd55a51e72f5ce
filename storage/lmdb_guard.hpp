#pragma once
// Reading through LMDB without letting damage it meets in its own pages
// take the process down.
//
// LMDB 0.9 has no page checksums. On a damaged page it can assert (and
// abort: a cursor stepping onto a page that is not a leaf, such as a zeroed
// one), or fault (SIGSEGV, SIGBUS: a node whose flags say "duplicates"
// sends it through a null sub-cursor, a node offset points past the end of
// the file). The log's own checks run only after LMDB returns, so lookups
// and cursor steps run under a guard: LMDB's assertion callback and a
// SIGSEGV/SIGBUS handler jump back out of LMDB to the guarded call, which
// returns MDB_CORRUPTED; the caller then ends the transaction (aborting a
// write transaction).
//
// Why that is sound: a lookup or cursor step changes nothing but the
// cursor and holds no LMDB lock (the reader table's mutex is taken only by
// mdb_txn_begin, which is not guarded), and the jump skips only LMDB's C
// frames and the guarded call's own, which hold nothing with a destructor.
// Puts and deletes are never guarded: damage that makes them assert or
// fault still ends the process.
//
// A fault outside a guarded call is not ours: the handler passes it to
// whatever handled the signal before install() (a sanitizer's, a test
// framework's, or the default action: a core dump).

#include <lmdb.h>

#include <csetjmp>

namespace switchyard::storage {

class lmdb_guard {
 public:
  // Installs the SIGSEGV/SIGBUS handler (again, if something replaced it
  // since: after a fork that reset the signals, say) and returns the LMDB
  // assertion callback to give each environment (mdb_env_set_assert).
  // Thread-safe; cheap when already installed (two sigaction queries).
  static MDB_assert_func* install();

  // mdb_get / mdb_cursor_get under the guard: LMDB's result, or
  // MDB_CORRUPTED when LMDB asserted or faulted inside the call.
  static int get(MDB_txn* t, MDB_dbi dbi, MDB_val* k, MDB_val* v);
  static int cursor_get(MDB_cursor* c, MDB_val* k, MDB_val* v, MDB_cursor_op op);
  // mdb_dbi_open under the guard (it reads the main database).
  static int dbi_open(MDB_txn* t, const char* name, unsigned flags, MDB_dbi* dbi);
  // mdb_stat under the guard (a stale handle makes it read the main database).
  static int stat(MDB_txn* t, MDB_dbi dbi, MDB_stat* s);
};

}  // namespace switchyard::storage

#include "storage/lmdb_guard.hpp"

#include "common/mutex.hpp"

#include <signal.h>

namespace switchyard::storage {

namespace {

// The guarded call running on this thread, if any.
thread_local std::jmp_buf* active = nullptr;

switchyard::mutex install_mutex;
// What handled SIGSEGV and SIGBUS before install() (index 0 and 1).
// Written by install() under install_mutex; read by on_fault (see there).
struct sigaction previous[2] SWITCHYARD_GUARDED_BY(install_mutex);

void on_assert(MDB_env*, const char*) {
  if (std::jmp_buf* const guard = active) {
    active = nullptr;
    std::longjmp(*guard, 1);
  }
  // No guard: LMDB prints its message and aborts.
}

// A signal handler: it cannot take install_mutex, and reads `previous`
// without it. install() writes a signal's entry only before it makes this
// the signal's handler (never once it is), so the entry read here is
// written before the signal can arrive.
void on_fault(int sig, siginfo_t* info, void* context) SWITCHYARD_NO_THREAD_SAFETY_ANALYSIS {
  if (std::jmp_buf* const guard = active) {
    active = nullptr;
    std::longjmp(*guard, 1);  // SA_NODEFER: the signal is not blocked, no mask to restore
  }
  // Not a guarded call: hand it to whoever had the signal before.
  const struct sigaction& prev = previous[sig == SIGBUS ? 1 : 0];
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // The default action: put it back. A fault re-runs the faulting
  // instruction on return and ends the process; a signal sent by kill() is
  // raised again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace

MDB_assert_func* lmdb_guard::install() {
  switchyard::lock_guard lock(install_mutex);
  const int signals[2] = {SIGSEGV, SIGBUS};
  for (int i = 0; i < 2; ++i) {
    struct sigaction current {};
    if (::sigaction(signals[i], nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_fault) continue;  // ours already
    struct sigaction mine {};
    mine.sa_sigaction = on_fault;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&mine.sa_mask);
    previous[i] = current;
    ::sigaction(signals[i], &mine, nullptr);
  }
  return on_assert;
}

namespace {

// Runs `call` (an LMDB read) with a jump point set: LMDB's result, or
// MDB_CORRUPTED when it asserted or faulted inside. setjmp is in this frame,
// which stays live while `call` runs; after a jump only `outer` (set before
// setjmp, never changed) is read. `call` holds nothing with a destructor.
template <class Call>
int guarded(Call call) {
  std::jmp_buf guard;
  std::jmp_buf* const outer = active;
  if (setjmp(guard) != 0) {
    active = outer;
    return MDB_CORRUPTED;
  }
  active = &guard;
  const int rc = call();
  active = outer;
  return rc;
}

}  // namespace

int lmdb_guard::get(MDB_txn* t, MDB_dbi dbi, MDB_val* k, MDB_val* v) {
  return guarded([=] { return mdb_get(t, dbi, k, v); });
}

int lmdb_guard::cursor_get(MDB_cursor* c, MDB_val* k, MDB_val* v, MDB_cursor_op op) {
  return guarded([=] { return mdb_cursor_get(c, k, v, op); });
}

int lmdb_guard::dbi_open(MDB_txn* t, const char* name, unsigned flags, MDB_dbi* dbi) {
  return guarded([=] { return mdb_dbi_open(t, name, flags, dbi); });
}

int lmdb_guard::stat(MDB_txn* t, MDB_dbi dbi, MDB_stat* s) {
  return guarded([=] { return mdb_stat(t, dbi, s); });
}

}  // namespace switchyard::storage

#pragma once
// Verifying a sequence log without risking the caller: sequence_log::
// verify() walks every stream and record, but LMDB 0.9 has no page
// checksums, so damage to its own B-tree pages can fault inside LMDB
// (SIGBUS, SIGSEGV). verify_log() therefore runs the walk in a forked child
// process that opens the log read-only (no lock: it can run next to a
// broker that has the log open, as LMDB allows readers in other processes)
// and reports back through a pipe; a child killed by a signal means the log
// is damaged in a way LMDB could not report.
//
// Used by `switchyard-server --verify-log` and `--verify-on-start`
// (docs/storage.md, "Damage").

#include "storage/sequence_log.hpp"

#include <chrono>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

namespace switchyard::storage {

struct verify_options {
  std::filesystem::path dir;       // the log folder (the broker's <data-dir>/log)
  std::size_t max_problems = 100;  // problems listed in the report (all are counted)
  // 0: wait as long as the walk takes; else the child is killed after this
  // long and the report says timed_out.
  std::chrono::milliseconds timeout{0};
  // Called on the calling thread as the child reports progress (every
  // 65,536 records, and once at the end).
  std::function<void(const verify_progress&)> progress;
};

// Verifies the log in options.dir in a child process (see above) and
// returns what it found: report.intact() when nothing is wrong. Damage,
// including a log that cannot be opened because it is damaged, a child
// killed by a signal (report.signal) and a timeout, is in the report, not
// an error. Errors: not_found (no log in the folder), unsupported_format,
// io_error (the log cannot be read, or no child process could be started);
// `detail` (if given) says more. Blocks until the child is done; call it
// before starting threads that must not be forked with, or accept that the
// child only runs the walk and exits (it never returns into the caller's
// code).
std::expected<verify_report, std::error_code> verify_log(const verify_options& options, std::string* detail = nullptr);

}  // namespace switchyard::storage

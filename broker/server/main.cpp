// switchyard-server: flags and config file, then the server's event loop.
// Exit codes: 0 after a clean stop (SIGINT/SIGTERM) or a drain (SIGUSR2, a
// Drain request), 1 on a start-up error, 2 on bad flags or config (an auth
// file that does not parse, a non-loopback address without authentication).
// SIGHUP re-reads the config, TLS and auth files and SIGUSR1 logs the counters (server.hpp,
// handle_signals); neither ends the process.
//
// With --verify-log it checks the sequence log in --data-dir instead and
// exits: 0 intact, 1 damaged, 2 bad flags, 3 the log cannot be checked (no
// log there, unreadable). The check runs in a child process that opens the
// log read-only (storage/log_verifier.hpp), so it is safe next to a running
// broker and survives damage LMDB itself faults on.

#include "broker/server/server.hpp"
#include "storage/log_verifier.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

namespace {

constexpr int verify_intact = 0, verify_damaged = 1, verify_cannot_check = 3;
// Cluster mode: drained after a long loss of etcd (cluster-drain-after-s);
// EX_TEMPFAIL, "try again later".
constexpr int exit_cut_off = 75;

// A JSON string literal of `s` (bytes that are not printable ASCII are
// escaped as \u00XX: stream names are bytes, not necessarily UTF-8).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

// --verify-log: runs the check and prints its report (text on stdout, or
// one JSON object with --json); progress goes to stderr when it is a
// terminal and the walk takes more than a second.
int run_verify(const switchyard::broker::server_config& cfg) {
  namespace storage = switchyard::storage;
  const auto dir = std::filesystem::path(cfg.data_dir) / "log";
  storage::verify_options o;
  o.dir = dir;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto started = std::chrono::steady_clock::now();
  bool progress_shown = false;
  o.progress = [&](const storage::verify_progress& p) {
    if (!tty || std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) return;
    std::fprintf(stderr, "\rverifying %s: %llu records, %s ...", dir.c_str(),
                 static_cast<unsigned long long>(p.records), gib(p.bytes).c_str());
    progress_shown = true;
  };
  std::string detail;
  const auto r = storage::verify_log(o, &detail);
  if (progress_shown) std::fputs("\r\033[K", stderr);
  if (!r) {
    const std::string message = "cannot check the sequence log in " + dir.string() + ": " + detail;
    if (cfg.verify_json)
      std::printf("{\"log\":%s,\"status\":\"unchecked\",\"error\":%s}\n", json_string(dir.string()).c_str(),
                  json_string(message).c_str());
    std::fprintf(stderr, "switchyard-server: %s\n", message.c_str());
    return verify_cannot_check;
  }
  const bool intact = r->intact();
  if (cfg.verify_json) {
    std::string j = "{\"log\":" + json_string(dir.string()) + ",\"status\":\"" + (intact ? "intact" : "damaged") +
                    "\",\"streams\":" + std::to_string(r->streams) + ",\"records\":" + std::to_string(r->records) +
                    ",\"bytes\":" + std::to_string(r->bytes) + ",\"elapsed_ms\":" + std::to_string(r->elapsed.count()) +
                    ",\"pages_checked\":" + (r->pages_checked ? "true" : "false") +
                    ",\"signal\":" + std::to_string(r->signal) + ",\"timed_out\":" + (r->timed_out ? "true" : "false") +
                    ",\"problem_count\":" + std::to_string(r->problem_count) + ",\"problems\":[";
    for (std::size_t i = 0; i < r->problems.size(); ++i) {
      const auto& p = r->problems[i];
      j += std::string(i ? "," : "") + "{\"stream\":" + json_string(p.stream) + ",\"seq\":" + std::to_string(p.seq) +
           ",\"what\":" + json_string(p.what) + "}";
    }
    std::printf("%s]}\n", j.c_str());
  } else {
    std::printf("%s: %s: %llu streams, %llu records, %s checked in %lld ms%s\n", dir.c_str(),
                intact ? "intact" : "DAMAGED", static_cast<unsigned long long>(r->streams),
                static_cast<unsigned long long>(r->records), gib(r->bytes).c_str(),
                static_cast<long long>(r->elapsed.count()),
                r->pages_checked ? "" : " (page accounting skipped: a writer committed during the check)");
    for (const auto& p : r->problems) std::printf("  %s\n", p.what.c_str());
    if (r->problem_count > r->problems.size())
      std::printf("  ... and %llu more\n", static_cast<unsigned long long>(r->problem_count - r->problems.size()));
    if (!intact)
      std::printf(
          "What to do: stop the broker on this folder, keep a copy of it, and restore it from a backup; "
          "records the damage left readable can still be copied out (docs/storage.md, \"Damage\").\n");
  }
  return intact ? verify_intact : verify_damaged;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace switchyard::broker;
  server_config cfg;
  try {
    cfg = parse_server_args(argc, argv);
  } catch (const cli_exit& e) {
    if (e.code == 0)
      std::fputs(e.output.c_str(), stdout);  // --help, --version
    else
      std::fprintf(stderr, "switchyard-server: %s", e.output.c_str());
    return e.code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-server: %s\n", e.what());
    return 2;
  }
  if (cfg.verify_log) return run_verify(cfg);
  try {
    server srv(cfg);
    srv.handle_signals();
    srv.start();
    srv.run();
    if (srv.streams_taken_over()) {
      spdlog::get("broker")->error(
          "stopped: the cluster declared the streams in this node's log lost (cluster takeover); move --data-dir "
          "aside before starting it again");
      return 1;
    }
    if (srv.drained_for_lost_standing()) {
      // Not 0: a supervisor that restarts on failure starts it again.
      spdlog::get("broker")->info("stopped after a drain for a long loss of etcd (exit {})", exit_cut_off);
      return exit_cut_off;
    }
    spdlog::get("broker")->info("stopped");
    return 0;
  } catch (const startup_error& e) {
    std::fprintf(stderr, "switchyard-server: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard-server: %s\n", e.what());
    return 1;
  }
}

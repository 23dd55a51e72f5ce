#include "storage/log_verifier.hpp"

#include "storage/errc.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace switchyard::storage {

namespace {

// Messages from the child to the parent, each a type byte, a little-endian
// u32 body length and the body (u64s little-endian, strings as a u32
// length and the bytes).
enum class message : char {
  progress = 'P',  // streams, records, bytes
  problem = 'X',   // seq, stream, what
  done = 'D',      // streams, records, bytes, problem count, pages checked, elapsed ms
  failed = 'F',    // storage errc value, detail: the log could not be opened
};

constexpr std::size_t max_body = std::size_t{1} << 20;

class outbox {
 public:
  explicit outbox(int fd) : fd_(fd) {}
  outbox& u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  outbox& str(std::string_view s) {
    s = s.substr(0, max_body / 4);
    for (int i = 0; i < 4; ++i) body_.push_back(static_cast<char>(s.size() >> (8 * i)));
    body_.append(s);
    return *this;
  }
  // Writes the message; a parent that went away kills us with SIGPIPE,
  // which is fine: nobody is waiting for the answer.
  void send(message type) {
    std::string frame(1, static_cast<char>(type));
    for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>(body_.size() >> (8 * i)));
    frame += body_;
    body_.clear();
    const char* p = frame.data();
    std::size_t left = frame.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(3);
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
  std::string body_;
};

class inbox_reader {
 public:
  explicit inbox_reader(std::string_view body) : rest_(body) {}
  bool u64(std::uint64_t& v) {
    if (rest_.size() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(rest_[i])) << (8 * i);
    rest_.remove_prefix(8);
    return true;
  }
  bool str(std::string& s) {
    if (rest_.size() < 4) return false;
    std::size_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<std::size_t>(static_cast<unsigned char>(rest_[i])) << (8 * i);
    rest_.remove_prefix(4);
    if (rest_.size() < n) return false;
    s.assign(rest_.substr(0, n));
    rest_.remove_prefix(n);
    return true;
  }

 private:
  std::string_view rest_;
};

// The child: open read-only, walk, report, exit. Never returns.
[[noreturn]] void run_child(const verify_options& options, int fd) {
  // A fault must kill the child with its signal (which the parent reads as
  // "damaged"), not run a handler inherited from the parent (a sanitizer's,
  // or a server's signal forwarding).
  for (const int sig : {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
  outbox out(fd);
  log_options o;
  o.dir = options.dir;
  o.read_only = true;
  diagnostics diag;
  auto log = sequence_log::open(o, &diag);
  if (!log && log.error() != errc::corrupted) {
    const auto& ec = log.error();
    out.u64(ec.category() == storage_category() ? static_cast<std::uint64_t>(ec.value())
                                                : static_cast<std::uint64_t>(errc::io_error))
        .str(diag.message.empty() ? ec.message() : diag.message)
        .send(message::failed);
    ::_exit(0);
  }
  verify_report report;
  if (!log) {
    report.problem_count = 1;
    report.problems.push_back({diag.stream, diag.seq, "the log cannot be opened: " + diag.message});
  } else {
    report = (*log)->verify(options.max_problems, [&](const verify_progress& p) {
      out.u64(p.streams).u64(p.records).u64(p.bytes).send(message::progress);
    });
  }
  for (const auto& p : report.problems) out.u64(p.seq).str(p.stream).str(p.what).send(message::problem);
  out.u64(report.streams)
      .u64(report.records)
      .u64(report.bytes)
      .u64(report.problem_count)
      .u64(report.pages_checked ? 1 : 0)
      .u64(static_cast<std::uint64_t>(report.elapsed.count()))
      .send(message::done);
  // No destructors, no atexit handlers: they belong to the parent.
  ::_exit(0);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGBUS:
      return "SIGBUS";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "a signal";
  }
}

}  // namespace

std::expected<verify_report, std::error_code> verify_log(const verify_options& options, std::string* detail) {
  const auto started = std::chrono::steady_clock::now();
  const auto fail = [detail](errc e, std::string text) {
    if (detail) *detail = std::move(text);
    return std::unexpected(make_error_code(e));
  };
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(errc::io_error, std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return fail(errc::io_error, std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(options, fds[1]);
  }
  ::close(fds[1]);

  verify_report report;
  bool done = false, failed = false, garbled = false;
  std::uint64_t failed_code = 0;
  std::string failed_detail;
  std::string buffer;
  const auto deadline = started + options.timeout;
  for (;;) {
    int wait_ms = -1;
    if (options.timeout.count() > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        report.timed_out = true;
        ::kill(pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 1000));
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child is gone (or closed its end)
    buffer.append(chunk, static_cast<std::size_t>(n));
    // Take every complete message.
    std::size_t at = 0;
    while (buffer.size() - at >= 5) {
      std::size_t len = 0;
      for (int i = 0; i < 4; ++i)
        len |= static_cast<std::size_t>(static_cast<unsigned char>(buffer[at + 1 + i])) << (8 * i);
      if (len > max_body) {
        garbled = true;
        break;
      }
      if (buffer.size() - at - 5 < len) break;
      const auto type = static_cast<message>(buffer[at]);
      inbox_reader in(std::string_view(buffer).substr(at + 5, len));
      at += 5 + len;
      switch (type) {
        case message::progress: {
          verify_progress p;
          if (in.u64(p.streams) && in.u64(p.records) && in.u64(p.bytes)) {
            report.streams = p.streams;  // how far it got, should it die
            report.records = p.records;
            report.bytes = p.bytes;
            if (options.progress) options.progress(p);
          } else {
            garbled = true;
          }
          break;
        }
        case message::problem: {
          verify_problem p;
          if (in.u64(p.seq) && in.str(p.stream) && in.str(p.what))
            report.problems.push_back(std::move(p));
          else
            garbled = true;
          break;
        }
        case message::done: {
          std::uint64_t pages = 0, ms = 0;
          done = in.u64(report.streams) && in.u64(report.records) && in.u64(report.bytes) &&
                 in.u64(report.problem_count) && in.u64(pages) && in.u64(ms);
          report.pages_checked = pages != 0;
          garbled = garbled || !done;
          break;
        }
        case message::failed:
          failed = in.u64(failed_code) && in.str(failed_detail);
          garbled = garbled || !failed;
          break;
        default:
          garbled = true;
      }
      if (garbled) break;
    }
    buffer.erase(0, at);
    if (garbled) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  report.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);

  if (report.timed_out) {
    ++report.problem_count;
    report.problems.push_back({{},
                               0,
                               "the check did not finish within " + std::to_string(options.timeout.count()) +
                                   " ms (a loop in a damaged B-tree, or a slow disk)"});
    return report;
  }
  if (WIFSIGNALED(status) && !garbled) {
    report.signal = WTERMSIG(status);
    ++report.problem_count;
    report.problems.push_back({{},
                               0,
                               std::string("the check died of ") + signal_name(report.signal) + " after " +
                                   std::to_string(report.records) +
                                   " records: the log is damaged in a way the check could not report"});
    return report;
  }
  if (failed) {
    const auto e = static_cast<errc>(failed_code);
    return fail(e == errc::not_found || e == errc::unsupported_format ? e : errc::io_error, failed_detail);
  }
  if (!done || garbled)
    return fail(errc::io_error,
                "the check ended without a report (" +
                    (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status)) : std::string("killed")) +
                    ")");
  return report;
}

}  // namespace switchyard::storage

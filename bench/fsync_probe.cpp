#include "bench/fsync_probe.hpp"

#include "bench/bench_common.hpp"

#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <vector>

namespace switchyard::bench {

namespace {

std::string fs_name(long magic) {
  switch (static_cast<unsigned long>(magic)) {
    case 0xef53:
      return "ext2/3/4";
    case 0x58465342:
      return "xfs";
    case 0x9123683e:
      return "btrfs";
    case 0x01021994:
      return "tmpfs (fdatasync does not reach a disk)";
    case 0x794c7630:
      return "overlayfs";
    case 0x2fc12fc1:
      return "zfs";
    case 0xf2f52010:
      return "f2fs";
    default:
      return "other";
  }
}

}  // namespace

std::expected<fsync_probe_result, std::string> probe_fsync(const std::filesystem::path& dir, double seconds,
                                                           std::size_t bytes) {
  constexpr std::size_t max_ops = 100'000;
  const std::filesystem::path file = dir / (".switchyard-bench-fsync-probe." + std::to_string(::getpid()));
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected("cannot create " + file.string() + ": " + std::strerror(errno));
  fsync_probe_result r;
  r.dir = dir.string();
  r.bytes = bytes;
  const std::vector<char> buf(bytes, 'x');
  std::vector<std::int64_t> lat;
  lat.reserve(std::min<std::size_t>(max_ops, 4096));
  const std::uint64_t t0 = now_ns();
  const std::uint64_t end = t0 + static_cast<std::uint64_t>(seconds * 1e9);
  while (lat.size() < max_ops) {
    const std::uint64_t a = now_ns();
    if (a >= end && !lat.empty()) break;
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fdatasync(fd) != 0) {
      r.error = std::string("write + fdatasync: ") + std::strerror(errno);
      break;
    }
    lat.push_back(static_cast<std::int64_t>(now_ns() - a));
  }
  r.secs = static_cast<double>(now_ns() - t0) / 1e9;
  struct statfs sf {};
  r.fs = ::fstatfs(fd, &sf) == 0 ? fs_name(static_cast<long>(sf.f_type)) : "unknown";
  ::close(fd);
  std::error_code ignored;
  std::filesystem::remove(file, ignored);
  if (lat.empty()) return std::unexpected(r.error);
  std::sort(lat.begin(), lat.end());
  r.ops = lat.size();
  r.mean_us = static_cast<double>(std::accumulate(lat.begin(), lat.end(), std::int64_t{0})) /
              static_cast<double>(lat.size()) / 1000.0;
  r.p50_us = pct_us(lat, 50);
  r.p90_us = pct_us(lat, 90);
  r.p99_us = pct_us(lat, 99);
  r.max_us = static_cast<double>(lat.back()) / 1000.0;
  return r;
}

std::string fsync_probe_result::json() const {
  json_line j;
  j.str("dir", dir).str("op", fmt::format("append {} B + fdatasync", bytes)).str("fs", fs);
  j.integer("ops", static_cast<long long>(ops)).num("secs", secs).num("ops_per_s", static_cast<double>(ops) / secs);
  j.num("mean_us", mean_us).num("p50_us", p50_us).num("p90_us", p90_us).num("p99_us", p99_us).num("max_us", max_us);
  if (!error.empty()) j.str("error", error);
  return j.done();
}

}  // namespace switchyard::bench

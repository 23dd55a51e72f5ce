#pragma once
// How long a small synchronous append takes on a folder's disk: the
// peers' disk probe (../shared/peers, fsync_probe.c), for the durable
// workload's data folder. A durable figure acknowledged after an fsync
// reads differently on a disk where one takes 50 us than on one where it
// takes 5 ms: with it, a reader can tell a fast disk from a fast path.

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>

namespace switchyard::bench {

struct fsync_probe_result {
  std::string dir;
  std::string fs;  // "ext2/3/4", "xfs", "tmpfs (fdatasync does not reach a disk)", ...
  std::size_t bytes = 0;
  std::uint64_t ops = 0;
  double secs = 0;
  // Per write + fdatasync pair, microseconds (nearest rank).
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  std::string error;  // a write or fdatasync failed after `ops` pairs

  std::string json() const;  // the JSON object, with the peers' field names
};

// Appends `bytes` to a new file in `dir` and calls fdatasync after each
// write, for about `seconds` (at most 100,000 times), then removes the
// file. unexpected(why) if the file cannot be made or the first pair fails.
std::expected<fsync_probe_result, std::string> probe_fsync(const std::filesystem::path& dir, double seconds,
                                                           std::size_t bytes = 4096);

}  // namespace switchyard::bench

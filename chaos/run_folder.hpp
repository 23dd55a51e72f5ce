#pragma once
// What the harness's tools (switchyard-chaos, switchyard-failover) share
// around a run: its folder (data, logs, results) and the progress line.
//
// Threads: the tool's main thread.

#include <expected>
#include <filesystem>
#include <string>
#include <string_view>

namespace switchyard::chaos {

// The folder of one run. Given (`--dir`): it must be empty or missing (old
// etcd data and logs would be taken as this run's) and is made if missing;
// kept afterwards. Not given: a new one in /dev/shm (else the temp folder),
// named after `tool`, removed by remove_unless_kept() unless `keep`.
class run_folder {
 public:
  // Errors: a user-facing line ("--dir X is not empty", "cannot make ...").
  static std::expected<run_folder, std::string> make(std::filesystem::path given, std::string_view tool, bool keep);

  const std::filesystem::path& path() const noexcept { return path_; }
  // Removes a folder made here unless kept; errors are ignored (it is in
  // tmpfs or the temp folder).
  void remove_unless_kept() const;

 private:
  std::filesystem::path path_;
  bool made_ = false;
  bool keep_ = false;
};

// Progress on a terminal only: `line` replaces the last one on stderr (""
// erases it).
void progress(const std::string& line);

}  // namespace switchyard::chaos

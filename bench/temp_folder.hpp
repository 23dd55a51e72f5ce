#pragma once
// A private temporary folder for one switchyard-bench run (the certificate
// of --tls, the auth file of --auth), removed with everything in it when
// the owner goes out of scope, on every return path. Not removed when the
// process dies without unwinding (a signal, std::_Exit of the hard
// timeout).

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace switchyard::bench {

class temp_folder {
 public:
  // A new folder "<$TMPDIR or /tmp>/<prefix>XXXXXX" (mode 0700, mkdtemp);
  // nullopt if it cannot be made.
  static std::optional<temp_folder> make(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + prefix + "XXXXXX";
    if (!::mkdtemp(pattern.data())) return std::nullopt;
    return temp_folder(std::move(pattern));
  }
  // Moving hands the folder over: only the last owner removes it.
  temp_folder(temp_folder&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  temp_folder& operator=(temp_folder&& o) noexcept {
    if (this != &o) {
      remove();
      path_ = std::move(o.path_);
      o.path_.clear();
    }
    return *this;
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;
  ~temp_folder() { remove(); }

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  explicit temp_folder(std::filesystem::path p) : path_(std::move(p)) {}
  void remove() noexcept {
    std::error_code ignored;  // best effort: nothing useful to do on failure
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  std::filesystem::path path_;
};

}  // namespace switchyard::bench

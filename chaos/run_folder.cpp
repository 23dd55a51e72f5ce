#include "chaos/run_folder.hpp"

#include <unistd.h>

#include <iostream>

namespace switchyard::chaos {

namespace fs = std::filesystem;

std::expected<run_folder, std::string> run_folder::make(fs::path given, std::string_view tool, bool keep) {
  run_folder f;
  f.keep_ = keep;
  if (!given.empty()) {
    std::error_code ec;
    if (fs::exists(given, ec) && !fs::is_empty(given, ec))
      return std::unexpected("--dir " + given.string() + " is not empty");
    fs::create_directories(given, ec);
    if (ec) return std::unexpected("cannot make " + given.string() + ": " + ec.message());
    f.path_ = std::move(given);
    return f;
  }
  std::string tmpl = (fs::exists("/dev/shm") ? std::string("/dev/shm") : fs::temp_directory_path().string()) + "/" +
                     std::string(tool) + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return std::unexpected("cannot make a folder in " + tmpl);
  f.path_ = tmpl;
  f.made_ = true;
  return f;
}

void run_folder::remove_unless_kept() const {
  if (!made_ || keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void progress(const std::string& line) {
  static const bool tty = ::isatty(STDERR_FILENO);
  if (tty) std::cerr << "\r\033[K" << line << std::flush;
}

}  // namespace switchyard::chaos

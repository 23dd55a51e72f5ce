#pragma once
// A fresh, uniquely named directory under the system temporary folder,
// removed (with everything in it) when the object goes away.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

namespace switchyard::test {

class temp_dir {
 public:
  explicit temp_dir(std::string_view prefix = "switchyard-test") {
    static std::atomic<std::uint64_t> counter{0};
    std::random_device rd;
    const auto base = std::filesystem::temp_directory_path();
    // Bounded: a clash needs the same pid, counter and random value.
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string name = std::string(prefix) + "-" + std::to_string(::getpid()) + "-" +
                               std::to_string(counter.fetch_add(1)) + "-" + std::to_string(rd());
      std::error_code ec;
      if (std::filesystem::create_directory(base / name, ec) && !ec) {
        path_ = base / name;
        return;
      }
    }
    throw std::runtime_error("temp_dir: cannot create a unique directory under " + base.string());
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace switchyard::test

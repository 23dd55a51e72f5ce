#pragma once
// A small tmpfs mounted on a fresh temporary folder for one test: a real
// filesystem that fills up. Mounting needs root (CAP_SYS_ADMIN), which CI
// has; elsewhere the mount fails and the test skips itself visibly with
// SKIP_UNLESS_MOUNTED (Catch2 2.13 has no SKIP: a WARN and a return).
// Unmounted (lazily, if something still holds it) on destruction.

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace switchyard::test {

class tmpfs_mount {
 public:
  explicit tmpfs_mount(std::size_t bytes) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_not_ = std::string("cannot mount a tmpfs on ") + dir_.path().string() + " (" + std::strerror(errno) +
                 "); this test needs root (CAP_SYS_ADMIN) to fill a real filesystem";
    }
  }
  ~tmpfs_mount() {
    if (!mounted_) return;
    if (::umount2(dir_.path().c_str(), 0) != 0) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  tmpfs_mount(const tmpfs_mount&) = delete;
  tmpfs_mount& operator=(const tmpfs_mount&) = delete;

  bool mounted() const noexcept { return mounted_; }
  const std::string& why_not() const noexcept { return why_not_; }
  const std::filesystem::path& path() const noexcept { return dir_.path(); }

  // Bytes the filesystem still has free.
  std::uint64_t free_bytes() const {
    struct statvfs vfs {};
    REQUIRE(::statvfs(dir_.path().c_str(), &vfs) == 0);
    return static_cast<std::uint64_t>(vfs.f_bfree) * vfs.f_frsize;
  }

  // Writes a file of `bytes` (zeros) into the filesystem: space taken by
  // someone else, freed by removing the file. False if it did not fit.
  bool write_file(const std::string& name, std::size_t bytes) const {
    std::ofstream out(dir_.path() / name, std::ios::binary);
    const std::vector<char> chunk(64 << 10);
    for (std::size_t left = bytes; left > 0 && out;) {
      const std::size_t n = std::min(left, chunk.size());
      out.write(chunk.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    out.flush();
    return static_cast<bool>(out);
  }

 private:
  temp_dir dir_{"switchyard-tmpfs"};
  bool mounted_ = false;
  std::string why_not_;
};

}  // namespace switchyard::test

// Ends the test early, passing with a visible warning, when `m` (a
// tmpfs_mount) could not be mounted.
#define SKIP_UNLESS_MOUNTED(m)            \
  do {                                    \
    if (!(m).mounted()) {                 \
      WARN("SKIPPED: " << (m).why_not()); \
      return;                             \
    }                                     \
  } while (0)

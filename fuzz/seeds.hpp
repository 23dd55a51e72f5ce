#pragma once
// Seed corpora for the fuzz targets. Each target builds its seeds with the
// same encoders the tests use (protocol::frame_builder, the broker's
// destination encoder, config text) and writes them when started as
//
//   SWITCHYARD_FUZZ_SEEDS=<dir> ./<name>_fuzz
//
// (from LLVMFuzzerInitialize: one file per seed, seed-<i>, then exit 0).
// scripts/run-fuzz.sh does this before each run, so no corpus is committed;
// only the inputs of crashes found are, in fuzz/seeds/<name>/ (each a
// regression test too), and the script adds them to the run.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::fuzz {

using seed = std::vector<std::uint8_t>;

inline seed seed_of(std::string_view text) { return seed(text.begin(), text.end()); }

// Writes `seeds` into $SWITCHYARD_FUZZ_SEEDS and exits when it is set;
// returns otherwise.
inline void write_seeds_if_asked(const std::vector<seed>& seeds) {
  const char* dir = std::getenv("SWITCHYARD_FUZZ_SEEDS");
  if (!dir || !*dir) return;
  std::filesystem::create_directories(dir);
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::filesystem::path(dir) / ("seed-" + std::to_string(i)), std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir);
  std::exit(0);
}

}  // namespace switchyard::fuzz

#pragma once
// Helpers for tests of the sequence log through the broker: a server
// config with a data folder, and byte/text conversions for payloads.

#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::test {

// The test server's default config with its data folder (so the log) in `dir`.
inline broker::server_config with_data(const temp_dir& dir) {
  auto cfg = test_server::default_config();
  cfg.data_dir = dir.path().string();
  return cfg;
}

// A payload from text, and back.
inline std::vector<std::byte> text(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size()};
}
inline std::string str(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace switchyard::test

#pragma once
// When an appended record counts as durable (docs/storage.md):
//   sync   acknowledged only once fsynced (the default)
//   batch  fsynced at most every sync interval; a crash may lose the last one
//   none   never fsynced by us; the OS writes it back when it likes

#include <optional>
#include <string_view>

namespace switchyard::storage {

enum class durability { sync, batch, none };

constexpr std::string_view durability_name(durability d) noexcept {
  switch (d) {
    case durability::sync:
      return "sync";
    case durability::batch:
      return "batch";
    case durability::none:
      return "none";
  }
  return "sync";
}

// "sync", "batch" or "none"; nullopt otherwise.
constexpr std::optional<durability> parse_durability(std::string_view name) noexcept {
  if (name == "sync") return durability::sync;
  if (name == "batch") return durability::batch;
  if (name == "none") return durability::none;
  return std::nullopt;
}

}  // namespace switchyard::storage

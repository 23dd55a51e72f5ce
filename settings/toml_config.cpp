#include "settings/toml_config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <string_view>

namespace switchyard::settings {

namespace {

// A scalar as the text CLI11 would have read from a command line, or false
// when the node is not a scalar.
bool scalar_text(const toml::node& node, std::string& out) {
  if (const auto* s = node.as_string()) {
    out = s->get();
    return true;
  }
  if (const auto* i = node.as_integer()) {
    out = std::to_string(i->get());
    return true;
  }
  if (const auto* b = node.as_boolean()) {
    out = b->get() ? "true" : "false";
    return true;
  }
  if (const auto* f = node.as_floating_point()) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, f->get());
    out.assign(buf, r.ptr);
    return true;
  }
  return false;
}

std::string where(const toml::source_region& at) {
  return "line " + std::to_string(at.begin.line) + ", column " + std::to_string(at.begin.column);
}

// Edits (insert, delete, replace) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<CLI::ConfigItem> toml_config::from_config(std::istream& input) const {
  toml::table doc;
  try {
    doc = toml::parse(input);
  } catch (const toml::parse_error& e) {
    throw CLI::ConfigError("config file: " + std::string(e.description()) + " at " + where(e.source()));
  }
  std::vector<CLI::ConfigItem> items;
  for (const auto& [key, value] : doc) {
    CLI::ConfigItem item;
    item.name = std::string(key.str());
    if (value.is_table())  // before the key check: "[server]" is a section, not a misspelt key
      throw CLI::ConfigError("config file: [" + item.name + "] at " + where(value.source()) +
                             ": sections are not supported; use top-level keys");
    if (!known_.empty() && std::find(known_.begin(), known_.end(), item.name) == known_.end()) {
      std::string message = "config file: unknown setting '" + item.name + "' at " + where(key.source());
      const std::string* closest = nullptr;
      std::size_t best = 3;  // suggest only near misses: at most 2 edits
      for (const auto& k : known_) {
        if (const auto d = edit_distance(item.name, k); d < best) {
          best = d;
          closest = &k;
        }
      }
      if (closest) message += " (did you mean '" + *closest + "'?)";
      throw CLI::ConfigError(message + "; the keys are the long option names of --help, without the dashes");
    }
    std::string text;
    if (scalar_text(value, text)) {
      item.inputs.push_back(std::move(text));
    } else if (const auto* list = value.as_array()) {
      for (const auto& element : *list) {
        if (!scalar_text(element, text))
          throw CLI::ConfigError("config file: " + item.name + " at " + where(element.source()) +
                                 ": a list may hold strings, numbers and booleans only");
        item.inputs.push_back(std::move(text));
      }
    } else {
      throw CLI::ConfigError("config file: " + item.name + " at " + where(value.source()) +
                             ": sections are not supported; use top-level keys");
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace switchyard::settings

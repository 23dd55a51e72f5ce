#include "broker/toml_config.hpp"

#include <toml++/toml.h>

#include <charconv>

namespace switchyard::broker {

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

}  // namespace switchyard::broker

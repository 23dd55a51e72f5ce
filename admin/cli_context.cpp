#include "admin/cli_context.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <utility>

namespace switchyard::admin {

const CLI::Validator whole_number(
    [](std::string& v) -> std::string {
      if (v.empty() || v.size() > 20 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return "must be a whole number (0 or more), got '" + v + "'";
      return {};
    },
    "UINT");

const CLI::App& deepest_parsed(const CLI::App& app) {
  const CLI::App* level = &app;
  for (const CLI::App* sub = level; sub != nullptr;) {
    const auto parsed = sub->get_subcommands([](const CLI::App* a) { return a->parsed(); });
    level = sub;
    sub = parsed.empty() ? nullptr : parsed.front();
  }
  return *level;
}

std::string command_path(const CLI::App& app, const CLI::App& sub) {
  std::string path = sub.get_name();
  for (const CLI::App* up = sub.get_parent(); up != nullptr && up != &app; up = up->get_parent())
    path = up->get_name() + " " + path;
  return path;
}

std::string cli_context::finish(const CLI::App& app) {
  s_.command = command_path(app, deepest_parsed(app));
  for (const auto& fn : checks_)
    if (std::string problem = fn(); !problem.empty()) return problem;
  return {};
}

}  // namespace switchyard::admin

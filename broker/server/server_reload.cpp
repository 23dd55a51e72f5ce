// server::impl: SIGHUP: the config file, the TLS and auth files (server_impl.hpp).
#include "broker/server/server_impl.hpp"

#include "auth/auth_config.hpp"
#include "broker/config/setting_table.hpp"

#include <spdlog/spdlog.h>

namespace switchyard::broker {

bool server::impl::reload_tls(const server_config& from) {
  if (!tls) return true;
  auto fresh = tls_context::load(from);
  if (!fresh) {
    logger->error("SIGHUP: TLS certificate not reloaded, new connections keep the old one: {}", fresh.error());
    return false;
  }
  tls = std::move(*fresh);
  logger->info("SIGHUP: TLS certificate reloaded from {} ({}); new connections use it", from.tls_cert, tls->subject());
  return true;
}

void server::impl::reload_auth() {
  if (config.auth_file.empty()) return;
  auto loaded = auth::auth_config::load(config.auth_file);
  if (!loaded) {
    logger->error("SIGHUP: auth file not applied, the rules in force stay: {}",
                  loaded.error().to_string(config.auth_file));
    return;
  }
  auto rules = std::make_shared<const auth::auth_config>(std::move(*loaded));
  auth.set_rules(rules);
  std::size_t updated = 0;
  std::vector<std::shared_ptr<connection>> removed;
  registry.for_each_owner([&](const std::shared_ptr<connection>& c) {
    const auth::principal* p = c->principal();
    if (!p) return;
    if (auto fresh = rules->by_name(p->name)) {
      c->set_principal(std::move(fresh), c->owner());
      ++updated;
    } else {
      removed.push_back(c);
    }
  });
  // Closed after the walk: closing may change the registry.
  for (const auto& c : removed)
    c->close_with_error(protocol::errc::unauthorized,
                        "principal '" + c->principal()->name + "' was removed from the auth file");
  channels.permissions_changed();
  logger->info("SIGHUP: auth file {} reloaded: {} principals; {} connections updated, {} closed (principal removed)",
               config.auth_file, rules->principals().size(), updated, removed.size());
}

void server::impl::reload() {
  reload_auth();
  if (config.config_file.empty()) {
    reload_tls(config);
    logger->log(config.auth_file.empty() ? spdlog::level::warn : spdlog::level::info,
                "SIGHUP: the server was started without --config: no settings to re-read{}",
                tls || !config.auth_file.empty() ? " (the TLS and auth files were re-read)" : ", nothing changed");
    return;
  }
  server_config fresh;
  try {
    fresh = reparse_server_args(config);
  } catch (const cli_exit& e) {
    // CLI11's first line says what is wrong (the rest is "Run with --help").
    std::string why = e.output.substr(0, e.output.find('\n'));
    logger->error("SIGHUP: {} was not applied, the running configuration stays: {}", config.config_file, why);
    reload_tls(config);
    return;
  } catch (const std::exception& e) {
    logger->error("SIGHUP: {} was not applied, the running configuration stays: {}", config.config_file, e.what());
    reload_tls(config);
    return;
  }
  // The TLS files are read again (rotated certificates keep their paths),
  // from the paths in the file if it changed them. Turning TLS on or off
  // takes a restart; files that do not load change nothing (logged).
  std::vector<std::string> fixed;
  const auto tls_files_of = [](server_config& to, const server_config& from) {
    to.tls_cert = from.tls_cert;
    to.tls_key = from.tls_key;
    to.tls_ca = from.tls_ca;
    to.tls_verify_client = from.tls_verify_client;
  };
  if (tls && !fresh.tls_cert.empty()) {
    server_config paths = config;
    tls_files_of(paths, fresh);
    if (!reload_tls(paths)) tls_files_of(fresh, config);  // not loaded: the running paths stay
  } else {
    reload_tls(config);
    // TLS off, or turned off: its files' settings take a restart.
    for (const auto& s : settings())
      if (s.name.starts_with("tls-") && s.show(config) != s.show(fresh)) fixed.emplace_back(s.name);
    tls_files_of(fresh, config);
  }
  // Every setting the file changed is applied or named as needing a
  // restart (setting_table.hpp): nothing is skipped silently.
  std::vector<std::string> changed;
  for (const auto& s : settings()) {
    const std::string was = s.show(config), now = s.show(fresh);
    if (was == now) continue;
    if (s.effect == takes_effect::at_restart) {
      fixed.emplace_back(s.name);
      continue;
    }
    const auto shown = [&s](const std::string& v) {
      return (v.empty() ? std::string("(none)") : v) +
             (s.unit.empty() || s.unit == "bytes" ? "" : " " + std::string(s.unit));
    };
    changed.push_back(std::string(s.name) + " " + shown(was) + " -> " + shown(now));
    s.assign(config, fresh);
  }
  // Each use reads the running config; these keep state derived from it.
  logger->set_level(spdlog::level::from_str(config.log_level));
  admission.reconfigure(std::chrono::steady_clock::now());
  std::string list;
  for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
  logger->info("SIGHUP: {} re-read: {}", config.config_file, changed.empty() ? std::string("nothing changed") : list);
  if (!fixed.empty()) {
    std::string names;
    for (const auto& f : fixed) names += (names.empty() ? "" : ", ") + f;
    logger->warn("SIGHUP: {} changed in the file but take effect only at a restart", names);
  }
}

}  // namespace switchyard::broker

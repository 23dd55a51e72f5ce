#include "broker/config/server_config.hpp"

#include "broker/config/setting_table.hpp"

#include "protocol/channel_name.hpp"
#include "settings/parse_args.hpp"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace switchyard::broker {

std::string listen_address(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return "127.0.0.1";
  const std::string text(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return text;  // dotted quad only ("127.0.0" is not)
  if (text.find(':') == std::string::npos) return {};
  // IPv6, numeric only (no DNS), scope ids included ("fe80::1%eth0").
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_family = AF_INET6;
  addrinfo* found = nullptr;
  if (::getaddrinfo(text.c_str(), nullptr, &hints, &found) != 0) return {};
  ::freeaddrinfo(found);
  return text;
}

bool is_loopback_host(std::string_view host) {
  const std::string address = listen_address(host);
  if (address.empty()) return false;
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

void validate(const server_config& cfg) {
  // Each setting's own range (setting_table.cpp), then the rules that tie
  // settings together.
  settings::check(settings(), cfg);
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (cfg.hello_burst > 0 && cfg.max_hellos_per_s == 0) bad("hello-burst needs max-hellos-per-s");
  if (cfg.lease_max_ttl / cfg.sweep_period > 50'000'000) bad("lease-max-ttl-ms / sweep-ms is too large");
  if (cfg.listen_host.empty()) bad("listen address needs a host");
  if (listen_address(cfg.listen_host).empty())
    bad("listen host \"" + cfg.listen_host + "\" is not an IPv4 or IPv6 address or localhost");
  if (!cfg.http_host.empty() && listen_address(cfg.http_host).empty())
    bad("http host \"" + cfg.http_host + "\" is not an IPv4 or IPv6 address or localhost");
  if (!cfg.http_host.empty() && !cfg.http_public && !is_loopback_host(cfg.http_host))
    bad("refusing to serve monitoring on " + cfg.http_host +
        ": the HTTP port has no authentication and shows connection names, principals and addresses. Serve it "
        "on 127.0.0.1 (behind a proxy or an SSH tunnel), or give --http-public to expose it on purpose");
  if (cfg.http_public && cfg.http_host.empty()) bad("http-public needs --http");
  std::error_code fs_ec;
  if (!cfg.port_file.empty() && std::filesystem::is_directory(cfg.port_file, fs_ec))
    bad("port-file \"" + cfg.port_file + "\" is a directory; name a file");
  for (const auto& pattern : cfg.durable_channels)
    if (!protocol::is_valid_pattern(pattern)) bad("durable-channel \"" + pattern + "\" is not a valid channel pattern");
  if (!cfg.durable_channels.empty() && cfg.data_dir.empty())
    bad("durable-channel needs the sequence log: set --data-dir");
  if ((cfg.verify_log || cfg.verify_on_start) && cfg.data_dir.empty())
    bad("verify-log and verify-on-start check the sequence log: set --data-dir");
  if (cfg.tls_cert.empty() != cfg.tls_key.empty()) bad("tls-cert and tls-key go together: set both or neither");
  if (!cfg.tls_ca.empty() && cfg.tls_cert.empty()) bad("tls-ca needs TLS: set tls-cert and tls-key");
  if (cfg.tls_verify_client && cfg.tls_ca.empty())
    bad("tls-verify-client needs tls-ca (the CAs client certificates must chain to)");
  if (cfg.verify_json && !cfg.verify_log) bad("json is an output of --verify-log");
  if (!cfg.auth_file.empty() && cfg.allow_anonymous)
    bad("allow-anonymous and auth-file exclude each other: with an auth file every client authenticates");
  // Protected mode: no authentication on an address others can reach is a
  // mistake unless said on purpose.
  if (cfg.auth_file.empty() && !cfg.allow_anonymous && !cfg.verify_log && !is_loopback_host(cfg.listen_host))
    bad("refusing to listen on " + cfg.listen_host +
        " without authentication (protected mode): anyone who reaches the port could publish, subscribe and "
        "revoke anything. Give --auth-file FILE (docs/security.md), or --allow-anonymous to accept anonymous "
        "clients on purpose, or listen on 127.0.0.1");
}

server_config parse_server_args(int argc, const char* const* argv) {
  CLI::App app{"switchyard-server: message broker for real-time gateway fleets", "switchyard-server"};
  app.set_version_flag("--version", std::string(SWITCHYARD_VERSION));
  server_config cfg;
  try {
    cfg = settings::parse_args(app, settings(), argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    throw cli_exit{code, out.str() + err.str()};
  }
  cfg.config_file = settings::config_file(app);
  cfg.command_line.assign(argv, argv + argc);
  validate(cfg);
  return cfg;
}

server_config reparse_server_args(const server_config& cfg) {
  std::vector<const char*> argv;
  argv.reserve(cfg.command_line.size());
  for (const auto& a : cfg.command_line) argv.push_back(a.c_str());
  return parse_server_args(static_cast<int>(argv.size()), argv.data());
}

}  // namespace switchyard::broker

#pragma once
// switchyard-bench --auth: the auth file the bench gives the broker it
// starts (docs/security.md's format). One principal, "bench", holds a fresh
// random token and may do every operation on the names the workloads use,
// written as an operator would write them: several allow patterns per
// operation and a deny pattern that matches none of those names, so the
// broker really checks each message's permission (no allow-everything
// short cut). A second principal, "bench-admin" (admin = true, its own
// token), is for the reconnect workload's drain only.

#include <expected>
#include <filesystem>
#include <string>

namespace switchyard::bench {

struct bench_auth {
  std::string token;        // the "bench" principal's token (every client)
  std::string admin_token;  // the "bench-admin" principal's token
  std::filesystem::path file;
};

// The auth file's text for these tokens (their SHA-256 hashes go in).
std::string bench_auth_file_text(const std::string& token, const std::string& admin_token);

// Makes both tokens (32 random bytes each, hex) and writes the file
// `dir`/auth.toml (mode 0600). Errors are user-facing strings.
std::expected<bench_auth, std::string> write_bench_auth_file(const std::filesystem::path& dir);

}  // namespace switchyard::bench

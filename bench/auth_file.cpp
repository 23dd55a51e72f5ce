#include "bench/auth_file.hpp"

#include <fmt/format.h>
#include <sodium.h>

#include <sys/stat.h>

#include <array>
#include <fstream>

namespace switchyard::bench {

namespace {

std::string hex(const unsigned char* bytes, std::size_t size) {
  std::string out(size * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, size);
  out.pop_back();
  return out;
}

std::string sha256_hex(const std::string& text) {
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(text.data()), text.size());
  return hex(digest.data(), digest.size());
}

std::string random_token() {
  std::array<unsigned char, 32> bytes{};
  randombytes_buf(bytes.data(), bytes.size());
  return hex(bytes.data(), bytes.size());
}

}  // namespace

std::string bench_auth_file_text(const std::string& token, const std::string& admin_token) {
  // The names the workloads use (bench/*.cpp):
  //   channels     bench.fanout (fanout, latency), bench.rc.<i> (reconnect)
  //   route keys   user:<i> (route, leases), rc.u.<gateway>.<k> (reconnect)
  //   inboxes      gw-<g> (route), rc-gw-<i> (reconnect)
  //   streams      bench:durable (durable), bench:replay (replay)
  // `*` matches one token ("user:17" is one: tokens are split at '.').
  // Every deny pattern matches none of them.
  return fmt::format(
      "# Written by switchyard-bench --auth for one run.\n"
      "[principals.bench]\n"
      "token_sha256 = [\"{}\"]\n"
      "publish = {{ allow = [\"bench.fanout\", \"bench.rc.*\", \"bench.other.>\"], deny = [\"bench.admin.>\"] }}\n"
      "subscribe = {{ allow = [\"bench.fanout\", \"bench.rc.*\", \"bench.other.>\"], deny = [\"bench.admin.>\"] }}\n"
      "send = {{ allow = [\"*\", \"rc.u.>\"], deny = [\"admin\", \"rc.u.admin.>\"] }}\n"
      "registry_put = {{ allow = [\"*\", \"rc.u.>\"], deny = [\"admin\", \"rc.u.admin.>\"] }}\n"
      "registry_get = {{ allow = [\"*\", \"rc.u.>\"], deny = [\"admin\", \"rc.u.admin.>\"] }}\n"
      "registry_delete = {{ allow = [\"*\", \"rc.u.>\"], deny = [\"admin\", \"rc.u.admin.>\"] }}\n"
      "inbox = {{ allow = [\"*\", \"rc.>\"], deny = [\"admin\"] }}\n"
      "stream_append = {{ allow = [\"bench:durable\", \"bench:replay\", \"bench.>\"], deny = [\"bench.admin.>\"] }}\n"
      "stream_read = {{ allow = [\"bench:durable\", \"bench:replay\", \"bench.>\"], deny = [\"bench.admin.>\"] }}\n"
      "\n"
      "# The reconnect workload's drain (an admin request).\n"
      "[principals.bench-admin]\n"
      "token_sha256 = [\"{}\"]\n"
      "admin = true\n",
      sha256_hex(token), sha256_hex(admin_token));
}

std::expected<bench_auth, std::string> write_bench_auth_file(const std::filesystem::path& dir) {
  if (sodium_init() < 0) return std::unexpected(std::string("--auth: libsodium cannot be initialised"));
  bench_auth a{random_token(), random_token(), dir / "auth.toml"};
  {
    std::ofstream out(a.file);
    out << bench_auth_file_text(a.token, a.admin_token);
    if (!out.flush()) return std::unexpected("--auth: cannot write " + a.file.string());
  }
  ::chmod(a.file.c_str(), 0600);  // holds hashes only; still nobody else's business
  return a;
}

}  // namespace switchyard::bench

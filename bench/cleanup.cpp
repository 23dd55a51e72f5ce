// What switchyard-bench removes from a broker of --address when it is done
// (see target::remote in bench_common.hpp).

#include "bench/bench_common.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace switchyard::bench {

std::string revoke_leases(const std::vector<std::pair<client*, lease_id>>& leases, std::string_view ttl_text) {
  // Blocking revokes from a few threads: that many requests in flight.
  constexpr std::size_t threads = 8;
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> revoked{0}, failed{0};
  std::mutex error_mu;
  std::string first_error;
  std::vector<std::thread> pool;
  for (std::size_t k = 0; k < std::min(threads, leases.size()); ++k) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < leases.size(); i = next++) {
        const auto [c, id] = leases[i];
        if (id == 0) continue;
        const auto ec = c->lease_revoke(id);
        if (!ec || ec == errc::not_found) {  // not_found: expired already, gone as well
          ++revoked;
          continue;
        }
        ++failed;
        std::lock_guard lock(error_mu);
        if (first_error.empty()) first_error = ec.message();
      }
    });
  }
  for (auto& th : pool) th.join();
  std::string out = fmt::format(
      "  cleanup: revoked {} lease(s) the bench granted; what was bound to them (routes, inboxes) went too\n",
      revoked.load());
  if (failed)
    out += fmt::format("  left on the broker: {} lease(s) it could not revoke ({}); they and their routes expire {}\n",
                       failed.load(), first_error, ttl_text);
  return out;
}

std::string empty_stream(client& c, const target& t, std::string_view stream) {
  const std::string name(stream);
  auto set = c.set_stream_retention(name, stream_retention{.max_age = std::chrono::milliseconds(1)});
  if (set)
    return fmt::format(
        "  left on the broker: stream {}, emptied (a retention of its own, max age 1 ms, trims its records);\n"
        "    no request deletes a stream, so its name stays\n",
        name);
  const auto info = c.stream_info(name);
  return fmt::format(
      "  left on the broker: stream {} with {} records: it could not be emptied ({});\n"
      "    no request deletes a stream; an admin empties it with:\n"
      "    switchyard-cli --address {} streams retention {} --max-age-ms 1\n",
      name, info ? std::to_string(info->records) : std::string("its"), set.error().message(), t.address, name);
}

}  // namespace switchyard::bench

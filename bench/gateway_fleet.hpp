#pragma once
// The gateways of the route and offers workloads: G connections on two I/O
// threads (the broker and the service need the rest), each with a
// 10-minute lease and the inbox "<prefix>gw-<g>"; user u registered on
// gateway u % G. On a broker of --address the leases are revoked at the
// end, taking the routes and inboxes with them: by finish(), or, when the
// run fails first, by the destructor, which prints the summary lines.
// Thread contract: the calling (bench main) thread only; the handlers run
// on the gateways' loop threads.

#include "bench/bench_common.hpp"

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::bench {

class gateway_fleet {
 public:
  // Borrows `s` and `t` for its lifetime.
  gateway_fleet(const settings& s, const target& t) : s_(s), t_(t) {}
  ~gateway_fleet();
  gateway_fleet(const gateway_fleet&) = delete;
  gateway_fleet& operator=(const gateway_fleet&) = delete;

  // The inbox handler of gateway g, whose connection is `conn`; and a
  // chance to adjust each gateway's client options before it connects.
  using handler_for = std::function<inbox_handler(int g, client& conn)>;
  using options_tweak = std::function<void(client_options&)>;
  // Connects `count` gateways, each with its lease and inbox. Returns an
  // error line (connect, lease or inbox), empty on success.
  std::string start(int count, const handler_for& handler, const options_tweak& tweak = {});
  // Registers keys[u] on gateway u % count, 4096 in flight, with progress
  // under `workload`'s name. Returns an error line, empty on success.
  std::string register_users(std::span<const std::string> keys, std::string_view workload);
  // Closes every gateway connection: no handler runs after it.
  void close();
  // On a broker of --address, revokes the leases (once) and returns the
  // summary lines for the run's output; empty otherwise.
  const std::string& finish();

 private:
  const settings& s_;
  const target& t_;
  std::vector<std::shared_ptr<event_loop>> loops_{std::make_shared<event_loop>(), std::make_shared<event_loop>()};
  std::vector<std::unique_ptr<client>> gateways_;
  std::vector<lease_id> leases_;
  std::string cleaned_;
  bool finished_ = false;
};

}  // namespace switchyard::bench

#include "bench/gateway_fleet.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <semaphore>

namespace switchyard::bench {

gateway_fleet::~gateway_fleet() {
  if (finished_) return;
  // The run ended early: the leases still go, and the output says so.
  std::fputs(finish().c_str(), s_.json ? stderr : stdout);
}

std::string gateway_fleet::start(int count, const handler_for& handler, const options_tweak& tweak) {
  for (int g = 0; g < count; ++g) {
    auto o = options_for(t_, fmt::format("bench-gw-{}", g));
    if (t_.sub_port != 0) o.host = t_.sub_host, o.port = t_.sub_port;  // route --sub-address
    if (tweak) tweak(o);
    auto c = client::connect(o, loops_[static_cast<std::size_t>(g) % loops_.size()]);
    if (!c) return "gateway connect: " + c.error().message();
    auto lease = (*c)->lease_grant(std::chrono::minutes(10));
    if (!lease) return "lease grant: " + lease.error().message();
    leases_.push_back(lease->id);
    gateways_.push_back(std::move(*c));
    const auto inbox = name_for(t_, fmt::format("gw-{}", g));
    if (auto ec = gateways_.back()->open_inbox(inbox, lease->id, handler(g, *gateways_.back())))
      return "open inbox " + inbox + ": " + ec.message();
  }
  return {};
}

std::string gateway_fleet::register_users(std::span<const std::string> keys, std::string_view workload) {
  constexpr int in_flight = 4096;
  std::counting_semaphore<> window(in_flight);
  std::atomic<long> failed{0};
  const std::size_t n = gateways_.size();
  for (std::size_t u = 0; u < keys.size(); ++u) {
    const std::size_t g = u % n;
    window.acquire();
    gateways_[g]->async_registry_put(keys[u], name_for(t_, fmt::format("gw-{}", g)), leases_[g],
                                     [&](std::expected<std::uint64_t, std::error_code> r) {
                                       if (!r) ++failed;
                                       window.release();
                                     });
    if (u % 20000 == 0) progress("{}: registering users {}/{}", workload, u, keys.size());
  }
  for (int i = 0; i < in_flight; ++i) window.acquire();
  return failed ? fmt::format("{} registrations failed", failed.load()) : std::string();
}

void gateway_fleet::close() {
  for (auto& g : gateways_) g->close();
}

const std::string& gateway_fleet::finish() {
  if (finished_) return cleaned_;
  finished_ = true;
  if (!t_.remote) return cleaned_;
  std::vector<std::pair<client*, lease_id>> granted;
  for (std::size_t g = 0; g < leases_.size(); ++g) granted.emplace_back(gateways_[g].get(), leases_[g]);
  cleaned_ = revoke_leases(granted, "within 10 minutes");
  return cleaned_;
}

}  // namespace switchyard::bench

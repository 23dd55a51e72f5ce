#include "chaos/settle.hpp"

#include <fmt/format.h>

#include <thread>

namespace switchyard::chaos {

using namespace std::chrono_literals;

namespace {
constexpr std::uint32_t partitions = 1024;  // broker/cluster/partition_map.hpp
}

std::expected<std::unique_ptr<client>, std::error_code> connect_admin(const std::string& address) {
  client_options co;
  co.addresses = {address};
  co.admin = true;
  co.reconnect.enabled = false;
  co.connect_timeout = 2s;
  co.request_timeout = 3s;
  return client::connect(co);
}

std::string settle(const std::vector<std::string>& addresses, std::chrono::seconds deadline) {
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  std::string wrong;
  while (std::chrono::steady_clock::now() < give_up) {
    wrong.clear();
    std::string first_view;  // every node must see the same members, each with its current incarnation
    for (const auto& a : addresses) {
      auto c = connect_admin(a);
      if (!c) {
        wrong = a + ": " + c.error().message();
        break;
      }
      auto st = (*c)->cluster_status();
      if (!st) {
        wrong = a + ": " + st.error().message();
        break;
      }
      std::uint32_t owned = 0;
      std::string view;
      for (const auto& m : st->members) {
        owned += m.partitions;
        view += fmt::format("{}/{} ", m.node_id, m.incarnation);
      }
      if (first_view.empty()) first_view = view;
      if (view != first_view) {
        wrong = fmt::format("{} sees members {}, another node {}", a, view, first_view);
        break;
      }
      if (!st->in_standing || st->members.size() != addresses.size() || owned != partitions) {
        wrong = fmt::format("{}: {} members, {} partitions owned, {}", a, st->members.size(), owned,
                            st->in_standing ? "in standing" : "out of standing");
        break;
      }
    }
    if (wrong.empty()) return {};
    std::this_thread::sleep_for(200ms);
  }
  return wrong;
}

}  // namespace switchyard::chaos

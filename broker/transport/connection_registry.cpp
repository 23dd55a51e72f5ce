#include "broker/transport/connection_registry.hpp"

#include "broker/transport/connection.hpp"

#include <vector>

namespace switchyard::broker {

void connection_registry::add(std::shared_ptr<connection> c) {
  const connection* key = c.get();
  live_.emplace(key, std::move(c));
}

void connection_registry::remove(connection& c) { live_.erase(&c); }

void connection_registry::close_all(protocol::errc code, std::string_view message) {
  stopping_ = true;
  // A copy: a connection may remove itself while we iterate.
  std::vector<std::shared_ptr<connection>> all;
  all.reserve(live_.size());
  for (const auto& [ptr, owner] : live_) all.push_back(owner);
  for (const auto& c : all) c->close_with_error(code, message);
}

}  // namespace switchyard::broker

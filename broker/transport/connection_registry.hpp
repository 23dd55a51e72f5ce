#pragma once
// The live connections of one loop: they add themselves when accepted and
// remove themselves when closed (connection::fail). The registry holds the
// owning reference that keeps an idle connection alive; coroutines hold
// the others.
//
// Loop thread only.

#include "protocol/errc.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

namespace switchyard::broker {

class connection;

class connection_registry {
 public:
  std::uint64_t next_id() noexcept { return next_id_++; }

  void add(std::shared_ptr<connection> c);
  // Drops the registry's reference (the connection may be destroyed once
  // its coroutines finish). Unknown connections are ignored.
  void remove(connection& c);

  // Connections over the cap that are saying goodbye: not counted against
  // max-connections (delta +1 when one starts, -1 when it is gone).
  void rejected_closing(int delta) noexcept { rejected_closing_ += delta; }
  // Open connections, with and without those rejected ones.
  std::size_t size() const noexcept { return live_.size(); }
  std::size_t counted() const noexcept { return live_.size() - rejected_closing_; }

  // Stops: every connection gets a fatal `code` goodbye; from now on
  // writers close without waiting for their peers.
  void close_all(protocol::errc code, std::string_view message);
  bool stopping() const noexcept { return stopping_; }

  // Calls f(const connection&) for each live connection.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [ptr, owner] : live_) f(*ptr);
  }
  // Calls f(const std::shared_ptr<connection>&) for each live connection.
  template <class F>
  void for_each_owner(F&& f) const {
    for (const auto& [ptr, owner] : live_) f(owner);
  }
  // Drops every reference (the server's destructor, after the loop stopped).
  void clear() noexcept { live_.clear(); }

 private:
  std::unordered_map<const connection*, std::shared_ptr<connection>> live_;
  std::size_t rejected_closing_ = 0;
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
};

}  // namespace switchyard::broker

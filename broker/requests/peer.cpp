#include "broker/requests/peer.hpp"

#include <fmt/format.h>

namespace switchyard::broker {

void peer::send_error(std::uint64_t request_id, protocol::errc code, std::string_view message) {
  send(builder_.error(request_id, code, message));
}

void peer::send_forbidden(std::uint64_t request_id, std::string_view operation, std::string_view resource,
                          std::string_view why) {
  send_error(request_id, protocol::errc::forbidden,
             fmt::format("{}{}{} is not allowed{}{} (principal '{}')", operation, resource.empty() ? "" : " ", resource,
                         why.empty() ? "" : ": ", why, principal_ ? principal_->name : std::string()));
}

std::uint64_t peer::open_ticket() {
  open_tickets_.push_back(false);
  return first_open_ticket_ + open_tickets_.size() - 1;
}

void peer::close_ticket(std::uint64_t ticket) {
  if (ticket < first_open_ticket_ || ticket - first_open_ticket_ >= open_tickets_.size()) return;
  open_tickets_[ticket - first_open_ticket_] = true;
  while (!open_tickets_.empty() && open_tickets_.front()) {
    open_tickets_.pop_front();
    ++first_open_ticket_;
  }
  while (!held_pongs_.empty() && first_open_ticket_ >= held_pongs_.front().second) {
    send(builder_.pong(held_pongs_.front().first));
    held_pongs_.pop_front();
  }
}

void peer::ping(std::uint64_t request_id) {
  // Held behind an open ticket; a Ping behind a held one waits too, so
  // Pongs keep their order.
  if (open_tickets_.empty() && held_pongs_.empty()) return send(builder_.pong(request_id));
  held_pongs_.emplace_back(request_id, first_open_ticket_ + open_tickets_.size());
}

}  // namespace switchyard::broker

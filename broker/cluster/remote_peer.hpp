#pragma once
// remote_peer: a client of another node, as a request forwarded here sees
// it (docs/cluster.md, "Durable streams"). stream_relay runs a
// StreamRequest's frame through the dispatcher on one of these, as if the
// client were connected here: the handlers answer on it as on a
// connection, and it keeps the answers for the StreamAnswer.
//
// It has the client's capabilities (as the origin granted them) and no
// principal: the origin checked the client's permissions before it
// forwarded. It never subscribes, holds no inbox and gets no deliveries.
//
// Done: once every answer is in (a Ping sent after the request is
// answered, peer::ping, only after every open ticket closed), `on_done`
// runs on the loop thread with the answers.
//
// Loop thread only.

#include "broker/requests/peer.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace switchyard::broker {

class remote_peer final : public peer, public std::enable_shared_from_this<remote_peer> {
 public:
  // The Ping request id that marks the end (never a forwarded request's:
  // a Ping is answered where it came).
  static constexpr std::uint64_t done_marker = ~std::uint64_t{0};

  // `builder` borrowed for its lifetime; `on_done(answers)` is called
  // once, from within one of this peer's calls (it must not destroy the
  // peer synchronously).
  remote_peer(std::uint64_t id, protocol::frame_builder& builder, capability_set caps, bool offer_fields,
              std::function<void(remote_peer&)> on_done);

  // Call after the request was dispatched: on_done runs once it is answered.
  void finish() { ping(done_marker); }
  // The answers so far: length-prefixed frames, one after the other.
  const std::vector<std::uint8_t>& answers() const noexcept { return answers_; }
  // Frees the answers (they were sent).
  void release_answers() noexcept { std::vector<std::uint8_t>().swap(answers_); }
  bool done() const noexcept { return done_; }

  void send(protocol::bytes_view frame) override;
  void close_with_error(protocol::errc code, std::string_view message) override;
  bool closed() const noexcept override { return false; }
  std::weak_ptr<peer> weak_peer() noexcept override { return weak_from_this(); }
  void restart_drop_reports() noexcept override {}
  void report_lost(std::uint64_t) override {}

  void deliver(const frame_ref&) override {}
  void deliver(protocol::bytes_view) override {}
  void deliver(const frame_ref&, const delivery_meta&) override {}
  void deliver(protocol::bytes_view, const delivery_meta&) override {}
  bool wants_offer_fields() const noexcept override { return offer_fields_; }
  std::size_t withdraw(std::uint64_t) override { return 0; }
  void notify(protocol::bytes_view) override {}

 private:
  bool offer_fields_;
  std::function<void(remote_peer&)> on_done_;
  std::vector<std::uint8_t> answers_;
  bool done_ = false;
};

// A capability_set as the bits a StreamRequest carries, and back.
std::uint32_t capability_bits(const capability_set& caps, bool offer_fields) noexcept;
capability_set capabilities_of(std::uint32_t bits, bool& offer_fields) noexcept;

}  // namespace switchyard::broker

#pragma once
// A plain blocking TCP connection for tests that speak the wire protocol by
// hand: send arbitrary bytes (garbage, oversized frames) and read frames
// back with a deadline. POSIX sockets, so tests need no Asio.

#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace switchyard::test {

// One frame's bytes, copied into 8-byte aligned storage.
struct raw_frame {
  std::vector<std::uint64_t> words;
  std::size_t size = 0;
  protocol::bytes_view bytes() const noexcept { return {reinterpret_cast<const std::uint8_t*>(words.data()), size}; }
};

class raw_connection {
 public:
  // Connects to 127.0.0.1:port; throws std::runtime_error on failure. A
  // non-zero `receive_buffer` sets SO_RCVBUF before connecting (so the TCP
  // window is negotiated for it): for slow-consumer tests.
  explicit raw_connection(std::uint16_t port, int receive_buffer = 0);
  ~raw_connection();
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  void send(protocol::bytes_view bytes);
  // Writes as much of `bytes` as the kernel takes now, without waiting:
  // how many bytes that was (0 when its buffers are full or on error).
  std::size_t send_some(protocol::bytes_view bytes);
  // Sends a hello (request id 1) with both v1 capabilities unless
  // `capabilities` is false.
  void send_hello(std::uint16_t major = 1, bool capabilities = true);
  // Sends a hello (request id 1) asking for exactly `capabilities`.
  void send_hello(std::span<const std::string_view> capabilities);

  // The next frame, or nullopt on EOF, error or timeout.
  std::optional<raw_frame> read_frame(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // read_frame() decoded; nullptr when there was no frame. The pointer
  // borrows `storage`.
  const protocol::wire::Frame* next(raw_frame& storage, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Reads and discards frames until `type` arrives; returns it or nullptr.
  const protocol::wire::Frame* next_of(protocol::wire::Message type, raw_frame& storage,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Half-closes: the peer reads EOF, and this side can still read.
  void shutdown_write();

  // True once the peer closed the connection (reads EOF within `timeout`,
  // discarding frames before it).
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  bool fill(std::size_t n, std::chrono::steady_clock::time_point deadline);
  int fd_ = -1;
  std::vector<std::uint8_t> in_;
};

}  // namespace switchyard::test

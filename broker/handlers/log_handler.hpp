#pragma once
// The sequence log: Append and Read (capability "log"; docs/protocol.md
// §7). Appends go through the durable pipeline; reads run on the loop
// thread against the log's read transaction.
//
// Loop thread only. Exists only on a server with a data folder.

#include "broker/requests/durable_pipeline.hpp"
#include "broker/requests/peer.hpp"
#include "broker/config/server_config.hpp"
#include "broker/tables/server_counters.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <memory>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class log_handler {
 public:
  // Borrows everything for its lifetime.
  log_handler(const server_config& config, durable_pipeline& durable, protocol::frame_builder& builder,
              server_counters& counters, std::shared_ptr<spdlog::logger> logger);

  void append(peer& from, std::uint64_t request_id, const protocol::wire::Append& m);
  // Answers Records: from `from_seq` (0: the first retained), at most the
  // asked count and bytes and what fits in one frame (the first record
  // always goes). Records whose expiry has passed (by the log's wall clock:
  // timestamp + expiry) are left out and counted (Records.expired,
  // next_seq; server_counters::expired_read); to a reader that wants the
  // offer fields the others carry their time left. Errors: not_found,
  // trimmed (with the first retained sequence), corrupted (naming the
  // record and where to read on).
  void read(peer& from, std::uint64_t request_id, const protocol::wire::Read& m);

 private:
  const server_config& config_;
  durable_pipeline& durable_;
  protocol::frame_builder& builder_;
  server_counters& counters_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker

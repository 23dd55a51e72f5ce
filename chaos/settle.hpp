#pragma once
// Questions to the harness's nodes, one node at a time: an admin connection
// to one node, and settle(), which waits until the nodes agree on the
// cluster (switchyard-chaos before and after its faults; switchyard-failover
// before its kill).
//
// Threads: any; each call uses its own connections.

#include <switchyard/client.hpp>

#include <chrono>
#include <expected>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace switchyard::chaos {

// An admin connection to node `address` ("host:port") alone, without
// reconnect: a question to that node, answered by it or failing (connect
// timeout 2 s, request timeout 3 s).
std::expected<std::unique_ptr<client>, std::error_code> connect_admin(const std::string& address);

// Waits (polling every 200 ms, at most `deadline`) until every node of
// `addresses` answers cluster status with the same members (each with its
// current incarnation, as many as `addresses`), in standing, and every
// partition owned. Returns what is still wrong at the deadline, "" once
// settled.
std::string settle(const std::vector<std::string>& addresses, std::chrono::seconds deadline);

}  // namespace switchyard::chaos

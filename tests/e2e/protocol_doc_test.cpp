// End to end: lists in docs/protocol.md that a client written from the
// document relies on, checked against a real broker on 127.0.0.1 and the
// schema's tables, so that the document cannot drift from the code:
//  - §2: which requests sent with request id 0 are answered all the same;
//  - §2: the message type table names every message type, and says which
//    ones a client sends;
//  - §8: the error code table lists every ErrorCode by value and name.

#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace switchyard;
using namespace switchyard::test;
using protocol::wire::Message;
namespace wire = protocol::wire;

namespace {

std::vector<std::string> protocol_doc_lines() {
  std::ifstream in(std::string(SWITCHYARD_SOURCE_DIR) + "/docs/protocol.md");
  REQUIRE(in);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The names in backticks in `text`, in order.
std::vector<std::string> backticked(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t at = text.find('`'); at != std::string_view::npos;) {
    const auto end = text.find('`', at + 1);
    if (end == std::string_view::npos) break;
    out.emplace_back(text.substr(at + 1, end - at - 1));
    at = text.find('`', end + 1);
  }
  return out;
}

// The cells of a Markdown table row ("| a | b |" -> {"a", "b"}), trimmed.
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::stringstream in(row.substr(1));
  for (std::string cell; std::getline(in, cell, '|');) {
    const auto first = cell.find_first_not_of(' ');
    const auto last = cell.find_last_not_of(' ');
    out.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  return out;
}

// The rows of the table that follows the line `heading` (up to the first
// line that is not a row), header and separator left out.
std::vector<std::vector<std::string>> table_after(const std::vector<std::string>& lines, std::string_view heading) {
  std::size_t i = 0;
  while (i < lines.size() && lines[i] != heading) ++i;
  REQUIRE(i < lines.size());
  while (i < lines.size() && !lines[i].starts_with("| ")) ++i;
  std::vector<std::vector<std::string>> rows;
  for (i += 2; i < lines.size() && lines[i].starts_with("| "); ++i) rows.push_back(cells(lines[i]));
  return rows;
}

// §2: the requests the document says are answered with request id 0 (the
// items under "Exceptions" in the bullet on request id 0).
std::set<std::string> documented_answered_with_id_0(const std::vector<std::string>& lines) {
  std::size_t i = 0;
  while (i < lines.size() && !lines[i].starts_with("- A request sent with `request_id` 0")) ++i;
  REQUIRE(i < lines.size());
  while (i < lines.size() && lines[i].find("Exceptions") == std::string::npos) ++i;
  while (i < lines.size() && !lines[i].empty() && !lines[i].starts_with("  - ")) ++i;
  REQUIRE(i < lines.size());
  REQUIRE(lines[i].starts_with("  - "));
  std::set<std::string> names;
  for (; i < lines.size() && (lines[i].starts_with("  - ") || lines[i].starts_with("    ")); ++i)
    for (auto& name : backticked(lines[i])) names.insert(std::move(name));
  return names;
}

// A raw connection welcomed with every capability.
struct client {
  raw_connection raw;
  protocol::frame_builder b;
  raw_frame storage;
  explicit client(std::uint16_t port) : raw(port) {
    static constexpr std::string_view caps[] = {"dropped-notice", "publish-ack", "routing", "log", "offers", "admin"};
    raw.send_hello(caps);
    REQUIRE(raw.next_of(Message::Welcome, storage));
  }
  // Sends `frame` (request id `rid` ≠ 0) and returns its answer; FAILs on
  // an Error.
  const wire::Frame& call(protocol::bytes_view frame, std::uint64_t rid) {
    raw.send(frame);
    for (;;) {
      const auto* f = raw.next(storage);
      REQUIRE(f);
      if (f->request_id() != rid) continue;
      if (const auto* e = f->message_as_Error()) FAIL("set-up answered " << (e->message() ? e->message()->str() : ""));
      return *f;
    }
  }
};

// Frames the server sends of its own accord (request id 0, not an answer).
bool unsolicited(Message type) {
  switch (type) {
    case Message::Ping:  // the heartbeat
    case Message::Deliver:
    case Message::Dropped:
    case Message::InboxDelivery:
    case Message::StreamDropped:
    case Message::Receipt:
    case Message::Withdrawn:
      return true;
    default:
      return false;
  }
}

// One request a client may send, built with request id 0 and meant to
// succeed (the set-up below makes it so), or, with `refused_here`, one a
// single-node broker refuses with that code whatever the set-up.
struct request {
  Message type;
  std::function<protocol::bytes_view(protocol::frame_builder&)> build;
  std::optional<wire::ErrorCode> refused_here = std::nullopt;
};

protocol::bytes_view bytes(std::string_view s) { return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}; }

}  // namespace

TEST_CASE("the requests answered with request id 0 are exactly those docs/protocol.md section 2 lists", "[e2e][docs]") {
  const auto lines = protocol_doc_lines();
  const auto documented = documented_answered_with_id_0(lines);

  temp_dir dir{"switchyard-doc"};
  test_server server(with_data(dir));
  client c(server.port());
  // Set-up (request ids ≠ 0): a lease, inbox "gw" under it on this
  // connection, user.1 routed to it, a record in stream "s", and offer 9
  // delivered into "gw" (so it can be acknowledged, listed and withdrawn),
  // and a spare lease to revoke.
  const auto lease = c.call(c.b.lease_grant(1, 30'000), 1).message_as_LeaseInfo()->lease_id();
  c.call(c.b.inbox_open(2, "gw", lease), 2);
  c.call(c.b.registry_put(3, "user.1", "gw", lease, 0), 3);
  c.call(c.b.append(4, "s", bytes("r")), 4);
  protocol::offer_fields offer;
  offer.offer_id = 9;
  offer.expires_in_ms = 60'000;
  const std::string_view user_1[] = {"user.1"};
  c.call(c.b.send(5, user_1, bytes("o"), {}, &offer), 5);
  const auto spare_lease = c.call(c.b.lease_grant(6, 30'000), 6).message_as_LeaseInfo()->lease_id();

  const std::string_view two_keys[] = {"user.1", "user.none"};
  using B = protocol::frame_builder;
  // In an order where each finds what it needs; Drain last (it closes
  // the connection once the drain's turn comes).
  const std::vector<request> requests{
      {Message::Ping, [](B& b) { return b.ping(0); }},
      {Message::Pong, [](B& b) { return b.pong(0); }},
      {Message::Error, [](B& b) { return b.error(0, protocol::errc::internal, "a client's notice"); }},
      {Message::Subscribe, [](B& b) { return b.subscribe(0, "t.>"); }},
      {Message::Unsubscribe, [](B& b) { return b.unsubscribe(0, "t.>"); }},
      {Message::Publish, [](B& b) { return b.publish(0, "t.x", bytes("p")); }},
      {Message::LeaseGrant, [](B& b) { return b.lease_grant(0, 30'000); }},
      {Message::LeaseKeepAlive, [&](B& b) { return b.lease_keepalive(0, lease); }},
      {Message::LeaseTimeToLive, [&](B& b) { return b.lease_time_to_live(0, lease); }},
      {Message::LeaseList, [](B& b) { return b.lease_list(0, 0); }},
      {Message::LeaseRevoke, [&](B& b) { return b.lease_revoke(0, spare_lease); }},
      {Message::RegistryPut, [&](B& b) { return b.registry_put(0, "user.2", "gw", lease, 0); }},
      {Message::RegistryGet, [](B& b) { return b.registry_get(0, "user.1"); }},
      {Message::RegistryList, [](B& b) { return b.registry_list(0, "", 0); }},
      {Message::RegistryDelete, [](B& b) { return b.registry_delete(0, "user.2"); }},
      {Message::InboxOpen, [&](B& b) { return b.inbox_open(0, "gw-2", lease); }},
      {Message::InboxClose, [](B& b) { return b.inbox_close(0, "gw-2"); }},
      {Message::Send, [&](B& b) { return b.send(0, two_keys, bytes("m")); }},
      {Message::Append, [](B& b) { return b.append(0, "s", bytes("r2")); }},
      {Message::Read, [](B& b) { return b.read(0, "s", 1, 10, 0); }},
      {Message::StreamInfo, [](B& b) { return b.stream_info(0, "s"); }},
      {Message::StreamList, [](B& b) { return b.stream_list(0, "", 0); }},
      {Message::SetRetention, [](B& b) { return b.set_retention(0, "s", {.max_records = 100}); }},
      {Message::Stats, [](B& b) { return b.stats(0); }},
      {Message::ConnList, [](B& b) { return b.conn_list(0, 0, 10, 0); }},
      {Message::FlagList, [](B& b) { return b.flag_list(0); }},
      {Message::FlagSet, [](B& b) { return b.flag_set(0, "offers", 100); }},
      // Needs a broker in cluster mode; that its answer is sent with id 0
      // too is checked on the handler (server_admin_handler_test.cpp).
      {Message::ClusterStatus, [](B& b) { return b.cluster_status(0); }, wire::ErrorCode::not_found},
      {Message::ClusterTakeover, [](B& b) { return b.cluster_takeover(0, "gone"); }, wire::ErrorCode::not_found},
      {Message::OfferAck, [](B& b) { return b.offer_ack(0, 9, "user.1"); }},
      {Message::PendingOffers, [](B& b) { return b.pending_offers(0, "user.1"); }},
      {Message::ExposureQuery, [&](B& b) { return b.exposure_query(0, user_1, 1000); }},
      {Message::Withdraw, [](B& b) { return b.withdraw(0, 9); }},
      {Message::StreamDelete, [](B& b) { return b.stream_delete(0, "s"); }},
      {Message::Drain, [](B& b) { return b.drain(0, 60'000); }},
  };

  // §2's message type table: every type is there, and the requests above
  // are the types it says a client sends (besides the handshake's).
  std::map<std::string, std::string> direction;
  for (const auto& row : table_after(lines, "### Message types")) {
    REQUIRE(row.size() >= 3);
    for (const auto& name : backticked(row[1])) direction[name] = row[2];
  }
  for (int t = 1; t <= static_cast<int>(Message::MAX); ++t) {
    const auto type = static_cast<Message>(t);
    const std::string name = wire::EnumNameMessage(type);
    INFO(name);
    REQUIRE(direction.contains(name));
    const bool from_clients = direction[name] == "C" || direction[name] == "both";
    const bool handshake = type == Message::Hello || type == Message::AuthProof;
    const bool tested = std::any_of(requests.begin(), requests.end(), [&](const request& r) { return r.type == type; });
    CHECK(from_clients == (tested || handshake));
  }

  std::set<std::string> answered;
  std::set<std::string> refused;  // as expected: the requests with refused_here
  std::uint64_t flush = 100;
  for (const auto& r : requests) {
    const std::string name = wire::EnumNameMessage(r.type);
    INFO(name << " sent with request id 0");
    // The request, then a Ping in the same write: the Pong comes after
    // whatever the request caused (the flush idiom, §6).
    const auto req = r.build(c.b);
    std::vector<std::uint8_t> both(req.begin(), req.end());
    const auto ping = c.b.ping(++flush);
    both.insert(both.end(), ping.begin(), ping.end());
    c.raw.send(both);
    for (;;) {
      const auto* f = c.raw.next(c.storage);
      REQUIRE(f);
      if (f->message_type() == Message::Pong && f->request_id() == flush) break;
      if (const auto* e = f->message_as_Error()) {
        if (r.refused_here && e->code() == *r.refused_here && f->request_id() == 0 && !e->fatal()) {
          refused.insert(name);  // a failure is reported with id 0 (§2)
          continue;
        }
        FAIL("refused: " << (e->message() ? e->message()->str() : ""));  // the set-up is wrong
      }
      if (f->request_id() == 0 && !unsolicited(f->message_type())) answered.insert(name);
    }
  }
  std::set<std::string> requests_documented;  // the document's list, of the requests sent that succeed here
  std::set<std::string> refused_documented;   // ... of those refused here
  for (const auto& r : requests) {
    const std::string name = wire::EnumNameMessage(r.type);
    if (documented.contains(name)) (r.refused_here ? refused_documented : requests_documented).insert(name);
    if (r.refused_here) CHECK(refused.contains(name));
  }
  CHECK(answered == requests_documented);
  std::set<std::string> all_documented = requests_documented;
  all_documented.insert(refused_documented.begin(), refused_documented.end());
  CHECK(documented == all_documented);  // the list names nothing else
}

TEST_CASE("docs/protocol.md section 8 lists every error code by its value and name", "[e2e][docs]") {
  const auto lines = protocol_doc_lines();
  std::map<int, std::string> documented;
  for (const auto& row : table_after(lines, "## 8. Errors")) {
    REQUIRE(row.size() >= 2);
    const auto names = backticked(row[1]);
    REQUIRE(names.size() == 1);
    documented[std::stoi(row[0])] = names[0];
  }
  std::map<int, std::string> schema;
  for (int v = 0; v <= static_cast<int>(wire::ErrorCode::MAX); ++v)
    schema[v] = wire::EnumNameErrorCode(static_cast<wire::ErrorCode>(v));
  CHECK(documented == schema);
  // "Codes above N (from a newer peer) must be treated as generic errors."
  const std::string above = "Codes above " + std::to_string(static_cast<int>(wire::ErrorCode::MAX)) + " ";
  CHECK(std::any_of(lines.begin(), lines.end(),
                    [&](const std::string& l) { return l.find(above) != std::string::npos; }));
}

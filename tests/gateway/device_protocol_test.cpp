// device_protocol: what devices send, parsed strictly; what they get, as
// JSON any language reads.

#include "gateway/device_protocol.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <variant>

using namespace switchyard::edge;
using nlohmann::json;

namespace {

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

template <class M>
M parsed_as(std::string_view text) {
  auto r = parse_device_message(text);
  INFO(text);
  REQUIRE(r);
  REQUIRE(std::holds_alternative<M>(*r));
  return std::get<M>(*r);
}

std::string failure_of(std::string_view text) {
  auto r = parse_device_message(text);
  INFO(text);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == device_errc::bad_message);
  return r.error().reason;
}

}  // namespace

TEST_CASE("a hello gives its token, app, capabilities and resume points", "[gateway][protocol]") {
  const auto h = parsed_as<hello_message>(
      R"({"t":"hello","token":"x.y.z","app":"web/1.2","caps":["offers"],"resume":{"u.alice":{"seq":41,"epoch":"3"},"u.b":{"seq":1,"epoch":7}},"new":1})");
  CHECK(h.token == "x.y.z");
  CHECK(h.app == "web/1.2");
  CHECK(h.caps == std::vector<std::string>{"offers"});
  REQUIRE(h.resume.contains("u.alice"));
  CHECK(h.resume.at("u.alice").seq == 41);
  CHECK(h.resume.at("u.alice").epoch == 3);
  CHECK(h.resume.at("u.b").epoch == 7);
}

TEST_CASE("heartbeats, subscriptions and acks parse", "[gateway][protocol]") {
  parsed_as<heartbeat_message>(R"({"t":"hb"})");
  const auto s = parsed_as<subscribe_message>(R"({"t":"sub","id":7,"channel":"news"})");
  CHECK(s.id == 7);
  CHECK(s.channel == "news");
  CHECK(parsed_as<unsubscribe_message>(R"({"t":"unsub","channel":"news"})").id == 0);
  CHECK(parsed_as<ack_message>(R"({"t":"ack","offer":99})").offer == 99);
  CHECK(parsed_as<ack_message>(R"({"t":"ack","offer":"18446744073709551615"})").offer == 18446744073709551615u);
}

TEST_CASE("malformed messages are bad_message with a reason", "[gateway][protocol]") {
  CHECK(failure_of("not json") == "not JSON");
  CHECK(failure_of("[1]") == "not a JSON object");
  CHECK(failure_of(R"({"x":1})") == "missing \"t\"");
  CHECK(failure_of(R"({"t":"dance"})") == "unknown \"t\": dance");
  CHECK(failure_of(R"({"t":"hello"})") == "missing \"token\"");
  CHECK(failure_of(R"({"t":"hello","token":5})") == "\"token\" must be a string");
  CHECK(failure_of(R"({"t":"sub","id":-1,"channel":"a"})") == "\"id\" must be a non-negative integer");
  CHECK(failure_of(R"({"t":"ack","offer":0})") == "\"offer\" must not be 0");
  CHECK(failure_of(R"({"t":"ack","offer":"12x"})") == "\"offer\" must be a decimal string of a 64-bit number");
  CHECK(failure_of(R"({"t":"hello","token":"t","caps":"offers"})").starts_with("\"caps\" must be an array"));
  CHECK(failure_of(R"({"t":"hello","token":"t","resume":{"s":{"seq":1}}})") == "missing \"epoch\"");
  CHECK(failure_of(R"({"t":"hello","token":")" + std::string(max_token_bytes + 1, 'a') + R"("})") ==
        "\"token\" is too long");
}

TEST_CASE("a payload that is UTF-8 is sent as data, anything else as base64", "[gateway][protocol]") {
  const auto text =
      json::parse(delivery_text({.payload = bytes("héllo \"you\"\n"), .stream = "u.a", .seq = 5, .epoch = 2}));
  CHECK(text["t"] == "msg");
  CHECK(text["data"] == "héllo \"you\"\n");
  CHECK(text["stream"] == "u.a");
  CHECK(text["seq"] == 5);
  CHECK(text["epoch"] == "2");  // 64-bit ids as strings: JavaScript numbers hold 53 bits
  CHECK_FALSE(text.contains("b64"));
  const std::string binary("\xff\x00\x01", 3);
  const auto b = json::parse(delivery_text({.payload = bytes(binary)}));
  CHECK(b["b64"] == "/wAB");
  CHECK_FALSE(b.contains("data"));
  CHECK_FALSE(b.contains("stream"));
}

TEST_CASE("an offer carries its id and time left", "[gateway][protocol]") {
  const auto o = json::parse(delivery_text({.payload = bytes("ride"), .offer = 12, .ttl_ms = 1500}));
  CHECK(o["t"] == "offer");
  CHECK(o["offer"] == "12");
  CHECK(o["ttl_ms"] == 1500);
  CHECK(json::parse(withdrawn_text(12)) == json::parse(R"({"t":"withdrawn","offer":"12"})"));
}

TEST_CASE("the welcome lists the capabilities granted and the flags", "[gateway][protocol]") {
  const std::vector<std::string> caps{"offers"};
  const std::pair<std::string, bool> flags[] = {{"offers", true}};
  const auto w = json::parse(welcome_text(
      {.user = "alice", .session = "gw-1-7", .ping_ms = 25000, .dead_ms = 60000, .caps = caps, .flags = flags}));
  CHECK(
      w ==
      json::parse(
          R"({"t":"welcome","user":"alice","session":"gw-1-7","ping_ms":25000,"dead_ms":60000,"caps":["offers"],"flags":{"offers":true}})"));
}

TEST_CASE("errors name their code, and close reasons fit a close frame", "[gateway][protocol]") {
  CHECK(json::parse(error_text(3, device_errc::forbidden, "no")) ==
        json::parse(R"({"t":"error","id":3,"code":"forbidden","message":"no"})"));
  CHECK(close_reason(device_errc::going_away, "retry_after_ms=250") == "going_away: retry_after_ms=250");
  const std::string long_detail(200, 'x');
  CHECK(close_reason(device_errc::bad_message, long_detail).size() == 123);
  // Never cut inside a UTF-8 sequence.
  std::string accents;
  for (int i = 0; i < 80; ++i) accents += "é";
  const auto cut = close_reason(device_errc::bad_message, accents);
  CHECK(cut.size() <= 123);
  CHECK((static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80);  // ends on a full "é" (its 2nd byte)
}

TEST_CASE("every error code has a distinct name and the documented close code", "[gateway][protocol]") {
  std::set<std::string_view> names;
  for (const auto& r : device_errors()) {
    CHECK(names.insert(r.name).second);
    CHECK(make_error_code(r.code).message() == r.name);
    CHECK((r.close_code == 0 || r.close_code == 1001 || r.close_code == 1009 || r.close_code == 1011 ||
           r.close_code == 1013 || (r.close_code >= 4000 && r.close_code <= 4999)));
  }
  CHECK(row_of(device_errc::unauthorized).close_code == 4001);
  CHECK(row_of(device_errc::going_away).close_code == 1001);
}

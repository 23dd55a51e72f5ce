#include "gateway/device_protocol.hpp"

#include "text/json_writer.hpp"
#include "text/utf8.hpp"

#include <nlohmann/json.hpp>
#include <sodium.h>

#include <algorithm>
#include <charconv>

namespace switchyard::edge {

namespace {

using nlohmann::json;

std::unexpected<parse_failure> bad(std::string reason) {
  return std::unexpected(parse_failure{device_errc::bad_message, std::move(reason)});
}

// A string field: absent -> "" (when optional), else it must be a string
// of at most `max` bytes.
std::expected<std::string, parse_failure> string_field(const json& j, const char* name, std::size_t max,
                                                       bool required) {
  const auto it = j.find(name);
  if (it == j.end()) {
    if (required) return bad(std::string("missing \"") + name + "\"");
    return std::string();
  }
  if (!it->is_string()) return bad(std::string("\"") + name + "\" must be a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max) return bad(std::string("\"") + name + "\" is too long");
  return s;
}

std::expected<std::uint64_t, parse_failure> number_field(const json& j, const char* name, bool required) {
  const auto it = j.find(name);
  if (it == j.end()) {
    if (required) return bad(std::string("missing \"") + name + "\"");
    return 0;
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0))
    return bad(std::string("\"") + name + "\" must be a non-negative integer");
  return it->get<std::uint64_t>();
}

// A 64-bit id (an epoch, an offer id): a decimal string (what the gateway
// sends: JavaScript numbers hold 53 bits) or a non-negative integer.
std::expected<std::uint64_t, parse_failure> id_field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it != j.end() && it->is_string()) {
    const auto& text = it->get_ref<const std::string&>();
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
      return bad(std::string("\"") + name + "\" must be a decimal string of a 64-bit number");
    return v;
  }
  return number_field(j, name, true);
}

std::expected<device_message, parse_failure> parse_hello(const json& j) {
  hello_message h;
  auto token = string_field(j, "token", max_token_bytes, true);
  if (!token) return std::unexpected(token.error());
  h.token = std::move(*token);
  auto app = string_field(j, "app", max_app_bytes, false);
  if (!app) return std::unexpected(app.error());
  h.app = std::move(*app);
  if (const auto caps = j.find("caps"); caps != j.end()) {
    if (!caps->is_array() || caps->size() > max_caps) return bad("\"caps\" must be an array of at most 16 strings");
    for (const auto& c : *caps) {
      if (!c.is_string() || c.get_ref<const std::string&>().size() > max_cap_bytes)
        return bad("\"caps\" must hold strings of at most 32 bytes");
      h.caps.push_back(c.get<std::string>());
    }
  }
  if (const auto resume = j.find("resume"); resume != j.end()) {
    if (!resume->is_object() || resume->size() > max_resume_streams)
      return bad("\"resume\" must be an object of at most 64 streams");
    for (const auto& [stream, at] : resume->items()) {
      if (stream.empty() || stream.size() > max_channel_bytes || !at.is_object())
        return bad("\"resume\" maps stream names to {\"seq\":N,\"epoch\":E}");
      auto seq = number_field(at, "seq", true);
      auto epoch = id_field(at, "epoch");
      if (!seq) return std::unexpected(seq.error());
      if (!epoch) return std::unexpected(epoch.error());
      h.resume.emplace(stream, resume_point{*seq, *epoch});
    }
  }
  return h;
}

template <class M>
std::expected<device_message, parse_failure> parse_channel_request(const json& j) {
  M m;
  auto id = number_field(j, "id", false);
  if (!id) return std::unexpected(id.error());
  auto channel = string_field(j, "channel", max_channel_bytes, true);
  if (!channel) return std::unexpected(channel.error());
  m.id = *id;
  m.channel = std::move(*channel);
  return m;
}

// The payload as "data" (UTF-8 text, as is) or "b64" (anything else, in
// standard base64).
void add_payload(text::json_writer& w, std::span<const std::byte> payload) {
  const std::string_view bytes(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (text::is_utf8(bytes)) {
    w.string("data", bytes);
    return;
  }
  std::string b64(sodium_base64_ENCODED_LEN(payload.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(b64.data(), b64.size(), reinterpret_cast<const unsigned char*>(payload.data()), payload.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  b64.resize(b64.size() - 1);  // the terminating NUL
  w.string("b64", b64);
}

}  // namespace

std::expected<device_message, parse_failure> parse_device_message(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  const auto t = j.find("t");
  if (t == j.end() || !t->is_string()) return bad("missing \"t\"");
  const auto& kind = t->get_ref<const std::string&>();
  if (kind == "hb") return heartbeat_message{};
  if (kind == "sub") return parse_channel_request<subscribe_message>(j);
  if (kind == "unsub") return parse_channel_request<unsubscribe_message>(j);
  if (kind == "ack") {
    auto offer = id_field(j, "offer");
    if (!offer) return std::unexpected(offer.error());
    if (*offer == 0) return bad("\"offer\" must not be 0");
    return ack_message{*offer};
  }
  if (kind == "hello") return parse_hello(j);
  std::size_t cut = std::min<std::size_t>(kind.size(), 32);
  while (cut > 0 && cut < kind.size() && (static_cast<unsigned char>(kind[cut]) & 0xC0) == 0x80) --cut;
  return bad("unknown \"t\": " + kind.substr(0, cut));
}

std::string welcome_text(const welcome_fields& f) {
  text::json_writer w;
  w.begin_object().string("t", "welcome").string("user", f.user).string("session", f.session);
  w.number("ping_ms", f.ping_ms).number("dead_ms", f.dead_ms);
  w.key("caps").begin_array();
  for (const auto& c : f.caps) w.string(c);
  w.end_array();
  w.key("flags").begin_object();
  for (const auto& [name, on] : f.flags) w.boolean(name, on);
  w.end_object();
  return w.end_object().str();
}

std::string delivery_text(const delivery_fields& d) {
  text::json_writer w;
  w.begin_object().string("t", d.offer ? "offer" : "msg");
  if (d.offer) w.string("offer", std::to_string(d.offer));
  add_payload(w, d.payload);
  if (!d.stream.empty()) w.string("stream", d.stream).number("seq", d.seq).string("epoch", std::to_string(d.epoch));
  if (d.replayed) w.boolean("replayed", true);
  if (d.ttl_ms) w.number("ttl_ms", d.ttl_ms);
  return w.end_object().str();
}

std::string publication_text(std::string_view channel, std::span<const std::byte> payload) {
  text::json_writer w;
  w.begin_object().string("t", "pub").string("channel", channel);
  add_payload(w, payload);
  return w.end_object().str();
}

std::string withdrawn_text(std::uint64_t offer) {
  text::json_writer w;
  return w.begin_object().string("t", "withdrawn").string("offer", std::to_string(offer)).end_object().str();
}

std::string heartbeat_text() { return R"({"t":"hb"})"; }

std::string ok_text(std::uint64_t id) {
  text::json_writer w;
  return w.begin_object().string("t", "ok").number("id", id).end_object().str();
}

std::string error_text(std::uint64_t id, device_errc code, std::string_view message) {
  text::json_writer w;
  w.begin_object().string("t", "error");
  if (id) w.number("id", id);
  return w.string("code", row_of(code).name).string("message", message).end_object().str();
}

std::string dropped_text(std::uint64_t count) {
  text::json_writer w;
  return w.begin_object().string("t", "dropped").number("count", count).end_object().str();
}

std::string trimmed_text(std::string_view stream, std::string_view reason, std::uint64_t first_seq,
                         std::uint64_t epoch) {
  text::json_writer w;
  w.begin_object().string("t", "trimmed").string("stream", stream).string("reason", reason);
  return w.number("first_seq", first_seq).string("epoch", std::to_string(epoch)).end_object().str();
}

std::string close_reason(device_errc code, std::string_view detail) {
  std::string out(row_of(code).name);
  if (!detail.empty()) out += ": " + std::string(detail);
  constexpr std::size_t max = 123;  // RFC 6455 §5.5: control frames carry at most 125 bytes
  if (out.size() > max) {
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a sequence
    out.resize(cut);
  }
  return out;
}

}  // namespace switchyard::edge

#include "chaos/history.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <stdexcept>

namespace switchyard::chaos {
namespace {

using json = nlohmann::json;

constexpr std::array<std::pair<event_type, std::string_view>, 14> type_names{{
    {event_type::append, "append"},
    {event_type::read, "read"},
    {event_type::route, "route"},
    {event_type::send, "send"},
    {event_type::deliver, "deliver"},
    {event_type::abandon, "abandon"},
    {event_type::fault, "fault"},
    {event_type::heal, "heal"},
    {event_type::probe, "probe"},
    {event_type::subscribe, "subscribe"},
    {event_type::publish, "publish"},
    {event_type::receive, "receive"},
    {event_type::offer_ack, "offer_ack"},
    {event_type::offer_receipt, "offer_receipt"},
}};

// Sets `j[key]` only when `v` is not empty / zero: lines stay short.
template <typename T>
void put(json& j, const char* key, const T& v) {
  if (v != T{}) j[key] = v;
}

template <typename T>
void get(const json& j, const char* key, T& v) {
  if (auto it = j.find(key); it != j.end()) it->get_to(v);
}

}  // namespace

std::string_view type_name(event_type t) noexcept {
  for (const auto& [type, name] : type_names)
    if (type == t) return name;
  return "?";
}

std::string to_json(const event& e) {
  json j;
  j["t"] = e.t_us;
  j["type"] = type_name(e.type);
  put(j, "proc", e.proc);
  put(j, "stream", e.stream);
  put(j, "channel", e.channel);
  put(j, "payload", e.payload);
  put(j, "user", e.user);
  put(j, "gateway", e.gateway);
  put(j, "outcome", e.outcome);
  put(j, "seq", e.seq);
  put(j, "epoch", e.epoch);
  put(j, "ttl_ms", e.ttl_ms);
  put(j, "sweep_ms", e.sweep_ms);
  put(j, "fault", e.fault);
  put(j, "target", e.target);
  if (e.type == event_type::read) j["records"] = e.records;
  return j.dump();
}

std::expected<event, std::string> from_json(std::string_view line) {
  const auto j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::unexpected("not a JSON object");
  event e;
  try {
    const auto type = j.at("type").get<std::string>();
    bool known = false;
    for (const auto& [t, name] : type_names) {
      if (name == type) {
        e.type = t;
        known = true;
      }
    }
    if (!known) return std::unexpected("unknown type \"" + type + "\"");
    get(j, "t", e.t_us);
    get(j, "proc", e.proc);
    get(j, "stream", e.stream);
    get(j, "channel", e.channel);
    get(j, "payload", e.payload);
    get(j, "user", e.user);
    get(j, "gateway", e.gateway);
    get(j, "outcome", e.outcome);
    get(j, "seq", e.seq);
    get(j, "epoch", e.epoch);
    get(j, "ttl_ms", e.ttl_ms);
    get(j, "sweep_ms", e.sweep_ms);
    get(j, "fault", e.fault);
    get(j, "target", e.target);
    get(j, "records", e.records);
  } catch (const json::exception& x) {
    return std::unexpected(std::string("bad field: ") + x.what());
  }
  return e;
}

std::expected<std::vector<event>, std::string> read_history(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::unexpected("cannot read " + file.string());
  std::vector<event> out;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto e = from_json(line);
    if (!e) return std::unexpected(file.string() + ":" + std::to_string(n) + ": " + e.error());
    out.push_back(std::move(*e));
  }
  return out;
}

history_recorder::history_recorder(const std::filesystem::path& file) {
  if (file.empty()) return;
  switchyard::lock_guard lock(mutex_);
  out_.open(file, std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot create the history file " + file.string());
}

std::int64_t history_recorder::now_us() const noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
}

void history_recorder::record(event e) {
  if (e.t_us == 0) e.t_us = now_us();
  switchyard::lock_guard lock(mutex_);
  if (out_.is_open()) out_ << to_json(e) << '\n';
  events_.push_back(std::move(e));
}

std::vector<event> history_recorder::events() const {
  switchyard::lock_guard lock(mutex_);
  if (out_.is_open()) out_.flush();
  return events_;
}

}  // namespace switchyard::chaos

#include "settings/setting_rows.hpp"

#include <charconv>

namespace switchyard::settings {

std::pair<std::string, std::uint16_t> split_host_port(std::string_view option, const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--" + std::string(option) + " must be host:port");
  const std::string_view port_text = std::string_view(text).substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || end != port_text.data() + port_text.size() || port_text.empty() || port > 65535)
    throw std::invalid_argument("--" + std::string(option) + " port must be a number 0..65535");
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

namespace detail {

std::string one_of(std::span<const std::string> choices) {
  std::string out;
  for (const auto& c : choices) out += (out.empty() ? "" : ", ") + ("`" + c + "`");
  return out;
}

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '|')
      out += "\\|";
    else
      out += ch;
  }
  return out;
}

}  // namespace detail

}  // namespace switchyard::settings

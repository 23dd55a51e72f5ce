#include "broker/server/logger_style.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace switchyard::broker {

namespace {

// %* in the json pattern: the message as the inside of a JSON string.
class json_message_flag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr char hex[] = "0123456789abcdef";
    for (const char ch : std::string_view(msg.payload.data(), msg.payload.size())) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\r':
          dest.append(std::string_view("\\r"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            const char esc[] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};
            dest.append(esc, esc + sizeof esc);
          } else {
            dest.push_back(ch);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<json_message_flag>(); }
};

}  // namespace

bool is_logger_style(std::string_view name) noexcept { return name == "text" || name == "json"; }

void apply_logger_style(spdlog::logger& log, std::string_view name) {
  if (name == "json") {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<json_message_flag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"%n","msg":"%*"})");
    log.set_formatter(std::move(f));
    return;
  }
  log.set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%n] [%l] %v");
}

}  // namespace switchyard::broker

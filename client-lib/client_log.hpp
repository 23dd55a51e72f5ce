#pragma once
// Internal: the library's logging front end (see switchyard/log.hpp).

#include "switchyard/log.hpp"

#include <fmt/format.h>

namespace switchyard::client_lib {

bool log_enabled(log_level level) noexcept;
void log_write(log_level level, std::string_view message);

template <class... Args>
void log(log_level level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_write(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace switchyard::client_lib

#pragma once
// Where the client library's log lines go. By default nowhere: the library
// never writes to stderr on its own. Install a sink to see them.

#include <functional>
#include <string_view>

namespace switchyard {

enum class log_level { trace, debug, info, warn, error };

// Called on whichever thread logs (usually a client's event-loop thread);
// must be thread-safe and must not call back into the library.
using log_sink = std::function<void(log_level, std::string_view message)>;

// Replaces the process-wide sink (nullptr = silent) and sets the lowest
// level passed to it. Thread-safe.
void set_log_sink(log_sink sink, log_level min_level = log_level::info);

}  // namespace switchyard

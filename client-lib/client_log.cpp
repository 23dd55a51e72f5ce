#include "client_log.hpp"

#include "common/mutex.hpp"

#include <atomic>
#include <memory>

namespace switchyard {
namespace {

switchyard::mutex sink_mutex;
std::shared_ptr<const log_sink> current_sink SWITCHYARD_GUARDED_BY(sink_mutex);
// Checked without the lock on every log call; the sink itself under it.
std::atomic<int> min_level{static_cast<int>(log_level::error) + 1};

}  // namespace

void set_log_sink(log_sink sink, log_level level) {
  switchyard::lock_guard lock(sink_mutex);
  current_sink = sink ? std::make_shared<const log_sink>(std::move(sink)) : nullptr;
  min_level = current_sink ? static_cast<int>(level) : static_cast<int>(log_level::error) + 1;
}

namespace client_lib {

bool log_enabled(log_level level) noexcept {
  return static_cast<int>(level) >= min_level.load(std::memory_order_relaxed);
}

void log_write(log_level level, std::string_view message) {
  std::shared_ptr<const log_sink> sink;
  {
    switchyard::lock_guard lock(sink_mutex);
    sink = current_sink;
  }
  if (sink) (*sink)(level, message);
}

}  // namespace client_lib
}  // namespace switchyard

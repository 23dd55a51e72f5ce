#pragma once
// Captures what an in-process broker logs through its "broker" logger
// while the capture lives (the server picks the registered logger up when
// it starts). text() may be read while the broker logs.

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>

namespace switchyard::test {

class broker_log_capture {
 public:
  broker_log_capture() : sink_(std::make_shared<sink>()) {
    spdlog::drop("broker");
    spdlog::register_logger(std::make_shared<spdlog::logger>("broker", sink_));
  }
  ~broker_log_capture() { spdlog::drop("broker"); }
  broker_log_capture(const broker_log_capture&) = delete;
  broker_log_capture& operator=(const broker_log_capture&) = delete;

  // Everything logged so far, one message per line (the message only).
  std::string text() const { return sink_->text(); }

 private:
  class sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard lock(mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      text_.append(msg.payload.data(), msg.payload.size());
      text_ += '\n';
    }
    void flush_() override {}

   private:
    std::string text_;
  };
  std::shared_ptr<sink> sink_;
};

}  // namespace switchyard::test

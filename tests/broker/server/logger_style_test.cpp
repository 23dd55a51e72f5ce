// Unit tests for broker/server/logger_style.hpp: the text and json log line formats.

#include "broker/server/logger_style.hpp"

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <regex>
#include <sstream>
#include <string>

using namespace switchyard::broker;

namespace {

// A logger named "broker" writing into `out`, in `format`.
std::shared_ptr<spdlog::logger> logger_into(std::ostringstream& out, std::string_view format) {
  auto log = std::make_shared<spdlog::logger>("broker", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  apply_logger_style(*log, format);
  return log;
}

}  // namespace

TEST_CASE("a text log line starts with an ISO 8601 time with its UTC offset") {
  std::ostringstream out;
  logger_into(out, "text")->info("conn={} closed", 7);
  INFO(out.str());
  CHECK(std::regex_match(
      out.str(),
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d \[broker\] \[info\] conn=7 closed\n)")));
}

TEST_CASE("a json log line is one object with time, level, logger and the message escaped") {
  std::ostringstream out;
  logger_into(out, "json")->warn("name='{}' said \"hi\"\\ then\nnewline\x01", "a\tb");
  INFO(out.str());
  CHECK(std::regex_match(
      out.str(),
      std::regex(
          R"(\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d","level":"warning","logger":"broker","msg":"name='a\\tb' said \\"hi\\"\\\\ then\\nnewline\\u0001"\}\n)")));
}

TEST_CASE("text and json are the log formats there are") {
  CHECK(is_logger_style("text"));
  CHECK(is_logger_style("json"));
  CHECK_FALSE(is_logger_style("xml"));
  CHECK_FALSE(is_logger_style(""));
}

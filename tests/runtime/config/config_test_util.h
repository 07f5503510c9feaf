#pragma once
// Helpers shared by the runtime/config tests.
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "core/error.h"
#include "core/log.h"
#include "runtime/config/config.h"

#ifndef STRATA_CONFIG_TEST_DATA
#error "STRATA_CONFIG_TEST_DATA must name tests/runtime/config/data"
#endif

namespace strata::runtime::test {

inline std::string data_file(std::string_view name) {
  return std::string(STRATA_CONFIG_TEST_DATA) + "/" + std::string(name);
}

// Runs `f`, which must throw strata::Error, and returns the error.
template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a strata::Error";
  return Error("no error was thrown");
}

inline config::ParsedConfig parse(std::string_view text, std::vector<std::string> overrides = {}) {
  return config::parse_config(text, "test.json", overrides);
}

inline Error parse_error(std::string_view text, std::vector<std::string> overrides = {}) {
  return expect_error([&] { parse(text, overrides); });
}

// Everything the strata logger prints while this object lives (a sink on the real logger).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    sink_->set_pattern("%l %v");
    log::logger().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = log::logger().sinks();
    std::erase(sinks, sink_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() {
    log::logger().flush();
    return stream_.str();
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace strata::runtime::test

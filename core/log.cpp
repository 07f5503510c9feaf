#include "core/log.h"

#include <cstdlib>
#include <mutex>
#include <set>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace strata::log {
namespace {

spdlog::level::level_enum level_from_env(bool* bad) {
  const char* env = std::getenv("STRATA_LOG_LEVEL");
  *bad = false;
  if (env == nullptr || *env == '\0') return spdlog::level::info;
  std::string_view v(env);
  if (v == "trace") return spdlog::level::trace;
  if (v == "debug") return spdlog::level::debug;
  if (v == "info") return spdlog::level::info;
  if (v == "warn" || v == "warning") return spdlog::level::warn;
  if (v == "error") return spdlog::level::err;
  if (v == "off") return spdlog::level::off;
  *bad = true;
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = spdlog::stderr_color_mt("strata");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  bool bad = false;
  logger->set_level(level_from_env(&bad));
  if (bad) {
    logger->warn("STRATA_LOG_LEVEL='{}' is not a level; using info (valid: trace, debug, info, "
                 "warn, error, off)", std::getenv("STRATA_LOG_LEVEL"));
  }
  return logger;
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

void warn_once(std::string_view key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> seen;
  {
    std::lock_guard lock(mutex);
    if (!seen.emplace(key).second) return;
  }
  logger().warn("{}", message);
}

}  // namespace strata::log

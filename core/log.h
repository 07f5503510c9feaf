#pragma once
// Logging through spdlog. The level comes from STRATA_LOG_LEVEL
// (trace | debug | info | warn | error | off; default info), read once at first use.
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace strata::log {

// The process's strata logger (created on first use, stderr, level from STRATA_LOG_LEVEL).
spdlog::logger& logger();

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) { logger().trace(f, std::forward<Args>(args)...); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) { logger().debug(f, std::forward<Args>(args)...); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) { logger().info(f, std::forward<Args>(args)...); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) { logger().warn(f, std::forward<Args>(args)...); }
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) { logger().error(f, std::forward<Args>(args)...); }

// Logs `message` at warn level the first time `key` is seen in this process; later calls with
// the same key are silent. For fallbacks that must be announced once (no io_uring, no O_DIRECT).
void warn_once(std::string_view key, const std::string& message);

}  // namespace strata::log

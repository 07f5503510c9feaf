#pragma once
// The device a command runs on, from its config and its command line: the one place that maps
// strata.device / strata.device_memory / strata.cpu_threads and --device / --device-memory onto
// DeviceOptions, for strata train, strata infer and the tools.
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/config/config.h"
#include "runtime/device/device.h"

namespace strata::runtime::device {

// kind: device_flag when given, else strata.device ("auto", "host", "cuda"); memory_bytes:
// device_memory_flag when given, else strata.device_memory (0: the backend's default);
// host_threads: strata.cpu_threads (0 in a config not resolved yet: OpenMP's default). The
// config may be as read from the file or resolved: the caller decides which it means.
DeviceOptions device_options(const config::Config& config, std::string_view device_flag,
                             std::optional<std::uint64_t> device_memory_flag);

}  // namespace strata::runtime::device

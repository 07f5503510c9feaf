#include "runtime/device/device_config.h"

#include <string>

namespace strata::runtime::device {

DeviceOptions device_options(const config::Config& config, std::string_view device_flag,
                             std::optional<std::uint64_t> device_memory_flag) {
  DeviceOptions options;
  options.kind = !device_flag.empty() ? std::string(device_flag) : std::string(config::to_string(config.strata.device));
  options.memory_bytes = device_memory_flag.value_or(config.strata.device_memory_bytes);
  options.host_threads = static_cast<int>(config.strata.cpu_threads);
  return options;
}

}  // namespace strata::runtime::device

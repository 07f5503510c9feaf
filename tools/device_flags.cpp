#include "tools/device_flags.h"

#include "core/error.h"
#include "core/units.h"
#include "runtime/config/config.h"

namespace strata::tools {

void add_device_flags(CLI::App& command, DeviceFlags& flags) {
  command.add_option("--device", flags.device, "device backend: auto, host or cuda (overrides strata.device)")
      ->check(CLI::IsMember({"auto", "host", "cuda"}));
  command.add_option("--device-memory", flags.device_memory,
                     "device arena budget, e.g. 512MiB (overrides strata.device_memory)");
  command.add_option("--config", flags.config_path, "a DeepSpeed-style config file");
}

runtime::device::DeviceOptions resolve_device_options(const DeviceFlags& flags) {
  runtime::device::DeviceOptions options;
  if (!flags.config_path.empty()) {
    const runtime::config::Config config = runtime::config::load_config_file(flags.config_path).config;
    options.kind = std::string(runtime::config::to_string(config.strata.device));
    options.memory_bytes = config.strata.device_memory_bytes;
  }
  if (!flags.device.empty()) options.kind = flags.device;
  if (const std::optional<std::uint64_t> bytes = device_memory_bytes(flags)) options.memory_bytes = *bytes;
  return options;
}

std::optional<std::uint64_t> device_memory_bytes(const DeviceFlags& flags) {
  if (flags.device_memory.empty()) return std::nullopt;
  std::optional<std::uint64_t> bytes = parse_bytes(flags.device_memory);
  if (!bytes) {
    throw Error("--device-memory '" + flags.device_memory + "' is not a size", "--device-memory",
                "give bytes, or a number with a unit such as 512MiB or 2GB");
  }
  return bytes;
}

}  // namespace strata::tools

#include "tools/device_flags.h"

#include "core/error.h"
#include "core/units.h"
#include "runtime/config/config.h"
#include "runtime/device/device_config.h"

namespace strata::tools {

void add_device_flags(CLI::App& command, DeviceFlags& flags) {
  command.add_option("--device", flags.device, "device backend: auto, host or cuda (overrides strata.device)")
      ->check(CLI::IsMember({"auto", "host", "cuda"}));
  command.add_option("--device-memory", flags.device_memory,
                     "device arena budget, e.g. 512MiB (overrides strata.device_memory)");
  command.add_option("--config", flags.config_path, "a DeepSpeed-style config file");
}

runtime::device::DeviceOptions resolve_device_options(const DeviceFlags& flags) {
  // The config file's strata.device / strata.device_memory as read (no file: the defaults).
  const runtime::config::Config config = flags.config_path.empty()
                                             ? runtime::config::Config{}
                                             : runtime::config::load_config_file(flags.config_path).config;
  return runtime::device::device_options(config, flags.device, device_memory_bytes(flags));
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

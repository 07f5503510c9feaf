#pragma once
// The device flags shared by every command that creates a device (info now; train, infer and
// bench later): --device auto|host|cuda, --device-memory SIZE, --config FILE. A flag given on
// the command line overrides the config file's "strata" section, which overrides the default.
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/device/device.h"

namespace strata::tools {

struct DeviceFlags {
  std::string device;         // "" = from the config, else "auto"
  std::string device_memory;  // "" = from the config, else the backend default; "512MiB" etc.
  std::string config_path;    // "" = no config file
};

void add_device_flags(CLI::App& command, DeviceFlags& flags);

// Flags over config over defaults. Throws strata::Error for a bad size, kind or config file.
runtime::device::DeviceOptions resolve_device_options(const DeviceFlags& flags);

// --device-memory in bytes; nullopt when it was not given. Throws strata::Error for a bad size.
std::optional<std::uint64_t> device_memory_bytes(const DeviceFlags& flags);

}  // namespace strata::tools

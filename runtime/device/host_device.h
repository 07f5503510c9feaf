#pragma once
// The host backend (internal to runtime/device): see device.h for the contract.
#include <memory>

#include "runtime/device/device.h"

namespace strata::runtime::device {

inline constexpr std::uint64_t kDefaultHostDeviceBytes = std::uint64_t{512} << 20;

std::unique_ptr<Device> create_host_device(const DeviceOptions& options);

}  // namespace strata::runtime::device

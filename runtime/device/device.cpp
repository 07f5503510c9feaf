// Backend selection, and the CUDA entry points of a build without CUDA.
#include "runtime/device/device.h"

#include "core/log.h"
#include "runtime/device/host_device.h"

namespace strata::runtime::device {

#ifdef STRATA_HAVE_CUDA
std::unique_ptr<Device> create_cuda_device(const DeviceOptions& options);  // cuda_device.cpp
#else
CudaAvailability cuda_availability() {
  CudaAvailability a;
  a.why_not = "this build has no CUDA backend (configure with -DSTRATA_CUDA=ON where nvcc exists)";
  return a;
}
#endif

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::host: return "host";
    case Backend::cuda: return "cuda";
  }
  return "unknown";
}

std::unique_ptr<Device> Device::create(const DeviceOptions& options) {
  if (options.kind == "host") return create_host_device(options);
  if (options.kind != "auto" && options.kind != "cuda") {
    throw Error("unknown device kind '" + options.kind + "'", "strata.device",
                "use \"auto\", \"host\" or \"cuda\"");
  }
  CudaAvailability cuda = cuda_availability();
  if (cuda.devices.empty()) {
    if (options.kind == "cuda") {
      throw Error("the cuda device was asked for but none is usable: " + cuda.why_not,
                  "strata.device",
                  "set strata.device to \"host\" (or \"auto\"), or run where an NVIDIA GPU and "
                  "driver are present");
    }
    log::debug("device auto: host backend ({})", cuda.why_not);
    return create_host_device(options);
  }
#ifdef STRATA_HAVE_CUDA
  return create_cuda_device(options);
#else
  STRATA_ASSERT(false, "CUDA devices listed by a build without CUDA");
#endif
}

}  // namespace strata::runtime::device

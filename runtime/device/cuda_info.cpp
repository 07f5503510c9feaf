// Lists CUDA devices (cudart) and their PCIe link (NVML, loaded with dlopen so that a
// machine without the NVIDIA driver still runs the binary). Compiled only with CUDA.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <fmt/format.h>

#include "runtime/device/device.h"

namespace strata::runtime::device {
namespace {

// nvmlMemory_t (v1): what nvmlDeviceGetMemoryInfo fills.
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// The few NVML entry points we use, resolved at run time.
class Nvml {
 public:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    init_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
    by_bus_id_ = reinterpret_cast<int (*)(const char*, void**)>(
        dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    link_gen_ = reinterpret_cast<int (*)(void*, unsigned*)>(
        dlsym(lib_, "nvmlDeviceGetCurrPcieLinkGeneration"));
    link_width_ = reinterpret_cast<int (*)(void*, unsigned*)>(
        dlsym(lib_, "nvmlDeviceGetCurrPcieLinkWidth"));
    memory_ = reinterpret_cast<int (*)(void*, NvmlMemory*)>(dlsym(lib_, "nvmlDeviceGetMemoryInfo"));
    ok_ = init_ && shutdown_ && by_bus_id_ && link_gen_ && link_width_ && init_() == 0;
  }
  ~Nvml() {
    if (ok_) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // PCIe link and free memory, without creating a CUDA context on the device.
  void fill(CudaDeviceInfo& info) const {
    if (!ok_) return;
    void* handle = nullptr;
    if (by_bus_id_(info.pci_bus_id.c_str(), &handle) != 0) return;
    unsigned gen = 0, width = 0;
    if (link_gen_(handle, &gen) == 0) info.pcie_generation = static_cast<int>(gen);
    if (link_width_(handle, &width) == 0) info.pcie_width = static_cast<int>(width);
    NvmlMemory memory{};
    if (memory_ != nullptr && memory_(handle, &memory) == 0) info.free_bytes = memory.free;
  }

 private:
  void* lib_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_id_)(const char*, void**) = nullptr;
  int (*link_gen_)(void*, unsigned*) = nullptr;
  int (*link_width_)(void*, unsigned*) = nullptr;
  int (*memory_)(void*, NvmlMemory*) = nullptr;
};

}  // namespace

CudaAvailability cuda_availability() {
  CudaAvailability a;
  a.compiled = true;
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    // cudart says "driver version is insufficient" also when there is no driver at all.
    const bool no_driver = access("/proc/driver/nvidia/version", F_OK) != 0;
    a.why_not = fmt::format("{}{} ({})", no_driver ? "no NVIDIA kernel driver is loaded; cudart: " : "",
                            cudaGetErrorString(rc), cudaGetErrorName(rc));
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return a;
  }
  if (count == 0) {
    a.why_not = "the CUDA driver reports no device";
    return a;
  }
  Nvml nvml;
  for (int i = 0; i < count; ++i) {
    CudaDeviceInfo info;
    info.ordinal = i;
    cudaDeviceProp prop{};
    rc = cudaGetDeviceProperties(&prop, i);
    if (rc != cudaSuccess) {
      a.why_not = fmt::format("device {}: {}", i, cudaGetErrorString(rc));
      continue;
    }
    info.name = prop.name;
    info.total_bytes = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), i) == cudaSuccess) info.pci_bus_id = bus_id;
    nvml.fill(info);
    a.devices.push_back(std::move(info));
  }
  return a;
}

}  // namespace strata::runtime::device

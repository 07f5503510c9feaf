// The cuda backend's HostFlag: see cuda_host_flag.h.
#include "runtime/device/cuda_host_flag.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/error.h"

namespace strata::runtime::device {
namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32 from the driver, once per process; null when the driver lacks it.
WaitValue32 wait_value_fn() {
  static WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t rc =
        cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &status);
    if (rc != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
      cudaGetLastError();  // clear it
      log::warn("CUDA stream memory operations are not available ({}): streams wait on host work with a host "
                "function that spins (slower overlap)",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "symbol not found");
      return WaitValue32{nullptr};
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
  return fn;
}

class CudaHostFlag final : public HostFlag {
 public:
  explicit CudaHostFlag(int ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal));
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&word_), sizeof(std::uint32_t),
                             cudaHostAllocMapped | cudaHostAllocPortable));
    *word_ = 0;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_word_), word_, 0));
  }
  ~CudaHostFlag() override { cudaFreeHost(word_); }

  void signal(std::uint32_t value) override {
    std::atomic_ref<std::uint32_t> word(*word_);
    std::uint32_t seen = word.load(std::memory_order_relaxed);
    while (!flag_reached(seen, value) && !word.compare_exchange_weak(seen, value, std::memory_order_release)) {
    }
  }
  std::uint32_t value() const override {
    return std::atomic_ref<std::uint32_t>(*word_).load(std::memory_order_acquire);
  }
  CUdeviceptr device_word() const { return reinterpret_cast<CUdeviceptr>(device_word_); }

 private:
  std::uint32_t* word_ = nullptr;         // mapped pinned host memory
  std::uint32_t* device_word_ = nullptr;  // the same word as the GPU addresses it
};

struct SpinWait {
  const CudaHostFlag* flag;
  std::uint32_t value;
};

void CUDART_CB spin_until_raised(void* user) {
  std::unique_ptr<SpinWait> w(static_cast<SpinWait*>(user));
  while (w->flag->value() < w->value) std::this_thread::yield();
}

}  // namespace

std::unique_ptr<HostFlag> create_cuda_host_flag(int ordinal) { return std::make_unique<CudaHostFlag>(ordinal); }

void cuda_wait_host_flag(void* stream, const HostFlag& flag, std::uint32_t value) {
  const auto& f = dynamic_cast<const CudaHostFlag&>(flag);
  auto s = static_cast<cudaStream_t>(stream);
  // Once the driver has refused a wait (a device without stream memory operations), every later
  // wait takes the host function.
  static std::atomic<bool> refused{false};
  if (WaitValue32 wait = wait_value_fn(); wait != nullptr && !refused.load()) {
    const CUresult rc = wait(reinterpret_cast<CUstream>(s), f.device_word(), value, CU_STREAM_WAIT_VALUE_GEQ);
    if (rc == CUDA_SUCCESS) return;
    if (!refused.exchange(true)) {
      log::warn("cuStreamWaitValue32 failed (CUresult {}): streams wait on host work with a host function that "
                "spins (slower overlap)",
                static_cast<int>(rc));
    }
  }
  CUDA_CHECK(cudaLaunchHostFunc(s, spin_until_raised, new SpinWait{&f, value}));
}

}  // namespace strata::runtime::device

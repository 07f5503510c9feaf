// CUDA backend: cudaStream_t / cudaEvent_t, the arena carved from one cudaMalloc with a hard
// budget, cudaMemcpyAsync, and the pin hook (cudaHostRegister). Compiled only with CUDA.
#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "core/units.h"
#include "runtime/device/device.h"

namespace strata::runtime {
namespace {

// A host_task's closure and the slot where its failure is kept (Note [Failed streams] in
// host_device.cpp: the CUDA backend reports host-task failures the same way).
struct HostTaskCall {
  std::function<void()> fn;
  std::shared_ptr<std::exception_ptr> error;
};

void CUDART_CB run_host_task(void* user) {
  std::unique_ptr<HostTaskCall> call(static_cast<HostTaskCall*>(user));
  if (*call->error) return;  // the stream already failed: skip later host work
  try {
    call->fn();
  } catch (...) {
    *call->error = std::current_exception();
  }
}

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, int ordinal) : name_(std::move(name)), ordinal_(ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override {
    cudaError_t rc = cudaStreamSynchronize(stream_);
    if (rc != cudaSuccess) log::warn("stream '{}': {}", name_, cudaGetErrorString(rc));
    cudaStreamDestroy(stream_);
  }

  const std::string& name() const override { return name_; }

  void copy_async(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  void memset_async(void* dst, int value, std::size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  }
  void host_task(std::function<void()> fn, const char* /*name*/) override {
    auto call = std::make_unique<HostTaskCall>(HostTaskCall{std::move(fn), error_});
    CUDA_CHECK(cudaLaunchHostFunc(stream_, run_host_task, call.get()));
    call.release();  // owned by run_host_task from here
  }
  void wait(const Event& event) override;
  void synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (*error_) {
      std::exception_ptr error = std::exchange(*error_, nullptr);
      std::rethrow_exception(error);
    }
  }
  void* native_handle() const override { return stream_; }

 private:
  std::string name_;
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<std::exception_ptr> error_ = std::make_shared<std::exception_ptr>();
};

class CudaEvent final : public Event {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void record(Stream& stream) override {
    CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native_handle())));
  }
  bool query() const override {
    cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    CUDA_CHECK(rc);
    return true;
  }
  void synchronize() const override { CUDA_CHECK(cudaEventSynchronize(event_)); }
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

void CudaStream::wait(const Event& event) {
  CUDA_CHECK(cudaStreamWaitEvent(stream_, dynamic_cast<const CudaEvent&>(event).handle(), 0));
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::uint64_t budget_bytes, std::string name)
      : ordinal_(ordinal), name_(std::move(name)), memory_(allocate(ordinal, budget_bytes)),
        arena_(memory_, budget_bytes, "device") {}

  ~CudaDevice() override {
    cudaDeviceSynchronize();
    cudaFree(memory_);
  }

  Backend backend() const override { return Backend::cuda; }
  std::string name() const override { return name_; }
  std::unique_ptr<Stream> create_stream(std::string name) override {
    return std::make_unique<CudaStream>(std::move(name), ordinal_);
  }
  std::unique_ptr<Event> create_event() override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    return std::make_unique<CudaEvent>();
  }
  void synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }
  void pin_host(void* ptr, std::size_t bytes) override {
    CUDA_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
  }
  void unpin_host(void* ptr) override { CUDA_CHECK(cudaHostUnregister(ptr)); }

 protected:
  Arena& arena() override { return arena_; }
  const Arena& arena() const override { return arena_; }

 private:
  static void* allocate(int ordinal, std::uint64_t bytes) {
    CUDA_CHECK(cudaSetDevice(ordinal));
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
      throw Error(fmt::format("cudaMalloc of the device arena ({}) failed: {}", format_bytes(bytes),
                              cudaGetErrorString(rc)),
                  fmt::format("cuda:{}", ordinal), "lower strata.device_memory");
    }
    return p;
  }

  int ordinal_;
  std::string name_;
  void* memory_;
  Arena arena_;
};

}  // namespace

std::unique_ptr<Device> create_cuda_device(const DeviceOptions& options) {
  CudaAvailability cuda = cuda_availability();
  if (options.ordinal < 0 || options.ordinal >= static_cast<int>(cuda.devices.size())) {
    throw Error(fmt::format("CUDA device {} does not exist ({} found)", options.ordinal,
                            cuda.devices.size()),
                "device ordinal", "pick a device between 0 and the count minus one");
  }
  const CudaDeviceInfo& info = cuda.devices[options.ordinal];
  std::uint64_t budget = options.memory_bytes;
  if (budget == 0) {
    if (info.free_bytes <= options.cuda_reserve_bytes) {
      throw Error(fmt::format("CUDA device {} has only {} free, not more than the {} reserve",
                              options.ordinal, format_bytes(info.free_bytes),
                              format_bytes(options.cuda_reserve_bytes)),
                  info.name, "free the GPU (nvidia-smi shows who holds it) or set strata.device_memory");
    }
    budget = info.free_bytes - options.cuda_reserve_bytes;
  } else if (budget > info.free_bytes) {
    throw Error(fmt::format("strata.device_memory = {} but CUDA device {} has only {} free",
                            format_bytes(budget), options.ordinal, format_bytes(info.free_bytes)),
                info.name, "lower strata.device_memory");
  }
  budget = budget / Arena::kAlignment * Arena::kAlignment;
  log::info("cuda device {}: {}, arena {}", options.ordinal, info.name, format_bytes(budget));
  return std::make_unique<CudaDevice>(options.ordinal, budget, info.name);
}

}  // namespace strata::runtime

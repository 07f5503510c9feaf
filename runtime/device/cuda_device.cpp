// CUDA backend: cudaStream_t / cudaEvent_t, the arena carved from one cudaMalloc with a hard
// budget, cudaMemcpyAsync, and the pin hook (cudaHostRegister). Compiled only with CUDA.
//
// Every entry point makes the device's ordinal current first (cudaSetDevice is a cheap
// thread-local switch): a thread other than the creator, or one left on another GPU, must
// still reach the right context.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"
#include "core/units.h"
#include "runtime/launch/launch.h"
#include "runtime/device/cuda_host_flag.h"
#include "runtime/device/cuda_span_recorder.h"
#include "runtime/device/device.h"
#include "runtime/device/stream_registry.h"

namespace strata::runtime::device {
namespace {

// Where a stream keeps the first failure of its host tasks. Written on CUDA's callback
// thread, read by synchronize() on the caller's: guarded by a mutex.
class FailureSlot {
 public:
  bool failed() const {
    std::lock_guard lock(mutex_);
    return error_ != nullptr;
  }
  void set(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(e);
  }
  std::exception_ptr take() {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, nullptr);
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

struct HostTaskCall {
  std::function<void()> fn;
  std::shared_ptr<FailureSlot> failure;
};

void CUDART_CB run_host_task(void* user) {
  std::unique_ptr<HostTaskCall> call(static_cast<HostTaskCall*>(user));
  if (call->failure->failed()) return;  // the stream already failed: skip later host work
  try {
    call->fn();
  } catch (...) {
    call->failure->set(std::current_exception());
  }
}

// A span this thread has open (StreamSpan) on some stream. `begin` is null for a span nested
// in another on the same stream, which is not a span of its own.
struct OpenSpan {
  const Stream* stream;
  cudaEvent_t begin;
  const char* name;
  std::uint64_t bytes;
};
thread_local std::vector<OpenSpan> t_open_spans;

class CudaStream final : public Stream {
 public:
  // recorder: null when tracing is off; borrowed, outlives the stream.
  CudaStream(std::string name, int ordinal, CudaSpanRecorder* recorder,
             std::function<void(CudaStream*, bool)> registry)
      : name_(std::move(name)), ordinal_(ordinal), recorder_(recorder), registry_(std::move(registry)) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (recorder_ != nullptr) {
      track_ = recorder_->add_track(name_);
      enable_spans();
    }
    registry_(this, true);
  }
  ~CudaStream() override {
    registry_(this, false);
    cudaSetDevice(ordinal_);
    cudaError_t rc = cudaStreamSynchronize(stream_);
    if (rc != cudaSuccess) log::warn("stream '{}': {}", name_, cudaGetErrorString(rc));
    if (recorder_ != nullptr) recorder_->close_track(track_);
    cudaStreamDestroy(stream_);
  }

  const std::string& name() const override { return name_; }

  void copy_async(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaSetDevice(ordinal_));
    const Bracket bracket(*this, "copy", bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  void memset_async(void* dst, int value, std::size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaSetDevice(ordinal_));
    const Bracket bracket(*this, "memset", bytes);
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  }
  void host_task(std::function<void()> fn, const char* name) override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    auto call = std::make_unique<HostTaskCall>(HostTaskCall{std::move(fn), failure_});
    const Bracket bracket(*this, name, 0);  // unnamed: a wait, not traced (device.h)
    CUDA_CHECK(cudaLaunchHostFunc(stream_, run_host_task, call.get()));
    call.release();  // owned by run_host_task from here
  }
  void wait(const Event& event) override;
  void wait_host(const HostFlag& flag, std::uint32_t value) override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    cuda_wait_host_flag(stream_, flag, value);
  }
  void synchronize() override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    rethrow_failure();
  }
  void* native_handle() const override { return stream_; }

  void rethrow_failure() {
    if (std::exception_ptr e = failure_->take()) std::rethrow_exception(e);
  }

 protected:
  // Note [GPU spans] (cuda_span_recorder.h). Called with the device current (the callers'
  // cudaSetDevice, or OpScope's thread, which bound it).
  void span_begin(const char* name, std::uint64_t bytes) override {
    for (const OpenSpan& open : t_open_spans) {
      if (open.stream == this) {  // nested: part of the open span
        t_open_spans.push_back({this, nullptr, name, bytes});
        return;
      }
    }
    CUDA_CHECK(cudaSetDevice(ordinal_));
    t_open_spans.push_back({this, recorder_->mark(stream_), name, bytes});
  }
  void span_end() noexcept override {
    STRATA_ASSERT(!t_open_spans.empty() && t_open_spans.back().stream == this,
                  "StreamSpans closed out of order");
    const OpenSpan open = t_open_spans.back();
    t_open_spans.pop_back();
    if (open.begin == nullptr) return;
    try {
      cudaSetDevice(ordinal_);
      recorder_->submit(track_, open.begin, recorder_->mark(stream_), open.name, open.bytes);
    } catch (const std::exception& e) {
      // Tracing never fails the work it traces (the error, sticky, will surface there).
      recorder_->give_back(open.begin);
      log::warn("stream '{}': tracing '{}' failed: {}", name_, open.name, e.what());
    }
  }

 private:
  // A copy, memset or host task as a span of its own, unless tracing is off, the work is
  // unnamed, or a StreamSpan of this thread is open on the stream (then it is part of that).
  class Bracket {
   public:
    Bracket(CudaStream& s, const char* name, std::uint64_t bytes)
        : stream_(s.recorder_ != nullptr && name != nullptr ? &s : nullptr) {
      if (stream_ != nullptr) stream_->span_begin(name, bytes);
    }
    ~Bracket() {
      if (stream_ != nullptr) stream_->span_end();
    }
    Bracket(const Bracket&) = delete;
    Bracket& operator=(const Bracket&) = delete;

   private:
    CudaStream* stream_;
  };

  std::string name_;
  int ordinal_;
  CudaSpanRecorder* recorder_;
  CudaSpanRecorder::Track* track_ = nullptr;
  std::function<void(CudaStream*, bool)> registry_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<FailureSlot> failure_ = std::make_shared<FailureSlot>();
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int ordinal) : ordinal_(ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void record(Stream& stream) override {
    auto& cuda = dynamic_cast<CudaStream&>(stream);  // a host stream here is a programming error
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(cuda.native_handle())));
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
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

class CudaTimingEvent final : public TimingEvent {
 public:
  explicit CudaTimingEvent(int ordinal) : ordinal_(ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDefault));  // with timing
  }
  ~CudaTimingEvent() override { cudaEventDestroy(event_); }
  void record(Stream& stream) override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native_handle())));
  }
  double ms_since(const TimingEvent& start) const override {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, dynamic_cast<const CudaTimingEvent&>(start).event_, event_));
    return ms;
  }

 private:
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

void CudaStream::wait(const Event& event) {
  CUDA_CHECK(cudaSetDevice(ordinal_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, dynamic_cast<const CudaEvent&>(event).handle(), 0));
}

class CudaDevice final : public Device {
 public:
  // tracer: null or disabled = no GPU spans (and no reader thread).
  CudaDevice(int ordinal, std::uint64_t budget_bytes, std::string name, trace::Tracer* tracer)
      : ordinal_(ordinal), name_(std::move(name)), memory_(allocate(ordinal, budget_bytes)),
        arena_(memory_, budget_bytes, tier_names::kDevice) {
    if (tracer != nullptr && tracer->enabled()) {
      try {
        recorder_ = std::make_unique<CudaSpanRecorder>(ordinal_, *tracer);
      } catch (...) {
        cudaFree(memory_);  // the destructor does not run for a constructor that throws
        throw;
      }
    }
  }

  ~CudaDevice() override {
    STRATA_ASSERT(streams_.empty(), "streams outlive their device");
    cudaSetDevice(ordinal_);
    cudaDeviceSynchronize();
    recorder_.reset();  // every event has completed: records what is left
    cudaFree(memory_);
  }

  Backend backend() const override { return Backend::cuda; }
  std::string name() const override { return name_; }
  std::unique_ptr<Stream> create_stream(std::string name) override {
    return std::make_unique<CudaStream>(std::move(name), ordinal_, recorder_.get(), streams_.hook());
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(ordinal_); }
  std::unique_ptr<HostFlag> create_host_flag() override { return create_cuda_host_flag(ordinal_); }
  std::unique_ptr<TimingEvent> create_timing_event() override {
    return std::make_unique<CudaTimingEvent>(ordinal_);
  }
  void bind_thread() override { CUDA_CHECK(cudaSetDevice(ordinal_)); }
  void synchronize() override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaDeviceSynchronize());
    streams_.for_each([](CudaStream& s) { s.rethrow_failure(); });
  }
  void flush_trace() override {
    if (recorder_ != nullptr) recorder_->flush();
  }
  void pin_host(void* ptr, std::size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    // Portable: the pages count as pinned for every GPU's context, not only the current one.
    cudaError_t rc = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (rc != cudaSuccess) {
      throw Error(fmt::format("cudaHostRegister of {} at {} failed: {}", format_bytes(bytes), ptr,
                              cudaGetErrorString(rc)),
                  name_, "lower strata.pinned_memory, or raise the locked-memory limit (ulimit -l)");
    }
  }
  void unpin_host(void* ptr) noexcept override {
    cudaError_t rc = cudaHostUnregister(ptr);
    if (rc != cudaSuccess) log::warn("cudaHostUnregister({}) failed: {}", ptr, cudaGetErrorString(rc));
  }

 protected:
  Arena& arena() override { return arena_; }
  const Arena& arena() const override { return arena_; }

 private:
  static void* allocate(int ordinal, std::uint64_t bytes) {
    CUDA_CHECK(cudaSetDevice(ordinal));
    keep_pool_memory(ordinal);
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
      throw Error(fmt::format("cudaMalloc of the device arena ({}) failed: {}", format_bytes(bytes),
                              cudaGetErrorString(rc)),
                  fmt::format("cuda:{}", ordinal), "lower strata.device_memory");
    }
    return p;
  }

  // The kernels' scratch (cudaMallocAsync / cudaFreeAsync on the op's stream: norms, embedding
  // backward, split attention) comes from the device's default memory pool, whose release
  // threshold is 0 by default: at every synchronization the pool hands its free memory back to
  // the driver, and the next backward layer maps it again (a cudaMalloc-priced call each time).
  // Keeping it (the threshold at its maximum, as PyTorch's caching allocator does) bounds the
  // pool by the largest scratch that was ever live at once, which is small next to the arena.
  static void keep_pool_memory(int ordinal) {
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    std::uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }

  int ordinal_;
  std::string name_;
  void* memory_;
  Arena arena_;
  std::unique_ptr<CudaSpanRecorder> recorder_;  // null when tracing is off
  StreamRegistry<CudaStream> streams_;
};

}  // namespace

std::unique_ptr<Device> create_cuda_device(const DeviceOptions& options) {
  CudaAvailability cuda = cuda_availability();
  const int count = static_cast<int>(cuda.devices.size());
  // One process per GPU: by default rank k on a machine takes GPU k (modulo the count).
  const int ordinal = options.ordinal >= 0 ? options.ordinal : launch::detect_launch().local_rank % count;
  if (ordinal >= count) {
    throw Error(fmt::format("CUDA device {} does not exist ({} found)", ordinal, count),
                "device ordinal", "pick a device between 0 and the count minus one");
  }
  const CudaDeviceInfo& info = cuda.devices[ordinal];
  // Free memory of this device only: asking every GPU would create a context on each.
  CUDA_CHECK(cudaSetDevice(ordinal));
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::uint64_t budget = options.memory_bytes;
  if (budget == 0) {
    if (free_bytes <= options.cuda_reserve_bytes) {
      throw Error(fmt::format("CUDA device {} has only {} free, not more than the {} reserve",
                              ordinal, format_bytes(free_bytes), format_bytes(options.cuda_reserve_bytes)),
                  info.name, "free the GPU (nvidia-smi shows who holds it) or set strata.device_memory");
    }
    budget = free_bytes - options.cuda_reserve_bytes;
  } else if (budget > free_bytes) {
    throw Error(fmt::format("strata.device_memory = {} but CUDA device {} has only {} free",
                            format_bytes(budget), ordinal, format_bytes(free_bytes)),
                info.name, "lower strata.device_memory");
  }
  budget = budget / Arena::kAlignment * Arena::kAlignment;
  log::info("cuda device {}: {}, arena {}", ordinal, info.name, format_bytes(budget));
  return std::make_unique<CudaDevice>(ordinal, budget, info.name, options.tracer);
}

}  // namespace strata::runtime::device

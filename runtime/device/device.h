#pragma once
// The only door to an accelerator: Device, Stream, Event, DeviceBuffer.
//
// Two backends behind one interface:
//  - host: the "device" memory is a page-aligned host arena with a hard budget (default
//    512 MiB, to stand for a GPU that is too small); each Stream is a worker thread running
//    its queue in order; copies between host memory and the arena really happen, on the
//    stream that issued them, so overlap is real on a CPU-only machine.
//  - cuda: cudaStream_t / cudaEvent_t, the arena carved from one cudaMalloc, cudaMemcpyAsync,
//    and a pin hook that registers host buffers (cudaHostRegister).
// Everything above this header is backend-agnostic. No CUDA header is included here.
//
// Ownership: Device::create returns the owned device. Streams, events and buffers are owned
// by whoever created them and must not outlive their Device. A DeviceBuffer returns its bytes
// to the arena when destroyed: the owner must make sure that no enqueued work still uses it
// (synchronize the streams that used it, or wait on their events) before letting it go.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "runtime/device/arena.h"
#include "runtime/trace/trace.h"

namespace strata::runtime::device {


enum class Backend { host, cuda };
std::string_view backend_name(Backend backend);

struct DeviceOptions {
  std::string kind = "auto";          // "auto" (cuda when a GPU is usable, else host) | "host" | "cuda"
  int ordinal = -1;                   // which CUDA device; -1 = the local rank modulo the device count
  std::uint64_t memory_bytes = 0;     // arena budget; 0 = default (host: 512 MiB; cuda: free - reserve)
  std::uint64_t cuda_reserve_bytes = std::uint64_t{1} << 30;  // left free for CUDA/cuBLAS/NCCL
  // Host backend: the OpenMP team size of the host kernels run on its streams
  // (kernels/host/threads.h), i.e. the resolved strata.cpu_threads; the ops give the same bits
  // for any count. 0 = OpenMP's default (OMP_NUM_THREADS, else every CPU). OpenBLAS's sgemm
  // keeps its default count: its bits depend on it. The cuda backend ignores it.
  int host_threads = 0;
  // Host backend: copies between host memory and the arena take at least bytes / this many
  // seconds (the stream's worker sleeps out the rest), standing for a PCIe link in tests that
  // need copies slower than the host work around them. 0 = as fast as memcpy. cuda ignores it.
  std::uint64_t host_link_bytes_per_s = 0;
  // Host backend, tests only: called on a stream's worker just before each copy between host
  // memory and the arena runs, with the stream's name and the copy's bytes. It may block: the
  // copy, and the work behind it on that stream, wait for it, so that a test can hold a copy
  // open and prove that other work does not wait for it. cuda ignores it.
  std::function<void(const std::string& stream, std::size_t bytes)> host_copy_hook = {};
  // Borrowed; must outlive the device. When enabled, every piece of stream work becomes a span
  // on the track named after its stream ("compute", "h2d", "d2h", "comm", ...): copies and
  // memsets with their bytes, named host tasks, and the StreamSpans below (runtime/ops' compute
  // ops, the collectives). The host backend times each piece on the stream's worker thread; the
  // cuda backend brackets it with two timing events that a reader thread converts to the
  // tracer's clock once they complete (Note [GPU spans] in cuda_span_recorder.h), so the spans
  // of work still on the GPU appear a little later: Device::flush_trace() waits for them.
  trace::Tracer* tracer = nullptr;
};

class Stream;

// Told of each compute op (runtime/ops) enqueued on a stream it is attached to, before and after
// the op is enqueued, on the enqueueing thread: how runtime/ops' OpProfiler times every op.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void op_begin(Stream& stream, const char* op) = 0;
  virtual void op_end(Stream& stream) = 0;
};

// A point in a stream's work. record() captures everything enqueued on the stream so far;
// query()/synchronize() look at the last record. An event never recorded counts as complete.
class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  virtual void record(Stream& stream) = 0;
  virtual bool query() const = 0;        // true when the recorded work has completed
  virtual void synchronize() const = 0;  // blocks the calling thread until it has

 protected:
  Event() = default;
};

// A counter that the host raises and streams wait on: how a stream waits for host work (an NVMe
// read, a CPU computation) without running anything on the host itself. signal(v), from any
// thread, raises the counter to v (it only grows); work a stream enqueues after wait_host(flag, v)
// starts once the counter has reached v. On cuda the counter is a word of mapped pinned memory
// that the GPU polls (cuStreamWaitValue32): no host function runs and no CUDA thread blocks. On
// host the waiting stream's worker blocks until the value is reached. "Reached" and "grows" are
// serial-number order, as cuStreamWaitValue32's GEQ compares ((int32_t)(counter - v) >= 0;
// flag_reached): a counter that wraps past 2^32 (a long-running server's NVMe read parts) keeps
// working while signaller and waiter stay within 2^31 of each other.
// A flag carries no failure: whoever signals after a failed host task signals anyway (a waiter
// must never hang) and reports the failure itself, before anything reads what the waiter made.
inline bool flag_reached(std::uint32_t counter, std::uint32_t value) {
  return static_cast<std::int32_t>(counter - value) >= 0;
}

class HostFlag {
 public:
  virtual ~HostFlag() = default;
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;
  virtual void signal(std::uint32_t value) = 0;
  virtual std::uint32_t value() const = 0;

 protected:
  HostFlag() = default;
};

// An in-order queue of work. Work on different streams may run concurrently; order between
// streams is expressed with events (wait).
class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  virtual const std::string& name() const = 0;

  // Copies bytes between any two of: host memory, pinned host memory, the device arena.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void memset_async(void* dst, int value, std::size_t bytes) = 0;

  // Runs fn on a host thread in stream order. On the host backend this is how kernels run:
  // each stream has its own worker thread, and an exception thrown by fn is kept and
  // rethrown by synchronize(); later work on the stream is skipped, and streams that wait on
  // its events fail too (events still complete so that nothing hangs).
  // On cuda it is cudaLaunchHostFunc: fn must not call CUDA, must be short, and must not wait
  // for work of other streams (CUDA may run the host functions of all streams on one thread).
  // An exception is kept and rethrown by the stream's or the device's synchronize(), later
  // host tasks of the stream are skipped, but its copies and kernels still run.
  // `name` labels the work in a trace; it must outlive the stream (a string literal). A task
  // named nullptr is not traced: for tasks that only wait (for an NVMe read, say), whose time
  // is not this stream's work and would otherwise count as its busy time.
  virtual void host_task(std::function<void()> fn, const char* name = "host_task") = 0;

  // Work enqueued after this call starts only once `event`'s recorded work has completed.
  virtual void wait(const Event& event) = 0;
  // Work enqueued after this call starts only once `flag` has reached `value` (see HostFlag).
  virtual void wait_host(const HostFlag& flag, std::uint32_t value) = 0;

  // Blocks until all enqueued work has finished; rethrows the first failure of work on it.
  virtual void synchronize() = 0;

  // cudaStream_t on the cuda backend, nullptr on host: for kernel launchers in kernels/cuda.
  virtual void* native_handle() const = 0;

  // The observer of the ops enqueued on this stream (borrowed; null = none). Set and read by
  // the thread that enqueues.
  void set_op_observer(OpObserver* observer) { op_observer_ = observer; }
  OpObserver* op_observer() const { return op_observer_; }

 protected:
  Stream() = default;

  // For StreamSpan. A backend that traces work it cannot see as one piece (a compute op made
  // of several kernels) turns spans on and implements the pair; the host backend traces each
  // host task and copy as it runs and leaves them off.
  void enable_spans() noexcept { spans_enabled_ = true; }
  virtual void span_begin(const char* /*name*/, std::uint64_t /*bytes*/) {}
  virtual void span_end() noexcept {}

 private:
  friend class StreamSpan;
  OpObserver* op_observer_ = nullptr;
  bool spans_enabled_ = false;
};

// The work that this thread enqueues on `stream` while the StreamSpan lives is one span named
// `name` (a string literal) on the stream's track, with `bytes` (0 = not a transfer). Used by
// runtime/ops' OpScope and the collectives. Within an open span, the same thread's copies,
// memsets, host tasks and nested StreamSpans on that stream are not spans of their own (the
// track never has overlapping spans). Costs one branch where the backend does not use it (host,
// or no tracer).
class StreamSpan {
 public:
  StreamSpan(Stream& stream, const char* name, std::uint64_t bytes = 0)
      : stream_(stream.spans_enabled_ ? &stream : nullptr) {
    if (stream_ != nullptr) stream_->span_begin(name, bytes);
  }
  ~StreamSpan() {
    if (stream_ != nullptr) stream_->span_end();
  }
  StreamSpan(const StreamSpan&) = delete;
  StreamSpan& operator=(const StreamSpan&) = delete;

 private:
  Stream* stream_;
};

// A timestamp in a stream's work, for profiling: record() marks the point; once the stream
// has passed both marks (synchronize it), ms_since(start) is the time between them. On cuda a
// cudaEvent with timing (resolution ~0.5 us); on host the steady clock read by the stream's
// worker when it gets there.
class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  virtual void record(Stream& stream) = 0;
  virtual double ms_since(const TimingEvent& start) const = 0;

 protected:
  TimingEvent() = default;
};

class Device {
 public:
  // Picks the backend from options.kind ("auto": cuda when built with CUDA and a device is
  // present, else host). Throws strata::Error when "cuda" is asked for and none is usable.
  static std::unique_ptr<Device> create(const DeviceOptions& options = {});

  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual Backend backend() const = 0;
  virtual std::string name() const = 0;  // "host" or the GPU's name

  virtual std::unique_ptr<Stream> create_stream(std::string name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual std::unique_ptr<TimingEvent> create_timing_event() = 0;
  // Starts at 0. Must outlive the streams' waits on it (destroy it after synchronizing them).
  virtual std::unique_ptr<HostFlag> create_host_flag() = 0;

  // Blocks until every stream of this device has drained, then rethrows the first failure of
  // work on any of them.
  virtual void synchronize() = 0;

  // Makes the spans of every piece of stream work that has completed by now visible in the
  // tracer (DeviceOptions::tracer), without waiting for work still running: call it before
  // reading the tracer's busy counters (a step's end). The host backend records each span as
  // its work ends and has nothing to do; cuda waits for its reader thread to catch up.
  virtual void flush_trace() {}

  // The pin hook for host buffers that will be copied to or from the device often
  // (cudaHostRegister on cuda; nothing on host). unpin_host undoes it.
  virtual void pin_host(void* ptr, std::size_t bytes) = 0;
  virtual void unpin_host(void* ptr) noexcept = 0;  // logs a failure (called from destructors)
  // Makes this device current on the calling thread, for threads that launch kernels on its
  // streams directly (cudaSetDevice on cuda; nothing on host).
  virtual void bind_thread() {}

  // Device memory from the arena; throws OutOfMemory (naming `what`) past the budget.
  DeviceBuffer allocate(std::size_t bytes, std::string_view what) { return arena().allocate(bytes, what); }
  ArenaStats memory_stats() const { return arena().stats(); }

  // Other memory tiers (pinned host, NVMe) register here so that an out-of-memory error
  // reports all of them.
  void add_tier(std::function<TierUsage()> report) { arena().add_tier(std::move(report)); }

 protected:
  Device() = default;
  virtual Arena& arena() = 0;
  virtual const Arena& arena() const = 0;
};

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;  // from NVML; 0 = unknown (listing creates no CUDA context)
  int compute_major = 0;
  int compute_minor = 0;
  std::string pci_bus_id;
  int pcie_generation = 0;  // current link; 0 = unknown (NVML not available)
  int pcie_width = 0;
};

// Whether this build has the CUDA backend and which devices the driver reports; when none is
// usable, `why_not` says why ("built without CUDA", "no CUDA driver", "no device", ...).
struct CudaAvailability {
  bool compiled = false;
  std::vector<CudaDeviceInfo> devices;
  std::string why_not;
};
CudaAvailability cuda_availability();

}  // namespace strata::runtime::device

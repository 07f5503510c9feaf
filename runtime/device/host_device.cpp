// Host backend: the device arena is page-aligned host memory with a hard budget; every Stream
// is a worker thread that runs its queue in order; an Event is a set of pending generations.
//
// Note [Host events]: record() gives the event a new generation g and enqueues "complete g" on
// the stream. wait() captures the event's latest generation at the time of the call (as CUDA
// does) and enqueues a task that blocks the waiting stream's worker until g is complete. A
// generation is complete when it is no longer pending, so re-recording on another stream never
// releases a waiter early.
//
// Note [Failed streams]: an exception in a task is kept and rethrown by synchronize(); the
// stream then skips its remaining work but still runs event completions and waits, so that a
// failure on one stream never hangs another that waits on it. An event completed by a failed
// stream carries the failure: a stream that waits on it fails too ("stream 'x' failed: ..."),
// so work downstream of a failure never runs on bytes that were not written.
#include "runtime/device/host_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <thread>

#include <fmt/format.h>

#include "core/huge_mapping.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/host/threads.h"
#include "runtime/device/stream_registry.h"
#include "runtime/trace/trace.h"

namespace strata::runtime::device {
namespace {

class HostEvent;

class HostStream final : public Stream {
 public:
  // host_threads > 0: the OpenMP team size of the host ops this stream runs (its worker's).
  // link: when set, the time a copy of `bytes` between host memory and the arena must take at
  // least (DeviceOptions::host_link_bytes_per_s), or nullopt when the copy does not cross the
  // link. copy_hook: DeviceOptions::host_copy_hook, run before each copy over the link.
  using LinkTime =
      std::function<std::optional<std::chrono::nanoseconds>(const void* dst, const void* src, std::size_t bytes)>;
  using CopyHook = std::function<void(const std::string& stream, std::size_t bytes)>;
  HostStream(std::string name, trace::Tracer* tracer, int host_threads,
             std::function<void(HostStream*, bool)> registry, LinkTime link = {}, CopyHook copy_hook = {})
      : name_(std::move(name)),
        tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr),
        registry_(std::move(registry)),
        link_(std::move(link)),
        copy_hook_(std::move(copy_hook)) {
    worker_ = std::thread([this, host_threads] {
      if (host_threads > 0) kernels::host::set_openmp_threads(host_threads);
      run();
    });
    registry_(this, true);
  }

  ~HostStream() override {
    registry_(this, false);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    worker_.join();  // the worker drains its queue before it stops
    if (error_) {
      try {
        std::rethrow_exception(error_);
      } catch (const std::exception& e) {
        log::warn("stream '{}' destroyed with an unreported failure: {}", name_, e.what());
      }
    }
  }

  const std::string& name() const override { return name_; }

  void copy_async(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    const std::optional<std::chrono::nanoseconds> at_least = link_ ? link_(dst, src, bytes) : std::nullopt;
    if (!at_least || (at_least->count() == 0 && !copy_hook_)) {
      enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); }, /*control=*/false, "copy", bytes);
      return;
    }
    enqueue(
        [this, dst, src, bytes, at_least = *at_least] {
          if (copy_hook_) copy_hook_(name_, bytes);  // may hold the copy (tests)
          const auto start = std::chrono::steady_clock::now();
          std::memcpy(dst, src, bytes);
          if (at_least.count() > 0) std::this_thread::sleep_until(start + at_least);
        },
        /*control=*/false, "copy", bytes);
  }

  void memset_async(void* dst, int value, std::size_t bytes) override {
    if (bytes == 0) return;
    enqueue([dst, value, bytes] { std::memset(dst, value, bytes); }, /*control=*/false, "memset",
            bytes);
  }

  void host_task(std::function<void()> fn, const char* name) override {
    enqueue(std::move(fn), /*control=*/false, name);
  }

  void wait(const Event& event) override;
  void wait_host(const HostFlag& flag, std::uint32_t value) override;

  void synchronize() override {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = submitted_;
    drained_.wait(lock, [&] { return finished_ >= target; });
    if (error_) {
      std::exception_ptr error = std::exchange(error_, nullptr);
      failed_ = false;  // reported once; the stream is usable again
      std::rethrow_exception(error);
    }
  }

  void* native_handle() const override { return nullptr; }

  // Empty while the stream is healthy; otherwise "stream 'name' failed: what".
  std::string failure() {
    std::lock_guard lock(mutex_);
    return failed_ ? failure_ : std::string();
  }

  // Control tasks (event completion, cross-stream waits) run even on a failed stream.
  // `name` (a literal) labels the work in a trace; control tasks are not traced.
  void enqueue(std::function<void()> fn, bool control, const char* name = nullptr,
               std::uint64_t bytes = 0) {
    {
      std::lock_guard lock(mutex_);
      STRATA_ASSERT(!stopping_, "work enqueued on a stream that is being destroyed");
      queue_.push_back(Task{std::move(fn), control, name, bytes});
      ++submitted_;
    }
    work_ready_.notify_one();
  }

 private:
  struct Task {
    std::function<void()> fn;
    bool control = false;
    const char* name = nullptr;
    std::uint64_t bytes = 0;
  };

  void run() {
    for (;;) {
      Task task;
      bool skip = false;
      {
        std::unique_lock lock(mutex_);
        work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
        skip = failed_ && !task.control;  // Note [Failed streams]
      }
      // A skipped closure is destroyed outside the lock: its destructor may run code that
      // enqueues on this stream.
      if (skip) task.fn = nullptr;
      if (task.fn) {
        try {
          const std::int64_t start_ns = tracer_ != nullptr ? trace::Tracer::now_ns() : 0;
          task.fn();
          if (tracer_ != nullptr && task.name != nullptr) {
            tracer_->record(task.name, name_, start_ns, trace::Tracer::now_ns(), task.bytes);
          }
        } catch (...) {
          std::string what = "unknown exception";
          try {
            throw;
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          std::lock_guard lock(mutex_);
          if (!error_) {
            error_ = std::current_exception();
            failure_ = "stream '" + name_ + "' failed: " + what;
          }
          failed_ = true;
        }
      }
      {
        std::lock_guard lock(mutex_);
        ++finished_;
      }
      drained_.notify_all();
    }
  }

  const std::string name_;
  trace::Tracer* const tracer_;  // null when tracing is off
  std::function<void(HostStream*, bool)> registry_;
  LinkTime link_;
  CopyHook copy_hook_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable drained_;
  std::deque<Task> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t finished_ = 0;
  bool stopping_ = false;
  bool failed_ = false;
  std::exception_ptr error_;
  std::string failure_;  // describes error_
  std::thread worker_;
};

// Shared between the event and the tasks it enqueued, so an event may be destroyed while
// its completion is still queued.
struct EventState {
  std::mutex mutex;
  std::condition_variable completed;
  std::uint64_t last_generation = 0;
  std::set<std::uint64_t> pending;
  std::map<std::uint64_t, std::string> failed;  // generations completed by a failed stream

  bool done(std::uint64_t g) const { return g == 0 || !pending.contains(g); }
  // Waits until generation g is complete; returns the failure it carries ("" when none).
  std::string wait_for(std::uint64_t g) {
    std::unique_lock lock(mutex);
    completed.wait(lock, [&] { return done(g); });
    auto it = failed.find(g);
    return it == failed.end() ? std::string() : it->second;
  }
};

class HostEvent final : public Event {
 public:
  void record(Stream& stream) override {
    auto& host = dynamic_cast<HostStream&>(stream);
    std::uint64_t g;
    {
      std::lock_guard lock(state_->mutex);
      g = ++state_->last_generation;
      state_->pending.insert(g);
    }
    host.enqueue(
        [state = state_, g, &host] {
          std::string failure = host.failure();  // the stream outlives its queued tasks
          {
            std::lock_guard lock(state->mutex);
            state->pending.erase(g);
            if (!failure.empty()) state->failed.emplace(g, std::move(failure));
          }
          state->completed.notify_all();
        },
        /*control=*/true);
  }

  bool query() const override {
    std::lock_guard lock(state_->mutex);
    return state_->done(state_->last_generation);
  }

  // Host-side waits do not throw for an upstream failure: the failed stream's synchronize()
  // reports it.
  void synchronize() const override { state_->wait_for(latest()); }

  std::uint64_t latest() const {
    std::lock_guard lock(state_->mutex);
    return state_->last_generation;
  }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
};

// The steady clock, read by the stream's worker when it reaches the mark.
class HostTimingEvent final : public TimingEvent {
 public:
  void record(Stream& stream) override {
    dynamic_cast<HostStream&>(stream).enqueue(
        [time = time_] { *time = std::chrono::steady_clock::now(); }, /*control=*/true);
  }
  double ms_since(const TimingEvent& start) const override {
    const auto& from = dynamic_cast<const HostTimingEvent&>(start);
    return std::chrono::duration<double, std::milli>(*time_ - *from.time_).count();
  }

 private:
  // Shared with the queued task, which may outlive a destroyed event.
  std::shared_ptr<std::chrono::steady_clock::time_point> time_ =
      std::make_shared<std::chrono::steady_clock::time_point>();
};

void HostStream::wait(const Event& event) {
  const auto& host = dynamic_cast<const HostEvent&>(event);
  const std::uint64_t g = host.latest();
  if (g == 0) return;  // never recorded: nothing to wait for
  enqueue(
      [this, state = host.state(), g] {
        std::string upstream = state->wait_for(g);
        if (!upstream.empty()) {
          throw Error("stream '" + name_ + "' waited on work that failed: " + upstream, name_,
                      "fix the first failure; everything that depends on it was skipped");
        }
      },
      /*control=*/true);
}

// The counter and its condition, shared with the waits queued on streams.
struct FlagState {
  std::mutex mutex;
  std::condition_variable raised;
  std::uint32_t value = 0;
};

class HostFlagImpl final : public HostFlag {
 public:
  void signal(std::uint32_t value) override {
    {
      std::lock_guard lock(state_->mutex);
      if (!flag_reached(state_->value, value)) state_->value = value;
    }
    state_->raised.notify_all();
  }
  std::uint32_t value() const override {
    std::lock_guard lock(state_->mutex);
    return state_->value;
  }
  const std::shared_ptr<FlagState>& state() const { return state_; }

 private:
  std::shared_ptr<FlagState> state_ = std::make_shared<FlagState>();
};

void HostStream::wait_host(const HostFlag& flag, std::uint32_t value) {
  const auto& host = dynamic_cast<const HostFlagImpl&>(flag);
  enqueue(
      [state = host.state(), value] {
        std::unique_lock lock(state->mutex);
        state->raised.wait(lock, [&] { return flag_reached(state->value, value); });
      },
      /*control=*/true);
}

// Anonymous, page-aligned, reserved lazily: a 512 MiB arena costs nothing until it is touched,
// and then in huge pages where the kernel gives them (core/huge_mapping.h; a 5 GB model's
// weights took 1.2 M faults and 15 s of kernel time in 4 KiB pages on the dev VM).
class HostMapping {
 public:
  explicit HostMapping(std::uint64_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    void* p = map_anonymous(bytes_, MAP_NORESERVE);
    if (p == nullptr) {
      throw system_error(errno, "mmap", fmt::format("host device arena of {}", format_bytes(bytes_)),
                         "lower strata.device_memory");
    }
    data_ = p;
  }
  ~HostMapping() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  HostMapping(const HostMapping&) = delete;
  HostMapping& operator=(const HostMapping&) = delete;
  void* data() const { return data_; }

 private:
  std::uint64_t bytes_;
  void* data_ = nullptr;
};

class HostDevice final : public Device {
 public:
  HostDevice(std::uint64_t budget_bytes, trace::Tracer* tracer, int host_threads, std::uint64_t link_bytes_per_s,
             HostStream::CopyHook copy_hook)
      : mapping_(budget_bytes),
        arena_(mapping_.data(), budget_bytes, tier_names::kDevice),
        tracer_(tracer),
        host_threads_(host_threads),
        budget_bytes_(budget_bytes),
        link_bytes_per_s_(link_bytes_per_s),
        copy_hook_(std::move(copy_hook)) {}

  ~HostDevice() override { STRATA_ASSERT(streams_.empty(), "streams outlive their device"); }

  Backend backend() const override { return Backend::host; }
  std::string name() const override { return "host"; }

  std::unique_ptr<Stream> create_stream(std::string name) override {
    HostStream::LinkTime link;
    if (link_bytes_per_s_ > 0 || copy_hook_) {
      link = [this](const void* dst, const void* src,
                    std::size_t bytes) -> std::optional<std::chrono::nanoseconds> {
        if (in_arena(dst) == in_arena(src)) return std::nullopt;  // not over the link
        if (link_bytes_per_s_ == 0) return std::chrono::nanoseconds{0};
        return std::chrono::nanoseconds{static_cast<std::int64_t>(static_cast<double>(bytes) * 1e9 /
                                                                  static_cast<double>(link_bytes_per_s_))};
      };
    }
    return std::make_unique<HostStream>(std::move(name), tracer_, host_threads_, streams_.hook(), std::move(link),
                                        copy_hook_);
  }

  std::unique_ptr<Event> create_event() override { return std::make_unique<HostEvent>(); }
  std::unique_ptr<TimingEvent> create_timing_event() override {
    return std::make_unique<HostTimingEvent>();
  }
  std::unique_ptr<HostFlag> create_host_flag() override { return std::make_unique<HostFlagImpl>(); }

  // Drains every stream, even after one has failed (so that no work still runs when the
  // caller frees buffers), then rethrows the first failure.
  void synchronize() override {
    streams_.for_each([](HostStream& s) { s.synchronize(); });
  }

  void pin_host(void*, std::size_t) override {}  // host memory is what the "device" reads
  void unpin_host(void*) noexcept override {}

 protected:
  Arena& arena() override { return arena_; }
  const Arena& arena() const override { return arena_; }

 private:
  bool in_arena(const void* p) const {
    const auto* base = static_cast<const char*>(mapping_.data());
    const auto* c = static_cast<const char*>(p);
    return base != nullptr && c >= base && c < base + budget_bytes_;
  }

  HostMapping mapping_;
  Arena arena_;
  trace::Tracer* tracer_;
  int host_threads_;  // DeviceOptions::host_threads
  std::uint64_t budget_bytes_;
  std::uint64_t link_bytes_per_s_;  // DeviceOptions::host_link_bytes_per_s
  HostStream::CopyHook copy_hook_;  // DeviceOptions::host_copy_hook
  StreamRegistry<HostStream> streams_;
};

}  // namespace

std::unique_ptr<Device> create_host_device(const DeviceOptions& options) {
  const std::uint64_t budget = options.memory_bytes != 0 ? options.memory_bytes : kDefaultHostDeviceBytes;
  if (options.host_threads < 0)
    throw Error(fmt::format("host thread count {} is negative", options.host_threads),
                "DeviceOptions::host_threads", "use 0 for the default, or strata.cpu_threads");
  return std::make_unique<HostDevice>(budget, options.tracer, options.host_threads, options.host_link_bytes_per_s,
                                      options.host_copy_hook);
}

}  // namespace strata::runtime::device

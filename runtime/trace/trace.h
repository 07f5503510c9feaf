#pragma once
// Per-stream spans written as a Chrome trace (JSON), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one track per stream (NVMe read, H2D, compute, CPU Adam, ...), one
// box per piece of work, with the bytes it moved.
//
// A Tracer is an object, not a global: whoever runs the step owns it and hands references to
// the parts that record. It does up to two things with each span:
//  - stores it, to be written as the trace file (when a path is given);
//  - adds its duration and bytes to its track's busy counters (when account_busy is set), so
//    that the training loop can tell which resource limited a step without writing a trace
//    (runtime/telemetry/busy_tracker.h takes the per-step differences).
// With neither it is disabled, and every recording call costs one inlined branch (ScopedSpan
// does not even read the clock).
//
// Note [Busy time]: a track's busy time is the sum of the durations of the spans recorded on
// it, not the length of their union. A stream's track never has overlapping spans (a stream
// runs its work in order), so there busy time is the time the resource was occupied. A track
// that several threads record to at once (the CPU Adam workers all on "cpu adam") can be
// busier than the wall clock: its busy time is thread-time, and dividing it by the number of
// threads gives the occupancy.
//
// Thread safety: record() and ScopedSpan may be used from any number of threads at once.
// flush() may run concurrently with recording; it writes every span recorded before it.
//
// Timestamps are CLOCK_MONOTONIC (std::chrono::steady_clock) nanoseconds, the same clock in
// every process of a host, so traces of several ranks line up when opened together.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::runtime::trace {

// The disk's tracks (train/session.cpp fills them from the tier I/O engine's activity hook,
// offload/aio_engine.h): the time the engine had reads, resp. writes, in flight.
inline constexpr std::string_view kNvmeReadTrack = "nvme read";
inline constexpr std::string_view kNvmeWriteTrack = "nvme write";

// Cumulative busy counters of one track since the Tracer was created (see Note [Busy time]).
struct TrackBusy {
  std::string track;
  std::int64_t busy_ns = 0;   // sum of (end - start) of its spans (negative spans count 0)
  std::uint64_t bytes = 0;    // sum of the spans' bytes
  std::uint64_t spans = 0;    // number of spans
};

class Tracer {
 public:
  // path: where the trace is written (by flush() and by the destructor); empty = no file (and
  // disabled, unless account_busy).
  // process_name: the label of this process's group of tracks ("rank 0", "strata").
  // account_busy: keep per-track busy counters (busy()); enables the tracer even without a
  // path, in which case spans are counted but not stored and no file is written.
  explicit Tracer(std::string path, std::string process_name = "strata", bool account_busy = false);
  // Writes the trace (when there is a path) if anything was recorded since the last flush. A
  // failure here is logged, not thrown (destructors must not throw): call flush() to see it.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // True when spans are stored or busy time is accounted: recording does something.
  bool enabled() const noexcept { return impl_ != nullptr; }
  bool accounts_busy() const noexcept { return account_busy_; }
  const std::string& path() const noexcept { return path_; }

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // Records a finished span named `name` on the track of stream `stream`. The strings are
  // copied (interned: a repeated name costs no allocation). bytes = 0 means "not a transfer".
  // With busy accounting, also adds the span to its track's counters (O(1): one lookup of the
  // interned track under the lock that storing takes anyway).
  void record(std::string_view name, std::string_view stream, std::int64_t start_ns,
              std::int64_t end_ns, std::uint64_t bytes = 0) {
    if (!enabled()) return;
    record_enabled(name, stream, start_ns, end_ns, bytes);
  }

  // Writes every span recorded so far to path() (replacing the file: each flush writes the
  // whole trace, through a temporary file and a rename, so a reader never sees half of it).
  // Throws strata::Error naming the path when it cannot be written. Does nothing without a path.
  void flush();

  // Spans recorded so far, stored or only accounted (0 when disabled).
  std::size_t span_count() const;

  // Tests only: told of every span recorded from now on (its name, track and bytes), on the
  // thread that recorded it, after the span is counted and outside the tracer's lock, so that a
  // test can wait for a piece of work to have happened (the end of an Adam, of a copy) instead
  // of comparing the times of spans afterwards. It must be quick and must not record. An empty
  // observer removes it. Does nothing on a disabled tracer.
  using SpanObserver = std::function<void(std::string_view name, std::string_view track, std::uint64_t bytes)>;
  void set_observer(SpanObserver observer);

  // Every track's cumulative counters since construction, in order of the tracks' first use;
  // empty unless account_busy. Callers take differences between two calls (one per step).
  // Thread-safe; takes the recording lock once and copies one entry per track.
  std::vector<TrackBusy> busy() const;

 private:
  struct Impl;
  void record_enabled(std::string_view name, std::string_view stream, std::int64_t start_ns,
                      std::int64_t end_ns, std::uint64_t bytes);

  std::string path_;
  bool account_busy_ = false;
  std::unique_ptr<Impl> impl_;  // null when disabled
};

// Records [construction, destruction) as one span. `name` and `stream` are borrowed: they must
// outlive the ScopedSpan (string literals, or a Stream's name()). With a disabled tracer it
// does nothing at all.
class ScopedSpan {
 public:
  ScopedSpan(Tracer& tracer, std::string_view name, std::string_view stream, std::uint64_t bytes = 0)
      : tracer_(tracer.enabled() ? &tracer : nullptr), name_(name), stream_(stream), bytes_(bytes),
        start_ns_(tracer_ ? Tracer::now_ns() : 0) {}
  ~ScopedSpan() {
    if (tracer_) tracer_->record(name_, stream_, start_ns_, Tracer::now_ns(), bytes_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

  // For work whose size is known only once it is done (a short read).
  void set_bytes(std::uint64_t bytes) noexcept { bytes_ = bytes; }

 private:
  Tracer* tracer_;
  std::string_view name_;
  std::string_view stream_;
  std::uint64_t bytes_;
  std::int64_t start_ns_;
};

}  // namespace strata::runtime::trace

#pragma once
// Per-stream spans written as a Chrome trace (JSON), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one track per stream (NVMe read, H2D, compute, CPU Adam, ...), one
// box per piece of work, with the bytes it moved.
//
// A Tracer is an object, not a global: whoever runs the step owns it and hands references to
// the parts that record. Created with an empty path it is disabled, and every recording call
// costs one inlined branch (ScopedSpan does not even read the clock).
//
// Thread safety: record() and ScopedSpan may be used from any number of threads at once.
// flush() may run concurrently with recording; it writes every span recorded before it.
//
// Timestamps are CLOCK_MONOTONIC (std::chrono::steady_clock) nanoseconds, the same clock in
// every process of a host, so traces of several ranks line up when opened together.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace strata::runtime {

class Tracer {
 public:
  // path: where the trace is written (by flush() and by the destructor); empty = disabled.
  // process_name: the label of this process's group of tracks ("rank 0", "strata").
  explicit Tracer(std::string path, std::string process_name = "strata");
  // Writes the trace if anything was recorded since the last flush. A failure here is logged,
  // not thrown (destructors must not throw): call flush() to see it as an Error.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const noexcept { return impl_ != nullptr; }
  const std::string& path() const noexcept { return path_; }

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // Records a finished span named `name` on the track of stream `stream`. The strings are
  // copied (interned: a repeated name costs no allocation). bytes = 0 means "not a transfer".
  void record(std::string_view name, std::string_view stream, std::int64_t start_ns,
              std::int64_t end_ns, std::uint64_t bytes = 0) {
    if (!enabled()) return;
    record_enabled(name, stream, start_ns, end_ns, bytes);
  }

  // Writes every span recorded so far to path() (replacing the file: each flush writes the
  // whole trace, through a temporary file and a rename, so a reader never sees half of it).
  // Throws strata::Error naming the path when it cannot be written. Does nothing if disabled.
  void flush();

  // Spans recorded so far (0 when disabled).
  std::size_t span_count() const;

 private:
  struct Impl;
  void record_enabled(std::string_view name, std::string_view stream, std::int64_t start_ns,
                      std::int64_t end_ns, std::uint64_t bytes);

  std::string path_;
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

}  // namespace strata::runtime

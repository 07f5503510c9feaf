#pragma once
// Waiting for work to have happened, for the tests that prove one piece of the pipeline does not
// wait for another (an update for a neighbour's copy, a fetch for the compute before it). Such a
// test holds the first piece open — a copy through DeviceOptions::host_copy_hook, an NVMe write
// through the I/O engine's completion hook, a compute task through EngineRun's forward hook —
// until the tracer has recorded the second (Tracer::set_observer). If the second waited for the
// first, the hold would never end: it gives up after kHoldLimit, long enough for any loaded
// machine, and the test fails naming the dependency. Nothing compares the times of spans, so a
// thread descheduled at the wrong moment slows such a test down but cannot fail it (the tests
// that compared spans failed on a loaded 2-core machine although the pipeline was right).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/trace/trace.h"

namespace strata::runtime::engine_test {

inline constexpr std::chrono::seconds kHoldLimit{60};

struct SeenSpan {
  std::string name, track;
  std::uint64_t bytes = 0;
};
using SpanMatch = std::function<bool(const SeenSpan&)>;

inline SpanMatch named(std::string name) {
  return [name = std::move(name)](const SeenSpan& s) { return s.name == name; };
}
// A copy (or any span that moved bytes) of `bytes` on the track of stream `track`.
inline SpanMatch copy_on(std::string track, std::uint64_t bytes) {
  return [track = std::move(track), bytes](const SeenSpan& s) { return s.track == track && s.bytes == bytes; };
}

// Observes `tracer` (which must be enabled: give it a path) for its lifetime.
class SpanWatch {
 public:
  explicit SpanWatch(trace::Tracer& tracer) : tracer_(tracer) {
    tracer_.set_observer([this](std::string_view name, std::string_view track, std::uint64_t bytes) {
      {
        std::lock_guard lock(mutex_);
        if (!armed_) return;
        seen_.push_back(SeenSpan{std::string(name), std::string(track), bytes});
      }
      changed_.notify_all();
    });
  }
  ~SpanWatch() { tracer_.set_observer({}); }
  SpanWatch(const SpanWatch&) = delete;
  SpanWatch& operator=(const SpanWatch&) = delete;

  // Keeps the spans recorded from now on, in the order they were recorded (work that happened
  // before other work is recorded before it).
  void arm() {
    std::lock_guard lock(mutex_);
    armed_ = true;
    seen_.clear();
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }
  // Until a span that `match` accepts has been recorded since arm(); false after `limit`.
  bool wait_for(const SpanMatch& match, std::chrono::seconds limit = kHoldLimit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] {
      for (const SeenSpan& s : seen_)
        if (match(s)) return true;
      return false;
    });
  }
  // Until the spans recorded on `track` since arm() have moved `bytes` in all (a staged shard is
  // copied in parts: Note [Reads in parts] in runtime/zero/param_fetcher.cpp); false after `limit`.
  bool wait_for_bytes(const std::string& track, std::uint64_t bytes, std::chrono::seconds limit = kHoldLimit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] {
      std::uint64_t moved = 0;
      for (const SeenSpan& s : seen_)
        if (s.track == track) moved += s.bytes;
      return moved >= bytes;
    });
  }
  // The position of the first span that `match` accepts among those seen, or -1.
  int first(const SpanMatch& match) const {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < seen_.size(); ++i)
      if (match(seen_[i])) return static_cast<int>(i);
    return -1;
  }

 private:
  trace::Tracer& tracer_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false;
  std::vector<SeenSpan> seen_;
};

// The dependencies a test found (a hold that ran out), each once, to report after the run.
class Waits {
 public:
  void add(std::string what) {
    std::lock_guard lock(mutex_);
    if (std::find(found_.begin(), found_.end(), what) == found_.end()) found_.push_back(std::move(what));
  }
  std::vector<std::string> found() const {
    std::lock_guard lock(mutex_);
    return found_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> found_;
};

}  // namespace strata::runtime::engine_test

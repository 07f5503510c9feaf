// The reader of the cuda backend's timing events (Note [GPU spans] in cuda_span_recorder.h).
#include "runtime/device/cuda_span_recorder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace strata::runtime::device {

namespace {

// Events created at once when the pool is empty.
constexpr int kPoolBatch = 64;
// How long the reader sleeps when no pending span has completed (a new submit or a flush wakes
// it earlier).
constexpr auto kIdlePoll = std::chrono::microseconds(500);
// A new anchor this often (Note [GPU spans]: drift, float milliseconds).
constexpr std::int64_t kAnchorEveryNs = 1'000'000'000;

}  // namespace

struct CudaSpanRecorder::Track {
  std::string name;
  struct Pending {
    cudaEvent_t begin;
    cudaEvent_t end;
    const char* name;
    std::uint64_t bytes;
  };
  std::deque<Pending> pending;       // oldest first; guarded by Impl::mutex
  std::int64_t last_end_ns = std::numeric_limits<std::int64_t>::min();  // reader thread only
  bool closed = false;               // guarded by Impl::mutex
};

struct CudaSpanRecorder::Impl {
  Impl(int ordinal_, trace::Tracer& tracer_) : ordinal(ordinal_), tracer(tracer_) {
    CUDA_CHECK(cudaSetDevice(ordinal));
    CUDA_CHECK(cudaStreamCreateWithFlags(&anchor_stream, cudaStreamNonBlocking));
    take_anchor();
    reader = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    reader.join();
    cudaSetDevice(ordinal);
    for (cudaEvent_t e : pool) cudaEventDestroy(e);
    for (const Anchor& a : anchors) cudaEventDestroy(a.event);
    cudaStreamDestroy(anchor_stream);
  }

  // --- the pool (any thread) ---
  cudaEvent_t acquire() {
    {
      std::lock_guard lock(pool_mutex);
      if (!pool.empty()) {
        cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
      }
    }
    // Outside the lock: creating events is slow, and happens only while the pool grows.
    std::vector<cudaEvent_t> made;
    made.reserve(kPoolBatch);
    CUDA_CHECK(cudaSetDevice(ordinal));
    for (int i = 0; i < kPoolBatch; ++i) {
      cudaEvent_t e = nullptr;
      cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDefault);  // with timing
      if (rc != cudaSuccess) {
        for (cudaEvent_t m : made) cudaEventDestroy(m);
        CUDA_CHECK(rc);
      }
      made.push_back(e);
    }
    cudaEvent_t e = made.back();
    made.pop_back();
    std::lock_guard lock(pool_mutex);
    pool.insert(pool.end(), made.begin(), made.end());
    return e;
  }
  void release(cudaEvent_t e) noexcept {
    std::lock_guard lock(pool_mutex);
    pool.push_back(e);
  }

  // --- the clock (reader thread, and the constructor before it starts) ---
  struct Anchor {
    cudaEvent_t event = nullptr;
    std::int64_t ns = 0;  // steady_clock time of the event
  };

  void take_anchor() {
    cudaEvent_t best = nullptr;
    std::int64_t best_width = std::numeric_limits<std::int64_t>::max(), best_ns = 0;
    for (int i = 0; i < 5; ++i) {
      cudaEvent_t e = acquire();
      const std::int64_t t0 = trace::Tracer::now_ns();
      CUDA_CHECK(cudaEventRecord(e, anchor_stream));
      CUDA_CHECK(cudaEventSynchronize(e));  // this event on the reader's own stream only
      const std::int64_t t1 = trace::Tracer::now_ns();
      if (t1 - t0 < best_width) {
        if (best != nullptr) release(best);
        best = e;
        best_width = t1 - t0;
        best_ns = t0 + (t1 - t0) / 2;
      } else {
        release(e);
      }
    }
    // Keep the newest two: an event recorded before the newest is measured from the older.
    if (anchors.size() == 2) {
      release(anchors.front().event);
      anchors.erase(anchors.begin());
    }
    anchors.push_back({best, best_ns});
  }

  // The steady_clock time of a completed event.
  std::int64_t to_ns(cudaEvent_t e) {
    for (auto a = anchors.rbegin(); a != anchors.rend(); ++a) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a->event, e));
      if (ms >= 0 || std::next(a) == anchors.rend()) {
        return a->ns + static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
      }
    }
    return 0;  // unreachable: there is always an anchor
  }

  // --- the reader ---
  void run() {
    try {
      CUDA_CHECK(cudaSetDevice(ordinal));
      std::unique_lock lock(mutex);
      for (;;) {
        const std::uint64_t flush_seen = flush_requested;
        std::vector<std::pair<Track*, Track::Pending>> ready;
        collect_ready(ready);
        const bool stop = stopping;
        lock.unlock();
        for (auto& [track, p] : ready) record(*track, p);
        if (trace::Tracer::now_ns() - anchors.back().ns > kAnchorEveryNs) take_anchor();
        lock.lock();
        drop_closed_tracks();
        if (!ready.empty()) continue;  // more may have completed meanwhile
        flush_done = flush_seen;
        flushed.notify_all();
        if (stop && all_empty()) return;
        if (stop) {
          // The device synchronized before destroying the recorder: whatever is left will
          // complete; wait for it rather than drop it.
          lock.unlock();
          std::this_thread::sleep_for(kIdlePoll);
          lock.lock();
          continue;
        }
        wake.wait_for(lock, kIdlePoll, [&] { return stopping || flush_requested != flush_seen; });
      }
    } catch (const std::exception& e) {
      // A sticky CUDA error (the step fails on it too): stop tracing the GPU, keep the run.
      log::warn("cuda trace reader stopped: {}; GPU spans after this point are missing", e.what());
      std::lock_guard lock(mutex);
      failed = true;
      flush_done = std::numeric_limits<std::uint64_t>::max();
      flushed.notify_all();
    }
  }

  // Under `mutex`: moves out the oldest pending spans of each track whose end has completed.
  void collect_ready(std::vector<std::pair<Track*, Track::Pending>>& ready) {
    for (auto& t : tracks) {
      while (!t->pending.empty()) {
        const cudaError_t rc = cudaEventQuery(t->pending.front().end);
        if (rc == cudaErrorNotReady) break;
        CUDA_CHECK(rc);
        ready.emplace_back(t.get(), t->pending.front());
        t->pending.pop_front();
      }
    }
  }

  void record(Track& t, const Track::Pending& p) {
    std::int64_t start = to_ns(p.begin);
    const std::int64_t end = to_ns(p.end);
    // Two threads enqueueing on one stream can interleave their brackets: clip, so that the
    // track's spans never overlap (Note [GPU spans]).
    start = std::max(start, t.last_end_ns);
    if (end >= start) {
      tracer.record(p.name, t.name, start, end, p.bytes);
      t.last_end_ns = end;
    }
    release(p.begin);
    release(p.end);
  }

  void drop_closed_tracks() {
    tracks.remove_if([](const std::unique_ptr<Track>& t) { return t->closed && t->pending.empty(); });
  }
  bool all_empty() const {
    return std::all_of(tracks.begin(), tracks.end(), [](const auto& t) { return t->pending.empty(); });
  }

  const int ordinal;
  trace::Tracer& tracer;
  cudaStream_t anchor_stream = nullptr;
  std::vector<Anchor> anchors;  // reader thread only (after the constructor)

  std::mutex pool_mutex;
  std::vector<cudaEvent_t> pool;

  std::mutex mutex;  // tracks, their pending queues and the flags below
  std::condition_variable wake;
  std::condition_variable flushed;
  std::list<std::unique_ptr<Track>> tracks;
  bool stopping = false;
  bool failed = false;
  std::uint64_t flush_requested = 0;
  std::uint64_t flush_done = 0;
  std::thread reader;  // last: started once everything above exists
};

CudaSpanRecorder::CudaSpanRecorder(int ordinal, trace::Tracer& tracer)
    : impl_(std::make_unique<Impl>(ordinal, tracer)) {}

CudaSpanRecorder::~CudaSpanRecorder() = default;

CudaSpanRecorder::Track* CudaSpanRecorder::add_track(const std::string& track) {
  auto t = std::make_unique<Track>();
  t->name = track;
  Track* raw = t.get();
  std::lock_guard lock(impl_->mutex);
  impl_->tracks.push_back(std::move(t));
  return raw;
}

void CudaSpanRecorder::close_track(Track* track) noexcept {
  std::lock_guard lock(impl_->mutex);
  track->closed = true;
}

CudaSpanRecorder::EventHandle CudaSpanRecorder::mark(StreamHandle stream) {
  cudaEvent_t e = impl_->acquire();
  const cudaError_t rc = cudaEventRecord(e, stream);
  if (rc != cudaSuccess) {
    impl_->release(e);
    CUDA_CHECK(rc);
  }
  return e;
}

void CudaSpanRecorder::give_back(EventHandle event) noexcept { impl_->release(event); }

void CudaSpanRecorder::submit(Track* track, EventHandle begin, EventHandle end, const char* name,
                              std::uint64_t bytes) {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->failed) {
      impl_->release(begin);
      impl_->release(end);
      return;
    }
    track->pending.push_back({begin, end, name, bytes});
  }
  // No notify: the reader polls every kIdlePoll, and waking it per op would cost a futex call
  // on the enqueueing thread for every kernel.
}

void CudaSpanRecorder::flush() {
  std::unique_lock lock(impl_->mutex);
  const std::uint64_t target = ++impl_->flush_requested;
  impl_->wake.notify_all();
  impl_->flushed.wait(lock, [&] { return impl_->flush_done >= target; });
}

}  // namespace strata::runtime::device

#pragma once
// Internal to the cuda backend (cuda_device.cpp): turns pairs of CUDA timing events into trace
// spans without ever synchronizing the streams that do the work.
//
// Note [GPU spans]. A traced piece of stream work (a copy, a memset, a host task, a compute op,
// a collective) is bracketed on its stream by two timing events taken from a pool, and the pair
// is handed to the recorder with its track (the stream's name), its name and its bytes. A
// reader thread, and only it, asks cudaEventQuery whether the end events have completed; when
// one has, it converts both to the tracer's clock, records the span and returns the events to
// the pool. Nothing is added to the streams but the two cudaEventRecords: no host function, no
// wait, no synchronize. After the first steps the pool holds enough events that tracing creates
// none.
//
// The clock: a CUDA event has no absolute time, only cudaEventElapsedTime between two events.
// The reader anchors the GPU's timeline to std::chrono::steady_clock by recording an event on
// a stream of its own, synchronizing on that event (that stream only) and reading the steady
// clock around it: the event completed between the two reads, so their midpoint is its time
// within half their distance (the tightest of a few tries is kept, usually a few us). A span's
// times are then anchor + elapsed(anchor, event). The two clocks drift apart slowly (ppm) and
// elapsed times are floats (ms), so the reader takes a new anchor every second; an event
// recorded before the newest anchor is measured from the one before it.
//
// Order: the events of one stream complete in the order they were recorded, so the reader
// looks only at the oldest pending span of each stream. Spans of one stream never overlap
// (StreamSpan nests; the same stream used by two threads at once is clipped to the end of the
// span before), so a track's busy time is the time its stream was occupied (Note [Busy time]).
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/trace/trace.h"

struct CUevent_st;
struct CUstream_st;

namespace strata::runtime::device {

class CudaSpanRecorder {
 public:
  using EventHandle = CUevent_st*;    // cudaEvent_t
  using StreamHandle = CUstream_st*;  // cudaStream_t

  // Starts the reader thread and anchors the clock on device `ordinal`. `tracer` is borrowed,
  // enabled, and must outlive the recorder.
  CudaSpanRecorder(int ordinal, trace::Tracer& tracer);
  // Records every span still pending (the caller has synchronized the device first, so their
  // events have completed), stops the reader, destroys the pool's events.
  ~CudaSpanRecorder();
  CudaSpanRecorder(const CudaSpanRecorder&) = delete;
  CudaSpanRecorder& operator=(const CudaSpanRecorder&) = delete;

  // One track's queue of pending spans; owned by the recorder, handed to the stream that
  // records on it. `track` is copied.
  struct Track;
  Track* add_track(const std::string& track);
  // The stream is gone: the track's queue is dropped once its pending spans are recorded.
  void close_track(Track* track) noexcept;

  // A timing event from the pool, recorded on `stream` (throws strata::Error on a CUDA error).
  EventHandle mark(StreamHandle stream);
  // Back to the pool, unread (an enqueue failed between the two marks).
  void give_back(EventHandle event) noexcept;
  // The span [begin, end) of `track`; both events were returned by mark() on the track's stream.
  // `name` must be a string literal. Never blocks on the GPU.
  void submit(Track* track, EventHandle begin, EventHandle end, const char* name, std::uint64_t bytes);

  // Waits until the reader has recorded every submitted span whose end event has completed
  // before this call (Device::flush_trace).
  void flush();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::runtime::device

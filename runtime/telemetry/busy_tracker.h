#pragma once
// Which resource limited a step: each trace track (a stream: on cuda the GPU's own time on it,
// so compute, PCIe each way and the collectives; the CPU Adam workers; the disk's reads and
// writes) is one resource, and the one that was busy longest during the step is the bottleneck.
// On cuda the GPU's spans reach the tracer from a reader thread: call Device::flush_trace()
// before end_step().
// Reads the cumulative counters of a Tracer created with account_busy (trace.h) at the start
// and at the end of the step and takes the differences.
//
// A span counts in the step in which it is recorded (when it ends): work that straddles a step
// boundary is charged whole to the later step. Busy time is the sum of span durations (Note
// [Busy time] in trace.h): a track that several threads record to can exceed the step time.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/trace/trace.h"

namespace strata::runtime::telemetry {

class BusyTracker {
 public:
  // `tracer` is borrowed and must outlive the tracker. A tracer without busy accounting gives
  // empty results (busiest "" and 0 ms). Takes a first baseline (as begin_step()).
  explicit BusyTracker(const trace::Tracer& tracer);

  // Takes the baseline: the counters as they are now.
  void begin_step();

  struct Result {
    std::string busiest;        // the track with the most busy time in the step ("" = none)
    double busiest_ms = 0;
    std::vector<std::pair<std::string, double>> per_track_ms;  // every track, in first-use order
  };
  // Busy time of every track since begin_step() (since construction if it was never called).
  // Ties go to the track used first. Does not move the baseline.
  Result end_step() const;

 private:
  const trace::Tracer& tracer_;
  std::unordered_map<std::string, std::int64_t> baseline_ns_;  // track -> busy_ns at begin_step
};

// step_ms / busiest_ms: 1 when the step took exactly as long as its busiest resource (perfect
// overlap), larger when resources waited on each other; 0 (unknown) when busiest_ms <= 0. It
// can fall below 1 when the busiest track is recorded by several threads at once.
double overlap_ratio(double step_ms, double busiest_ms) noexcept;

}  // namespace strata::runtime::telemetry

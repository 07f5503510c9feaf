#include "runtime/telemetry/busy_tracker.h"

namespace strata::runtime::telemetry {

BusyTracker::BusyTracker(const trace::Tracer& tracer) : tracer_(tracer) { begin_step(); }

void BusyTracker::begin_step() {
  baseline_ns_.clear();
  for (const trace::TrackBusy& b : tracer_.busy()) baseline_ns_[b.track] = b.busy_ns;
}

BusyTracker::Result BusyTracker::end_step() const {
  Result r;
  std::int64_t busiest_ns = -1;
  for (const trace::TrackBusy& b : tracer_.busy()) {
    auto it = baseline_ns_.find(b.track);
    const std::int64_t ns = b.busy_ns - (it != baseline_ns_.end() ? it->second : 0);
    r.per_track_ms.emplace_back(b.track, static_cast<double>(ns) / 1e6);
    if (ns > busiest_ns) {  // strict: a tie keeps the track used first
      busiest_ns = ns;
      r.busiest = b.track;
    }
  }
  r.busiest_ms = busiest_ns > 0 ? static_cast<double>(busiest_ns) / 1e6 : 0.0;
  if (busiest_ns <= 0) r.busiest.clear();  // nothing ran during the step
  return r;
}

double overlap_ratio(double step_ms, double busiest_ms) noexcept {
  return busiest_ms > 0 && step_ms > 0 ? step_ms / busiest_ms : 0.0;
}

}  // namespace strata::runtime::telemetry

// BusyTracker: per-step differences of the Tracer's busy counters and the busiest track.
#include <string>

#include <gtest/gtest.h>

#include "runtime/telemetry/busy_tracker.h"
#include "runtime/trace/trace.h"

namespace strata::runtime {
namespace {

double ms_of(const telemetry::BusyTracker::Result& r, const std::string& track) {
  for (const auto& [name, ms] : r.per_track_ms) {
    if (name == track) return ms;
  }
  return -1;
}

TEST(BusyTracker, DifferencesBetweenBeginAndEnd) {
  trace::Tracer tracer("", "strata", /*account_busy=*/true);
  telemetry::BusyTracker tracker(tracer);
  // Before the step: nvme was busy a long time; that must not count in the step.
  tracer.record("read", "nvme read", 0, 50'000'000);
  tracer.record("h2d", "h2d", 0, 1'000'000);

  tracker.begin_step();
  tracer.record("read", "nvme read", 0, 2'000'000);      // 2 ms
  tracer.record("h2d", "h2d", 0, 3'000'000);             // 3 ms
  tracer.record("adam", "cpu adam", 0, 4'500'000);       // 4.5 ms, a track new in this step
  telemetry::BusyTracker::Result r = tracker.end_step();
  EXPECT_EQ(r.busiest, "cpu adam");
  EXPECT_DOUBLE_EQ(r.busiest_ms, 4.5);
  ASSERT_EQ(r.per_track_ms.size(), 3u);
  EXPECT_EQ(r.per_track_ms[0].first, "nvme read");  // first-use order
  EXPECT_DOUBLE_EQ(ms_of(r, "nvme read"), 2.0);
  EXPECT_DOUBLE_EQ(ms_of(r, "h2d"), 3.0);
  EXPECT_DOUBLE_EQ(ms_of(r, "cpu adam"), 4.5);
  // end_step does not move the baseline: asking again gives the same answer.
  EXPECT_DOUBLE_EQ(tracker.end_step().busiest_ms, 4.5);

  // The next step starts from zero again.
  tracker.begin_step();
  tracer.record("read", "nvme read", 0, 6'000'000);
  r = tracker.end_step();
  EXPECT_EQ(r.busiest, "nvme read");
  EXPECT_DOUBLE_EQ(r.busiest_ms, 6.0);
  EXPECT_DOUBLE_EQ(ms_of(r, "h2d"), 0.0);
  EXPECT_DOUBLE_EQ(ms_of(r, "cpu adam"), 0.0);
}

TEST(BusyTracker, TiesGoToTheTrackUsedFirst) {
  trace::Tracer tracer("", "strata", true);
  telemetry::BusyTracker tracker(tracer);
  tracker.begin_step();
  tracer.record("a", "first", 0, 1000);
  tracer.record("b", "second", 0, 1000);
  EXPECT_EQ(tracker.end_step().busiest, "first");
}

TEST(BusyTracker, IdleStepAndNonAccountingTracer) {
  trace::Tracer tracer("", "strata", true);
  telemetry::BusyTracker tracker(tracer);
  tracker.begin_step();
  telemetry::BusyTracker::Result r = tracker.end_step();
  EXPECT_EQ(r.busiest, "");
  EXPECT_EQ(r.busiest_ms, 0.0);
  EXPECT_TRUE(r.per_track_ms.empty());

  trace::Tracer off("");
  telemetry::BusyTracker none(off);
  none.begin_step();
  off.record("x", "s", 0, 1000);
  r = none.end_step();
  EXPECT_EQ(r.busiest, "");
  EXPECT_TRUE(r.per_track_ms.empty());
}

TEST(BusyTracker, WithoutBeginCountsFromConstruction) {
  trace::Tracer tracer("", "strata", true);
  tracer.record("x", "s", 0, 5'000'000);  // before the tracker: not counted
  telemetry::BusyTracker tracker(tracer);
  tracer.record("x", "s", 0, 1'000'000);
  EXPECT_DOUBLE_EQ(tracker.end_step().busiest_ms, 1.0);
}

TEST(BusyTracker, OverlapRatio) {
  EXPECT_DOUBLE_EQ(telemetry::overlap_ratio(100, 80), 1.25);
  EXPECT_DOUBLE_EQ(telemetry::overlap_ratio(100, 100), 1.0);
  EXPECT_EQ(telemetry::overlap_ratio(100, 0), 0.0);  // unknown
  EXPECT_EQ(telemetry::overlap_ratio(0, 10), 0.0);
}

}  // namespace
}  // namespace strata::runtime

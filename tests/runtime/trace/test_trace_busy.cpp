// Tracer busy accounting: per-track sums of span durations, bytes and counts, with or without
// a trace file, exact under concurrent recording.
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/trace/trace.h"
#include "trace_test_util.h"

namespace strata::runtime {
namespace {

std::map<std::string, trace::TrackBusy> by_track(const std::vector<trace::TrackBusy>& busy) {
  std::map<std::string, trace::TrackBusy> out;
  for (const trace::TrackBusy& b : busy) out[b.track] = b;
  return out;
}

std::size_t files_in(const std::string& dir) {
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  return files;
}

TEST(TracerBusy, DisabledTracerAccountsNothing) {
  trace::Tracer tracer("");
  EXPECT_FALSE(tracer.enabled());
  EXPECT_FALSE(tracer.accounts_busy());
  tracer.record("x", "s", 0, 1000, 64);
  { trace::ScopedSpan span(tracer, "y", "s"); }
  EXPECT_EQ(tracer.span_count(), 0u);
  EXPECT_TRUE(tracer.busy().empty());
}

TEST(TracerBusy, PathWithoutAccountingHasNoCounters) {
  test::TracePath tmp;
  trace::Tracer tracer(tmp.file());
  EXPECT_TRUE(tracer.enabled());
  EXPECT_FALSE(tracer.accounts_busy());
  tracer.record("x", "s", 0, 1000);
  EXPECT_EQ(tracer.span_count(), 1u);
  EXPECT_TRUE(tracer.busy().empty());
}

TEST(TracerBusy, AccountOnlyTracerWritesNoFile) {
  test::TracePath tmp;
  ASSERT_FALSE(tmp.dir().empty());
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(tmp.dir());  // a stray relative file would land here
  {
    trace::Tracer tracer("", "rank 0", /*account_busy=*/true);
    EXPECT_TRUE(tracer.enabled());
    EXPECT_TRUE(tracer.accounts_busy());
    EXPECT_TRUE(tracer.path().empty());
    tracer.record("x", "s", 0, 1000);
    { trace::ScopedSpan span(tracer, "y", "s"); }
    EXPECT_EQ(tracer.span_count(), 2u);
    EXPECT_NO_THROW(tracer.flush());
    ASSERT_EQ(tracer.busy().size(), 1u);
    EXPECT_EQ(tracer.busy()[0].spans, 2u);
  }
  std::filesystem::current_path(cwd);
  EXPECT_EQ(files_in(tmp.dir()), 0u);
}

TEST(TracerBusy, SumsDurationsBytesAndSpansPerTrack) {
  trace::Tracer tracer("", "strata", true);
  tracer.record("read 0", "nvme read", 1'000, 3'000, 4096);   // 2000 ns
  tracer.record("h2d 0", "h2d", 3'000, 3'500, 4096);          // 500 ns
  tracer.record("read 1", "nvme read", 3'000, 8'000, 8192);   // 5000 ns
  tracer.record("adam", "cpu adam", 0, 10'000);               // two threads at once:
  tracer.record("adam", "cpu adam", 0, 10'000);               // the sum, not the union
  tracer.record("backwards", "h2d", 5'000, 4'000, 1);         // end < start counts 0 ns
  std::vector<trace::TrackBusy> busy = tracer.busy();
  ASSERT_EQ(busy.size(), 3u);
  // In order of first use.
  EXPECT_EQ(busy[0].track, "nvme read");
  EXPECT_EQ(busy[1].track, "h2d");
  EXPECT_EQ(busy[2].track, "cpu adam");
  EXPECT_EQ(busy[0].busy_ns, 7'000);
  EXPECT_EQ(busy[0].bytes, 12'288u);
  EXPECT_EQ(busy[0].spans, 2u);
  EXPECT_EQ(busy[1].busy_ns, 500);
  EXPECT_EQ(busy[1].bytes, 4097u);
  EXPECT_EQ(busy[1].spans, 2u);
  EXPECT_EQ(busy[2].busy_ns, 20'000);
  EXPECT_EQ(busy[2].bytes, 0u);
  EXPECT_EQ(busy[2].spans, 2u);

  // Cumulative: a later call includes everything before it.
  tracer.record("read 2", "nvme read", 10'000, 11'000, 1);
  auto later = by_track(tracer.busy());
  EXPECT_EQ(later["nvme read"].busy_ns, 8'000);
  EXPECT_EQ(later["nvme read"].spans, 3u);
  EXPECT_EQ(later["h2d"].busy_ns, 500);
}

TEST(TracerBusy, PathAndAccountingTogether) {
  test::TracePath tmp;
  {
    trace::Tracer tracer(tmp.file(), "rank 0", true);
    tracer.record("a", "s", 0, 100, 7);
    tracer.record("b", "t", 0, 50);
    auto busy = by_track(tracer.busy());
    EXPECT_EQ(busy["s"].busy_ns, 100);
    EXPECT_EQ(busy["s"].bytes, 7u);
    EXPECT_EQ(busy["t"].busy_ns, 50);
  }
  nlohmann::json trace = test::read_json(tmp.file());
  std::size_t spans = 0;
  for (const auto& e : trace.at("traceEvents")) spans += e.at("ph") == "X" ? 1 : 0;
  EXPECT_EQ(spans, 2u);
  EXPECT_EQ(test::track_names(trace).size(), 2u);
}

TEST(TracerBusy, ExactUnderConcurrentRecording) {
  constexpr int kThreads = 8;
  constexpr int kSpansPerThread = 20'000;
  trace::Tracer tracer("", "strata", true);
  std::vector<std::string> own;
  for (int t = 0; t < kThreads; ++t) own.push_back("stream " + std::to_string(t));
  std::atomic<bool> done{false};
  // A reader polls while others record: every track's counters only grow.
  std::thread reader([&] {
    std::map<std::string, trace::TrackBusy> last;
    while (!done.load()) {
      for (const trace::TrackBusy& b : tracer.busy()) {
        trace::TrackBusy& prev = last[b.track];
        EXPECT_GE(b.busy_ns, prev.busy_ns) << b.track;
        EXPECT_GE(b.spans, prev.spans) << b.track;
        prev = b;
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSpansPerThread; ++i) {
        tracer.record("work", own[t], i * 10, i * 10 + 3, 2);  // its own track
        tracer.record("adam", "cpu adam", i * 10, i * 10 + 5);  // a track shared by all
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  reader.join();

  auto busy = by_track(tracer.busy());
  ASSERT_EQ(busy.size(), static_cast<std::size_t>(kThreads + 1));
  for (int t = 0; t < kThreads; ++t) {
    const trace::TrackBusy& b = busy[own[t]];
    EXPECT_EQ(b.spans, static_cast<std::uint64_t>(kSpansPerThread)) << own[t];
    EXPECT_EQ(b.busy_ns, std::int64_t{3} * kSpansPerThread) << own[t];
    EXPECT_EQ(b.bytes, std::uint64_t{2} * kSpansPerThread) << own[t];
  }
  EXPECT_EQ(busy["cpu adam"].spans, static_cast<std::uint64_t>(kThreads * kSpansPerThread));
  EXPECT_EQ(busy["cpu adam"].busy_ns, std::int64_t{5} * kThreads * kSpansPerThread);
  EXPECT_EQ(tracer.span_count(), static_cast<std::size_t>(2 * kThreads * kSpansPerThread));
}

}  // namespace
}  // namespace strata::runtime

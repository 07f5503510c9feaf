// Tracer under concurrent recording: every span of every thread arrives, on its own track,
// while another thread flushes.
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/trace/trace.h"
#include "trace_test_util.h"

namespace strata::runtime {
namespace {

TEST(TracerConcurrency, NoSpanIsLost) {
  constexpr int kThreads = 8;
  constexpr int kSpansPerThread = 10'000;  // more than one storage chunk
  test::TracePath tmp;
  ASSERT_FALSE(tmp.dir().empty());
  {
    trace::Tracer tracer(tmp.file());
    std::vector<std::string> streams;
    for (int t = 0; t < kThreads; ++t) streams.push_back("stream " + std::to_string(t));
    std::atomic<bool> done{false};
    // Flushing while others record must neither block them forever nor lose their spans.
    std::thread flusher([&] {
      while (!done.load()) tracer.flush();
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kSpansPerThread; ++i) {
          if (i % 2 == 0) {
            tracer.record("work", streams[t], i * 10, i * 10 + 5, static_cast<std::uint64_t>(i));
          } else {
            trace::ScopedSpan span(tracer, "scoped", streams[t], static_cast<std::uint64_t>(i));
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    done = true;
    flusher.join();
    EXPECT_EQ(tracer.span_count(), static_cast<std::size_t>(kThreads * kSpansPerThread));
  }  // the destructor writes the final trace

  nlohmann::json trace = test::read_json(tmp.file());
  std::map<int, std::string> tracks = test::track_names(trace);
  ASSERT_EQ(tracks.size(), static_cast<std::size_t>(kThreads));
  std::map<std::string, std::set<std::uint64_t>> bytes_by_stream;
  std::size_t spans = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++spans;
    const std::string& stream = tracks.at(e.at("tid").get<int>());
    std::uint64_t bytes = e.contains("args") ? e.at("args").at("bytes").get<std::uint64_t>() : 0;
    bytes_by_stream[stream].insert(bytes);
  }
  EXPECT_EQ(spans, static_cast<std::size_t>(kThreads * kSpansPerThread));
  // Each thread's spans carry bytes 0..N-1 exactly once and land on that thread's track.
  for (int t = 0; t < kThreads; ++t) {
    const auto& got = bytes_by_stream["stream " + std::to_string(t)];
    EXPECT_EQ(got.size(), static_cast<std::size_t>(kSpansPerThread)) << "stream " << t;
  }
}

}  // namespace
}  // namespace strata::runtime

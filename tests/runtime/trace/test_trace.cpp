// Tracer: Chrome trace JSON that Perfetto opens; a disabled tracer writes nothing.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/trace/trace.h"
#include "trace_test_util.h"

namespace strata::runtime {
namespace {

using test::read_json;
using test::track_names;
using test::TracePath;

std::vector<nlohmann::json> spans_of(const nlohmann::json& trace) {
  std::vector<nlohmann::json> spans;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") spans.push_back(e);
  }
  return spans;
}

TEST(Tracer, WritesSpansWithTracksTimesAndBytes) {
  TracePath tmp;
  ASSERT_FALSE(tmp.dir().empty());
  {
    trace::Tracer tracer(tmp.file(), "rank 0");
    ASSERT_TRUE(tracer.enabled());
    tracer.record("read block 3", "nvme", 1'000'000, 1'250'500, 4096);
    tracer.record("h2d block 3", "copy", 1'300'000, 1'400'000, 8192);
    tracer.record("forward \"block\" 3\n", "compute", 1'400'000, 2'000'000);
    tracer.record("read block 4", "nvme", 1'250'500, 1'500'000, 4096);
    EXPECT_EQ(tracer.span_count(), 4u);
    tracer.flush();
  }
  nlohmann::json trace = read_json(tmp.file());
  std::map<int, std::string> tracks = track_names(trace);
  ASSERT_EQ(tracks.size(), 3u);
  // Tracks are numbered in order of first use.
  EXPECT_EQ(tracks[1], "nvme");
  EXPECT_EQ(tracks[2], "copy");
  EXPECT_EQ(tracks[3], "compute");

  bool process_named = false;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      process_named = e.at("args").at("name") == "rank 0";
    }
  }
  EXPECT_TRUE(process_named);

  std::vector<nlohmann::json> spans = spans_of(trace);
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].at("name"), "read block 3");
  EXPECT_EQ(spans[0].at("tid"), 1);
  EXPECT_DOUBLE_EQ(spans[0].at("ts").get<double>(), 1000.0);  // microseconds
  EXPECT_DOUBLE_EQ(spans[0].at("dur").get<double>(), 250.5);
  EXPECT_EQ(spans[0].at("args").at("bytes"), 4096);
  EXPECT_EQ(spans[1].at("tid"), 2);
  EXPECT_EQ(spans[1].at("args").at("bytes"), 8192);
  EXPECT_EQ(spans[2].at("name"), "forward \"block\" 3\n");  // escaped and read back intact
  EXPECT_EQ(spans[2].at("tid"), 3);
  EXPECT_FALSE(spans[2].contains("args"));  // no bytes: not a transfer
  EXPECT_EQ(spans[3].at("tid"), 1);
  for (const auto& s : spans) EXPECT_EQ(s.at("pid"), spans[0].at("pid"));
}

TEST(Tracer, ScopedSpanRecordsOnDestruction) {
  TracePath tmp;
  trace::Tracer tracer(tmp.file());
  {
    trace::ScopedSpan span(tracer, "adam step", "cpu_adam", 0);
    span.set_bytes(123);
    EXPECT_EQ(tracer.span_count(), 0u);
  }
  EXPECT_EQ(tracer.span_count(), 1u);
  tracer.flush();
  std::vector<nlohmann::json> spans = spans_of(read_json(tmp.file()));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("name"), "adam step");
  EXPECT_EQ(spans[0].at("args").at("bytes"), 123);
  EXPECT_GE(spans[0].at("dur").get<double>(), 0.0);
}

TEST(Tracer, DestructorWritesWithoutFlush) {
  TracePath tmp;
  { trace::Tracer tracer(tmp.file()); tracer.record("x", "s", 0, 10); }
  EXPECT_EQ(spans_of(read_json(tmp.file())).size(), 1u);
}

TEST(Tracer, FlushWritesEverythingSoFarEachTime) {
  TracePath tmp;
  trace::Tracer tracer(tmp.file());
  tracer.record("a", "s", 0, 10);
  tracer.flush();
  EXPECT_EQ(spans_of(read_json(tmp.file())).size(), 1u);
  tracer.record("b", "s", 10, 20);
  tracer.flush();
  EXPECT_EQ(spans_of(read_json(tmp.file())).size(), 2u);
  // No temporary file is left beside the trace.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.dir())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(Tracer, EmptyTraceIsValid) {
  TracePath tmp;
  { trace::Tracer tracer(tmp.file()); }
  nlohmann::json trace = read_json(tmp.file());
  EXPECT_TRUE(spans_of(trace).empty());
}

TEST(Tracer, DisabledWritesNothing) {
  TracePath tmp;
  {
    trace::Tracer tracer("");
    EXPECT_FALSE(tracer.enabled());
    tracer.record("x", "s", 0, 10, 1);
    { trace::ScopedSpan span(tracer, "y", "s"); }
    EXPECT_EQ(tracer.span_count(), 0u);
    tracer.flush();
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.dir())) ++files;
  EXPECT_EQ(files, 0u);
}

TEST(Tracer, UnwritablePathIsAnErrorNamingIt) {
  const std::string path = "/nonexistent/strata/trace.json";
  trace::Tracer tracer(path);
  tracer.record("x", "s", 0, 10);
  try {
    tracer.flush();
    FAIL() << "flush to a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), path);
  }
}

}  // namespace
}  // namespace strata::runtime

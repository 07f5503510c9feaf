// Which track a stage-3 NVMe-offload run charges its work to (host device): the disk's reads and
// writes are on the disk's own tracks ("nvme read", "nvme write"), filled from the I/O engine's
// completion side; the CPU optimizer track holds only Adam, and the H2D tracks only copies (the
// H2D track used to hold the time the H2D stream waited for NVMe reads, "wait for NVMe read");
// the shards read from NVMe go up on the staged H2D track, "h2d nvme".
#include <gtest/gtest.h>

#include <string>

#include "runtime/trace/trace.h"
#include "tests/train/trace_run_util.h"

namespace strata::train {
namespace {

TEST(TraceTracks, NvmeOffloadChargesTheDisk) {
  if (!test::have_text()) GTEST_SKIP() << test::text_path() << " is missing";
  test::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const test::TracedRun run = test::traced_run(tmp.path() + "/run", "nvme", "host");

  const std::string read_track(runtime::trace::kNvmeReadTrack);
  const std::string write_track(runtime::trace::kNvmeWriteTrack);
  ASSERT_TRUE(run.tracks.count(read_track)) << "no disk read track in the trace";
  ASSERT_TRUE(run.tracks.count(write_track)) << "no disk write track in the trace";
  std::uint64_t read_bytes = 0;
  for (const test::Span& s : run.tracks.at(read_track)) {
    EXPECT_EQ(s.name, "read");
    EXPECT_GE(s.dur_us, 0);
    read_bytes += s.bytes;
  }
  EXPECT_GT(read_bytes, 0u);
  // Spans of one disk track tile its busy stretches: they never overlap (Note [Disk activity]).
  for (const std::string& track : {read_track, write_track}) {
    const auto& spans = run.tracks.at(track);
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_GE(spans[i].ts_us + 1e-3, spans[i - 1].ts_us + spans[i - 1].dur_us) << track << " span " << i;
    }
  }
  // The bytes on the read track are the bytes the engine read: every step's metrics count them.
  std::uint64_t metric_reads = 0;
  for (const auto& m : run.metrics) metric_reads += m.at("bytes").at("nvme_read").get<std::uint64_t>();
  EXPECT_GE(read_bytes, metric_reads);

  ASSERT_TRUE(run.tracks.count("cpu optimizer"));
  for (const test::Span& s : run.tracks.at("cpu optimizer")) {
    EXPECT_EQ(s.name.rfind("adam ", 0), 0u) << "the cpu optimizer track holds something else than Adam: " << s.name;
    EXPECT_EQ(s.bytes, 0u);
  }
  // The shards read from NVMe go up on their own stream (Note [Staged copies] in
  // param_fetcher.cpp): copies only, never the wait for the read.
  ASSERT_TRUE(run.tracks.count("h2d nvme")) << "no staged H2D track in the trace";
  std::uint64_t staged_bytes = 0;
  for (const std::string track : {"h2d", "h2d nvme"}) {
    ASSERT_TRUE(run.tracks.count(track));
    for (const test::Span& s : run.tracks.at(track)) {
      EXPECT_NE(s.name, "wait for NVMe read") << "a wait for the disk is charged to the " << track << " track";
      if (track == "h2d nvme") staged_bytes += s.bytes;
    }
  }
  EXPECT_GT(staged_bytes, 0u);
  // The busiest figure can name the disk: its tracks are accounted like every other.
  ASSERT_FALSE(run.metrics.empty());
  for (const auto& m : run.metrics) EXPECT_FALSE(m.at("busiest").get<std::string>().empty());
}

TEST(TraceTracks, CpuOffloadHasNoDiskTracks) {
  if (!test::have_text()) GTEST_SKIP() << test::text_path() << " is missing";
  test::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const test::TracedRun run = test::traced_run(tmp.path() + "/run", "cpu", "host", 2);
  EXPECT_FALSE(run.tracks.count(std::string(runtime::trace::kNvmeReadTrack)));
  EXPECT_TRUE(run.tracks.count("compute"));
  EXPECT_TRUE(run.tracks.count("h2d"));
  EXPECT_TRUE(run.tracks.count("d2h"));
}

}  // namespace
}  // namespace strata::train

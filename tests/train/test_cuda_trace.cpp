// The GPU in the trace (cuda device): a traced stage-3 cpu-offload run puts spans on the compute
// stream's track (the ops' kernels), on H2D and D2H (the copies, with their bytes), and a
// collective on the comm stream is a span of its own; every span has start <= end, the spans of
// one stream never overlap, and the GPU's spans lie within the run on the host's clock. Exits 77
// (skipped) where no GPU is usable.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/trace/trace.h"
#include "tests/train/trace_run_util.h"

namespace strata::train {
namespace {

void expect_tiled(const std::vector<test::Span>& spans, const std::string& track) {
  for (std::size_t i = 0; i < spans.size(); ++i) {
    EXPECT_GE(spans[i].dur_us, 0) << track << " span " << i;
    if (i > 0) {
      // Recorded in completion order, so in stream order: each starts after the last ends.
      EXPECT_GE(spans[i].ts_us + 1e-3, spans[i - 1].ts_us + spans[i - 1].dur_us) << track << " span " << i;
    }
  }
}

TEST(CudaTrace, StageThreeCpuOffloadStepHasGpuTracks) {
  if (!test::have_text()) GTEST_SKIP() << test::text_path() << " is missing";
  test::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::int64_t before_ns = runtime::trace::Tracer::now_ns();
  const test::TracedRun run = test::traced_run(tmp.path() + "/run", "cpu", "cuda", 2);
  const std::int64_t after_ns = runtime::trace::Tracer::now_ns();

  for (const char* track : {"compute", "h2d", "d2h"}) {
    ASSERT_TRUE(run.tracks.count(track)) << "no spans on the " << track << " track";
    const auto& spans = run.tracks.at(track);
    EXPECT_FALSE(spans.empty());
    expect_tiled(spans, track);
    for (const test::Span& s : spans) {
      // On the steady clock: within the run, give or take the anchor's error.
      EXPECT_GE(s.ts_us, static_cast<double>(before_ns) / 1e3 - 1000.0) << track << " " << s.name;
      EXPECT_LE(s.ts_us + s.dur_us, static_cast<double>(after_ns) / 1e3 + 1000.0) << track << " " << s.name;
    }
  }
  bool matmul = false;
  for (const test::Span& s : run.tracks.at("compute")) matmul = matmul || s.name.find("matmul") != std::string::npos;
  EXPECT_TRUE(matmul) << "the compute track has no matmul op";
  std::uint64_t h2d_bytes = 0;
  for (const test::Span& s : run.tracks.at("h2d")) h2d_bytes += s.bytes;
  EXPECT_GT(h2d_bytes, 0u);
  // The first H2D copy (parameters in) comes before the last compute op (the step's backward).
  EXPECT_LT(run.tracks.at("h2d").front().ts_us, run.tracks.at("compute").back().ts_us);
  // The step metrics see the GPU: some step's busiest track is a GPU stream or the CPU optimizer,
  // and none is empty.
  for (const auto& m : run.metrics) EXPECT_FALSE(m.at("busiest").get<std::string>().empty());
}

// One rank does no collective in a training step, so the comm stream is driven directly.
TEST(CudaTrace, CollectiveIsASpanOnTheCommTrack) {
  runtime::trace::Tracer tracer("", "rank 0", /*account_busy=*/true);
  {
    auto device = runtime::device::Device::create({.kind = "cuda", .memory_bytes = 64 << 20, .tracer = &tracer});
    auto comm = runtime::comm::create_communicator(*device);
    auto stream = device->create_stream("comm");
    runtime::device::DeviceBuffer in = device->allocate(1 << 20, "in");
    runtime::device::DeviceBuffer out = device->allocate(1 << 20, "out");
    stream->memset_async(in.data(), 0, 1 << 20);
    comm->all_reduce(in.data(), out.data(), (1 << 20) / 4, DType::f32, *stream);
    stream->synchronize();
    device->flush_trace();
    std::uint64_t spans = 0, bytes = 0;
    for (const runtime::trace::TrackBusy& b : tracer.busy()) {
      if (b.track == "comm") {
        spans = b.spans;
        bytes = b.bytes;
      }
    }
    // The memset, then the all_reduce (its copy at one rank is part of it, not a span of its own).
    EXPECT_EQ(spans, 2u);
    EXPECT_EQ(bytes, 2u << 20);
  }
}

}  // namespace
}  // namespace strata::train

// The update pipeline, asserted from recorded spans: an update does not wait for the copies of
// its neighbours. The host device's link is slowed (DeviceOptions::host_link_bytes_per_s) so
// that every gradient D2H and parameter H2D of a module (1 M elements) takes ~60 ms, longer than
// the host work around it: a pipeline that serialised an update behind a neighbour's copy would
// start the update's span after that copy's span ends, whatever the machine's speed. No
// assertion compares a duration with a threshold.
//
// Stage 2, optimizer states on the CPU, parameters on the device: each update's new parameters
// go up with an H2D from a pinned staging buffer (two of them, used in turn).
//
// Stage 3, parameters on NVMe: the new parameters go to the disk from the staging buffers, and
// the disk's writes are slowed instead (AioEngine::set_emulated_write_bytes_per_s), so that a
// module's write lasts longer than the host work between two updates.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offload/aio_engine.h"
#include "offload/swap_space.h"
#include "runtime/trace/trace.h"
#include "tests/runtime/zero/engine_fixture.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;

namespace {

struct Span {
  double start = 0, end = 0;
};

struct StepSpans {
  std::vector<std::vector<Span>> adam, d2h, h2d;  // per module, in time order
};

constexpr std::size_t kScale = 25;  // modules of ~1 M elements
std::size_t numel(int m) { return module_numel(m) * kScale; }
// Each module's shard is its numel padded to a multiple of 64 (one rank, fp32): the D2H bytes.
std::size_t shard_bytes(int m) { return (numel(m) + 63) / 64 * 64 * 4; }

StepSpans read_spans(const std::string& path) {
  std::ifstream f(path);
  const nlohmann::json trace = nlohmann::json::parse(f);
  std::map<int, std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
  }
  StepSpans s;
  s.adam.resize(kModules);
  s.d2h.resize(kModules);
  s.h2d.resize(kModules);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string& track = tracks[e["tid"].get<int>()];
    const Span span{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    const std::uint64_t bytes = e.contains("args") ? e["args"]["bytes"].get<std::uint64_t>() : 0;
    for (int m = 0; m < kModules; ++m) {
      if (track == "cpu optimizer" && e["name"] == "adam m" + std::to_string(m)) s.adam[m].push_back(span);
      if (track == "d2h" && bytes == shard_bytes(m)) s.d2h[m].push_back(span);
      // The module's parameters going up (its numel, fp32): the initial load, then the update's.
      if (track == "h2d" && bytes == numel(m) * 4) s.h2d[m].push_back(span);
    }
  }
  return s;
}

StepSpans run_and_trace(double clipping, const std::string& dir) {
  config::Config c = make_config(2, config::OffloadDevice::kNone, config::OffloadDevice::kCpu, dir, clipping);
  c.zero_optimization.sub_group_size = 2'000'000;  // one Adam window per module
  c.strata.device_memory_bytes = 256 * kMiB;
  c.strata.cpu_threads = 1;  // no OpenMP team spinning on the 2 cores the streams' workers need
  // With clipping: the schedule that waits for the norm (speculation would update as the
  // gradients land, as without clipping).
  c.strata.speculative_updates = false;
  const std::string path = dir + "/trace-" + std::to_string(clipping) + ".json";
  {
    trace::Tracer tracer(path);

    // ~4 MB per module's copy at 64 MB/s: ~60-70 ms per copy.
    EngineRun run(c, &tracer, 64'000'000, kScale);
    run.step(0);
    run.engine->finish_updates();
    run.device->synchronize();
    tracer.flush();
  }
  return read_spans(path);
}

}  // namespace

// Without clipping the updates run in backward order (5, 4, ..., 0) as the gradients land. The
// update of module m starts while module m-1's gradient is still coming down (its D2H follows
// module m's on the D2H stream): the update waits for its own gradient only, not for the
// copies queued behind it, and its accumulation runs beside them.
TEST(UpdatePipeline, AnUpdateOverlapsTheNextModulesGradientCopy) {
  TempDir dir;
  const StepSpans s = run_and_trace(0.0, dir.path());
  for (int m = 0; m < kModules; ++m) {
    ASSERT_EQ(s.adam[m].size(), 1u) << "module " << m;
    ASSERT_EQ(s.d2h[m].size(), 1u) << "module " << m;
  }
  for (int m = kModules - 1; m >= 1; --m) {
    const Span& adam = s.adam[m].front();
    const Span& next = s.d2h[m - 1].front();
    EXPECT_LT(s.d2h[m].front().end, adam.start) << "module " << m << " updated before its gradient landed";
    // Unless the updater was still busy with module m+1's update when that copy ended (an
    // Adam slower than the link, as under the sanitizers: the updater is then the bottleneck,
    // not the pipeline).
    const bool updater_busy = m + 1 < kModules && s.adam[m + 1].front().end >= next.end;
    EXPECT_TRUE(adam.start < next.end || updater_busy)
        << "the update of module " << m << " waited for module " << m - 1 << "'s gradient D2H";
  }
}

// With clipping every gradient has landed before the first update (the norm needs them all);
// the updates then run in forward order (0, 1, ...). Module m's Adam starts while module m-1's
// new parameters are still going up: the updater waits only for the staging buffer it reuses
// (two updates back), never for the copy of the update just before.
TEST(UpdatePipeline, AnUpdateOverlapsThePreviousModulesParameterCopy) {
  TempDir dir;
  const StepSpans s = run_and_trace(1.0, dir.path());
  for (int m = 0; m < kModules; ++m) {
    ASSERT_EQ(s.adam[m].size(), 1u) << "module " << m;
    ASSERT_FALSE(s.h2d[m].empty()) << "module " << m;  // the initial load, then the update's
  }
  for (int m = 1; m < kModules; ++m) {
    const Span& adam = s.adam[m].front();
    const Span& previous = s.h2d[m - 1].back();
    EXPECT_LT(s.adam[m - 1].front().start, adam.start) << "updates out of forward order";
    EXPECT_LT(s.adam[m - 1].front().end, previous.start) << "module " << m - 1 << "'s H2D before its update";
    EXPECT_LT(adam.start, previous.end) << "the update of module " << m << " waited for module " << m - 1
                                         << "'s parameter H2D";
  }
}

namespace {

constexpr std::size_t kWriteScale = 8;  // modules of ~320 K elements: 1.3 MB of fp32 parameters
std::size_t write_bytes(int m) { return (module_numel(m) * kWriteScale + 63) / 64 * 64 * 4; }

struct WriteSpans {
  std::vector<std::vector<Span>> adam, write;  // per module, in time order
};

WriteSpans read_write_spans(const std::string& path) {
  std::ifstream f(path);
  const nlohmann::json trace = nlohmann::json::parse(f);
  std::map<int, std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
  }
  WriteSpans s;
  s.adam.resize(kModules);
  s.write.resize(kModules);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string& track = tracks[e["tid"].get<int>()];
    const Span span{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    const std::uint64_t bytes = e.contains("args") ? e["args"]["bytes"].get<std::uint64_t>() : 0;
    for (int m = 0; m < kModules; ++m) {
      if (track == "cpu optimizer" && e["name"] == "adam m" + std::to_string(m)) s.adam[m].push_back(span);
      // The disk's write track tiles the time writes were in flight, one span per finished
      // request ending at its completion (Note [Disk activity]): the span with module m's shard
      // bytes (rounded up to the O_DIRECT block on disk) ends when the write of its new
      // parameters completed.
      if (track == runtime::trace::kNvmeWriteTrack && bytes >= write_bytes(m) &&
          bytes < write_bytes(m) + offload::kDirectIoAlignment) {
        s.write[m].push_back(span);
      }
    }
  }
  return s;
}

}  // namespace

// With clipping (and no speculation) the updates run back to back in forward order once the norm
// is known. Module m's new parameters leave for NVMe as one write from a staging buffer, and the
// optimizer worker goes on to module m+1's Adam without waiting for it
// (Note [Parameter writes behind], updater.h): m+1's Adam starts while m's write is still in flight. An updater that
// waited for the write at the end of module m would start m+1's Adam only after the write's
// completion, which ends its span on the disk's track before any waiter wakes (finish_piece).
TEST(UpdatePipeline, AnUpdateStartsWhileThePreviousModulesParameterWriteIsInFlight) {
  TempDir dir;
  config::Config c = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path(), 1.0);
  c.zero_optimization.sub_group_size = 2'000'000;  // one Adam window, so one write, per module
  c.strata.cpu_threads = 1;
  c.strata.speculative_updates = false;
  const std::string path = dir.path() + "/trace-writes.json";
  {
    trace::Tracer tracer(path);
    EngineRun run(c, &tracer, 0, kWriteScale);
    // The initial parameters are on disk already: from here on, the only writes are the updates'.
    offload::AioEngine& io = run.engine->tiers().swap()->engine();
    io.set_activity_hook([&tracer](offload::IoOp op, std::int64_t start_ns, std::int64_t end_ns, std::uint64_t bytes) {
      if (op == offload::IoOp::kWrite) tracer.record("write", runtime::trace::kNvmeWriteTrack, start_ns, end_ns, bytes);
    });
    io.set_emulated_write_bytes_per_s(8'000'000);  // ~160 ms per module's 1.3 MB
    run.step(0);
    run.engine->finish_updates();
    io.set_activity_hook({});
    io.set_emulated_write_bytes_per_s(0);
    tracer.flush();
  }
  const WriteSpans s = read_write_spans(path);
  for (int m = 0; m < kModules; ++m) {
    ASSERT_EQ(s.adam[m].size(), 1u) << "module " << m;
    ASSERT_EQ(s.write[m].size(), 1u) << "module " << m;
    EXPECT_LT(s.adam[m].front().end, s.write[m].front().end) << "module " << m << "'s write ended before its Adam";
  }
  for (int m = 0; m + 1 < kModules; ++m) {
    const Span& next = s.adam[m + 1].front();
    EXPECT_LT(s.adam[m].front().start, next.start) << "updates out of forward order";
    EXPECT_LT(next.start, s.write[m].front().end)
        << "the update of module " << m + 1 << " waited for module " << m << "'s parameter write";
  }
}

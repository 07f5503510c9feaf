// The update pipeline: an update does not wait for the copies of its neighbours. Each test holds
// a neighbour's copy open (the host device's copy hook, or the I/O engine's completion hook for
// an NVMe write) until the tracer has recorded the update's Adam (span_watch.h): an update that
// waited for that copy would never be recorded, the hold runs out (kHoldLimit) and the test
// fails naming the dependency. No assertion compares the times of spans, so a loaded machine
// cannot fail a right pipeline (comparing recorded spans did, on a loaded 2-core machine). The
// order checks that remain ("module m updated after its gradient landed") read the order in
// which the tracer saw the work, where one piece of work waits for the other.
//
// Stage 2, optimizer states on the CPU, parameters on the device: each update's new parameters
// go up with an H2D from a pinned staging buffer (two of them, used in turn).
//
// Stage 3, parameters on NVMe: the new parameters go to the disk from the staging buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/trace/trace.h"
#include "tests/runtime/zero/engine_fixture.h"
#include "tests/runtime/zero/span_watch.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;

namespace {

// Each module's shard is its numel padded to a multiple of 64 (one rank, fp32): the bytes of its
// gradient D2H and of its new parameters' H2D.
std::size_t shard_bytes(int m) { return (module_numel(m) + 63) / 64 * 64 * 4; }
std::string adam(int m) { return "adam m" + std::to_string(m); }

config::Config pipeline_config(double clipping, const std::string& dir) {
  config::Config c = make_config(2, config::OffloadDevice::kNone, config::OffloadDevice::kCpu, dir, clipping);
  c.zero_optimization.sub_group_size = 2'000'000;  // one Adam window per module
  c.strata.cpu_threads = 1;  // no OpenMP team spinning on the 2 cores the streams' workers need
  // With clipping: the schedule that waits for the norm (speculation would update as the
  // gradients land, as without clipping).
  c.strata.speculative_updates = false;
  return c;
}

// The host device's copy hook of the two copy tests: while `armed`, a copy on `stream` of module
// m-1's shard is held until module m's Adam has been recorded; a hold that runs out is noted in
// `waits` as "the update of module m waited for module m-1's <what>".
std::function<void(const std::string&, std::size_t)> hold_until_next_adam(SpanWatch& watch, Waits& waits,
                                                                          const std::atomic<bool>& armed,
                                                                          std::string stream, std::string what) {
  return [&watch, &waits, &armed, stream = std::move(stream), what = std::move(what)](const std::string& s,
                                                                                        std::size_t bytes) {
    if (!armed.load() || s != stream) return;
    for (int m = 1; m < kModules; ++m) {
      if (bytes == shard_bytes(m - 1) && !watch.wait_for(named(adam(m)))) {
        waits.add("the update of module " + std::to_string(m) + " waited for module " + std::to_string(m - 1) +
                  "'s " + what);
      }
    }
  };
}

void expect_no_waits(const Waits& waits) {
  for (const std::string& w : waits.found()) ADD_FAILURE() << w;
}

}  // namespace

// Without clipping the updates run in backward order (5, 4, ..., 0) as the gradients land. Module
// m-1's gradient D2H follows module m's on the D2H stream: it is held open until module m's Adam
// has been recorded, so the update of m waits for its own gradient only, not for the copies
// queued behind it, and its accumulation runs beside them.
TEST(UpdatePipeline, AnUpdateOverlapsTheNextModulesGradientCopy) {
  TempDir dir;
  trace::Tracer tracer(dir.path() + "/trace.json");
  SpanWatch watch(tracer);
  Waits waits;
  std::atomic<bool> armed{false};
  auto hold = hold_until_next_adam(watch, waits, armed, "d2h", "gradient D2H");
  EngineRun run(pipeline_config(0.0, dir.path()), &tracer, 0, 1, {}, hold);
  run.device->synchronize();  // the initial parameters are up
  watch.arm();
  armed = true;
  run.step(0);
  run.engine->finish_updates();
  run.device->synchronize();
  armed = false;
  expect_no_waits(waits);
  for (int m = 0; m < kModules; ++m) {
    const int d2h = watch.first(copy_on("d2h", shard_bytes(m)));
    const int update = watch.first(named(adam(m)));
    ASSERT_GE(d2h, 0) << "no gradient D2H of module " << m;
    ASSERT_GE(update, 0) << "no update of module " << m;
    EXPECT_LT(d2h, update) << "module " << m << " updated before its gradient landed";
  }
}

// With clipping every gradient has landed before the first update (the norm needs them all);
// the updates then run in forward order (0, 1, ...). Module m-1's new parameters going up are
// held open until module m's Adam has been recorded: the updater waits only for the staging
// buffer it reuses (two updates back), never for the copy of the update just before.
TEST(UpdatePipeline, AnUpdateOverlapsThePreviousModulesParameterCopy) {
  TempDir dir;
  trace::Tracer tracer(dir.path() + "/trace.json");
  SpanWatch watch(tracer);
  Waits waits;
  std::atomic<bool> armed{false};
  auto hold = hold_until_next_adam(watch, waits, armed, "h2d", "parameter H2D");
  EngineRun run(pipeline_config(1.0, dir.path()), &tracer, 0, 1, {}, hold);
  run.device->synchronize();  // the initial parameters are up: from here on, the updates' H2Ds
  watch.arm();
  armed = true;
  run.step(0);
  run.engine->finish_updates();
  run.device->synchronize();
  armed = false;
  expect_no_waits(waits);
  for (int m = 0; m < kModules; ++m) {
    const int update = watch.first(named(adam(m)));
    const int h2d = watch.first(copy_on("h2d", shard_bytes(m)));
    ASSERT_GE(update, 0) << "no update of module " << m;
    ASSERT_GE(h2d, 0) << "no H2D of module " << m << "'s new parameters";
    EXPECT_LT(update, h2d) << "module " << m << "'s H2D before its update";
    if (m > 0) {
      EXPECT_LT(watch.first(named(adam(m - 1))), update) << "updates out of forward order";
    }
  }
}

// With clipping (and no speculation) the updates run back to back in forward order once the norm
// is known. Module m's new parameters leave for NVMe as one write from a staging buffer, and the
// optimizer worker goes on to module m+1's Adam without waiting for it
// (Note [Parameter writes behind], param_writer.h): the completion of m's write is held until
// m+1's Adam has been recorded. An updater that waited for the write at the end of module m
// would never get there.
TEST(UpdatePipeline, AnUpdateStartsWhileThePreviousModulesParameterWriteIsInFlight) {
  TempDir dir;
  config::Config c = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path(), 1.0);
  c.zero_optimization.sub_group_size = 2'000'000;  // one Adam window, so one write, per module
  // Extents are whole blocks, allocated in module order (only the parameters are on NVMe): the
  // block of a write's file offset names its module, whatever pieces the write went out in.
  c.aio.block_size = kMiB;
  c.strata.cpu_threads = 1;
  c.strata.speculative_updates = false;
  trace::Tracer tracer(dir.path() + "/trace.json");
  SpanWatch watch(tracer);
  Waits waits;
  std::atomic<bool> armed{false};
  std::atomic<unsigned> held{0};  // bit m: a piece of module m's write was held
  auto hold = [&](const offload::Completion& done) {
    if (!armed.load() || done.op != offload::IoOp::kWrite) return done.result;
    const auto m = static_cast<int>(done.offset / kMiB);
    if (m + 1 >= kModules) return done.result;
    held |= 1u << m;
    if (!watch.wait_for(named(adam(m + 1)))) {
      waits.add("the update of module " + std::to_string(m + 1) + " waited for module " + std::to_string(m) +
                "'s parameter write");
    }
    return done.result;
  };
  EngineRun run(c, &tracer, 0, 1, hold);
  // The initial parameters are on disk already: from here on, the only writes are the updates'.
  watch.arm();
  armed = true;
  run.step(0);
  run.engine->finish_updates();
  armed = false;
  expect_no_waits(waits);
  EXPECT_EQ(held.load(), (1u << (kModules - 1)) - 1) << "a module's write was not held: the test proved nothing";
  for (int m = 0; m + 1 < kModules; ++m) {
    EXPECT_LT(watch.first(named(adam(m))), watch.first(named(adam(m + 1)))) << "updates out of forward order";
  }
}

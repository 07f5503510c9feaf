// The ZeRO engine driven by a fake model on the host backend: placement invariance, the
// prefetch overlap (a compute held open until the next module's fetch is recorded), the plan's refusal with its table, and
// the pieces (FetchTrace, DevicePool).
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/device/device_pool.h"
#include "tests/runtime/zero/engine_fixture.h"
#include "tests/runtime/zero/span_watch.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/fetch_trace.h"
#include "runtime/tiers/plan.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;
namespace fs = std::filesystem;

TEST(ZeroEngine, PlacementNeverChangesTheBits) {
  struct Case {
    int stage;
    config::OffloadDevice params, optimizer;
    // NVMe optimizer states: windows of sub_group_size rounded up to aio.block_size / 2
    // elements; 2 per module with these.
    std::uint64_t sub_group_size = 20'000;
    std::size_t aio_block_size = 65'536;
  };
  const Case cases[] = {
      {3, config::OffloadDevice::kNone, config::OffloadDevice::kNone},
      {3, config::OffloadDevice::kCpu, config::OffloadDevice::kCpu},
      {3, config::OffloadDevice::kNvme, config::OffloadDevice::kNvme},
      // 3 windows per module: a module's third window reuses the staging buffer of its first,
      // whose NVMe parameter write is still going behind (Note [Parameter writes behind]).
      {3, config::OffloadDevice::kNvme, config::OffloadDevice::kNvme, 10'000, 16'384},
      {3, config::OffloadDevice::kCpu, config::OffloadDevice::kNvme},
      {2, config::OffloadDevice::kNone, config::OffloadDevice::kCpu},
      {1, config::OffloadDevice::kNone, config::OffloadDevice::kNvme},
  };
  for (double clipping : {1.0, 0.0}) {
    TempDir dir;
    std::vector<std::vector<float>> reference;
    for (const Case& c : cases) {
      config::Config config = make_config(c.stage, c.params, c.optimizer, dir.path(), clipping);
      config.zero_optimization.sub_group_size = c.sub_group_size;
      config.aio.block_size = c.aio_block_size;
      EngineRun run(config);
      for (int s = 0; s < 3; ++s) run.step(0);
      std::vector<std::vector<float>> w = run.weights();
      if (reference.empty()) {
        reference = w;
        // The steps changed something.
        std::vector<float> initial(module_numel(0));
        for (std::size_t i = 0; i < initial.size(); ++i) initial[i] = 0.01f * static_cast<float>((i * 7) % 101) - 0.5f;
        EXPECT_NE(std::memcmp(initial.data(), w[0].data(), initial.size() * 4), 0);
      } else {
        EXPECT_TRUE(same_bits(reference, w))
            << "clipping " << clipping << ", stage " << c.stage << " params " << config::to_string(c.params)
            << " optimizer " << config::to_string(c.optimizer) << " sub_group_size " << c.sub_group_size;
      }
    }
  }
}

// In step 2 (step 1 records the order) the fetch of module i+1 (its NVMe read, then its H2D)
// runs while module i computes, and has finished before module i's compute ends: module i+1's
// compute never waits for it. The model waits for each module's compute before acquiring the
// next, so only a fetch issued ahead by the engine can finish during it. Module i's compute is
// held open until the tracer has recorded module i+1's H2D (span_watch.h): without prefetching
// that copy would come only after the compute, the hold would run out and the test fail; no
// span times are compared, so a loaded machine cannot fail it.
TEST(ZeroEngine, PrefetchOverlapsTheNextFetchWithCompute) {
  for (config::OffloadDevice params : {config::OffloadDevice::kCpu, config::OffloadDevice::kNvme}) {
    TempDir dir;
    trace::Tracer tracer(dir.path() + "/trace.json");
    SpanWatch watch(tracer);
    Waits waits;
    // Shards read from NVMe go up on a stream of their own (Note [Staged copies]).
    const std::string shard_track = params == config::OffloadDevice::kNvme ? "h2d nvme" : "h2d";
    EngineRun run(make_config(3, params, config::OffloadDevice::kCpu, dir.path()), &tracer);
    for (int m = 0; m < kModules; ++m) {
      ASSERT_FALSE(run.engine->plan().modules[static_cast<std::size_t>(m)].resident) << "module " << m;
    }
    run.step(0);
    run.device->synchronize();
    run.on_forward_compute = [&](int m) {
      if (m + 1 >= kModules) return;
      // A shard copy: the module's elements padded to 64 (fp32, one rank). From NVMe it comes in
      // parts (Note [Reads in parts]), the modules in order on their own stream: module m + 1's
      // copy is done once that stream has moved the shards of modules 0 to m + 1.
      auto shard = [](int k) { return (module_numel(k) + 63) / 64 * 64 * 4; };
      std::uint64_t through = 0;
      for (int k = 0; k <= m + 1; ++k) through += shard(k);
      const bool copied = params == config::OffloadDevice::kNvme ? watch.wait_for_bytes(shard_track, through)
                                                                 : watch.wait_for(copy_on(shard_track, shard(m + 1)));
      if (!copied) {
        waits.add("module " + std::to_string(m + 1) + "'s fetch did not finish while module " + std::to_string(m) +
                  " computed (params " + std::string(config::to_string(params)) + ")");
      }
    };
    watch.arm();
    run.step(0, /*host_sync=*/true);
    run.device->synchronize();
    run.on_forward_compute = nullptr;
    EXPECT_GT(run.engine->counters().prefetched, 0u);
    for (const std::string& w : waits.found()) ADD_FAILURE() << w;
  }
}

TEST(ZeroPlan, ABudgetBelowTheMinimumFailsWithTheTable) {
  config::Config c = make_config(3, config::OffloadDevice::kCpu, config::OffloadDevice::kCpu, "");
  tiers::PlanInputs in;
  in.module_numels = {1'000'000, 2'000'000, 2'000'000};
  in.module_names = {"embedding", "h.0", "h.1"};
  in.activation_bytes = 4 * kMiB;
  in.device_budget_bytes = 8 * kMiB;
  in.pinned_budget_bytes = 1 * kGiB;
  try {
    tiers::make_plan(c, in);
    FAIL() << "a plan needing more than the budget was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needed"), std::string::npos) << what;
    EXPECT_NE(what.find("available"), std::string::npos) << what;
    EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
    EXPECT_NE(what.find("strata.device_memory"), std::string::npos) << what;
  }
  in.device_budget_bytes = 64 * kMiB;
  const tiers::ZeroPlan plan = tiers::make_plan(c, in);
  EXPECT_LE(plan.needed(tiers::Tier::device), in.device_budget_bytes);
  EXPECT_FALSE(plan.modules[1].resident);
  EXPECT_EQ(plan.modules[1].param_tier, tiers::Tier::pinned);
  EXPECT_EQ(plan.modules[1].optimizer_tier, tiers::Tier::pinned);
}

TEST(ZeroPlan, AShardLargerThanTheNvmeStagingBufferIsRefused) {
  config::Config c = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kNvme, "/tmp");
  c.zero_optimization.offload_param.buffer_size = 1000;
  tiers::PlanInputs in;
  in.module_numels = {4000, 500};
  in.module_names = {"a", "b"};
  in.device_budget_bytes = 64 * kMiB;
  in.pinned_budget_bytes = 64 * kMiB;
  in.nvme_free_bytes = 1 * kGiB;
  try {
    tiers::make_plan(c, in);
    FAIL() << "a 4000-element shard was accepted with 1000-element staging buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "zero_optimization.offload_param.buffer_size");
  }
  c.zero_optimization.offload_param.buffer_size = 4096;
  EXPECT_NO_THROW(tiers::make_plan(c, in));
}

TEST(ZeroPlan, OptimizerRatioOffloadsWholeModulesFromTheFirst) {
  config::Config c = make_config(3, config::OffloadDevice::kNone, config::OffloadDevice::kCpu, "");
  c.zero_optimization.offload_optimizer.ratio = 0.5;
  tiers::PlanInputs in;
  in.module_numels = {1000, 1000, 1000, 1000};
  in.module_names = {"a", "b", "c", "d"};
  in.device_budget_bytes = 64 * kMiB;
  in.pinned_budget_bytes = 64 * kMiB;
  const tiers::ZeroPlan plan = tiers::make_plan(c, in);
  EXPECT_EQ(plan.modules[0].optimizer_tier, tiers::Tier::pinned);
  EXPECT_EQ(plan.modules[1].optimizer_tier, tiers::Tier::pinned);
  EXPECT_EQ(plan.modules[2].optimizer_tier, tiers::Tier::device);
  EXPECT_EQ(plan.modules[3].optimizer_tier, tiers::Tier::device);
}

TEST(FetchTrace, RecordsFollowsAndRecordsAgainAfterADivergence) {
  zero::FetchTrace t;
  t.begin_step();
  EXPECT_FALSE(t.following());
  for (int m : {0, 1, 2, 0}) t.on_acquire(m);
  t.end_step();
  t.begin_step();
  ASSERT_TRUE(t.following());
  EXPECT_EQ(std::vector<int>(t.upcoming().begin(), t.upcoming().end()), (std::vector<int>{0, 1, 2, 0}));
  t.on_acquire(0);
  EXPECT_EQ(std::vector<int>(t.upcoming().begin(), t.upcoming().end()), (std::vector<int>{1, 2, 0}));
  t.on_acquire(2);  // diverges
  EXPECT_FALSE(t.following());
  EXPECT_TRUE(t.upcoming().empty());
  t.on_acquire(1);
  t.end_step();
  EXPECT_EQ(t.trace(), (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(t.divergences(), 1u);
}

namespace {
// A host device of 4 MiB for the pools' tests.
std::unique_ptr<device::Device> small_host_device() {
  device::DeviceOptions o;
  o.kind = "host";
  o.memory_bytes = 4 * kMiB;
  return device::Device::create(o);
}
}  // namespace

TEST(DevicePool, ABufferReturnsOnlyAfterItsStreamsWork) {
  std::unique_ptr<device::Device> device = small_host_device();
  std::unique_ptr<device::Stream> s = device->create_stream("s");
  device::DevicePool pool(*device, 2 * kMiB, "test region");
  device::DeviceBuffer a = pool.allocate(1536 * kKiB, "a");
  std::atomic<bool> release{false};
  s->host_task([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  pool.free_after(std::move(a), *s);
  // The stream still "uses" it: no room without waiting.
  EXPECT_TRUE(pool.try_allocate(1536 * kKiB, "b").empty());
  release = true;
  device::DeviceBuffer b = pool.allocate(1536 * kKiB, "b");  // waits for the stream, then reuses
  EXPECT_FALSE(b.empty());
  EXPECT_THROW(pool.allocate(1536 * kKiB, "c"), device::OutOfMemory);
}

// Note [Placement in issue order]: with Reuse::in_issue_order a buffer handed back lands the
// next allocation at the same place whether its work has completed or not (a function of the
// calls alone), and that allocation returns only once the work on those bytes has completed.
// Bytes no work uses are handed out without waiting.
TEST(DevicePool, InIssueOrderPlacesWhateverTheTimingAndWaitsForTheBytesItReuses) {
  std::unique_ptr<device::Device> device = small_host_device();
  std::unique_ptr<device::Stream> s = device->create_stream("s");
  for (bool still_running : {false, true}) {
    device::DevicePool pool(*device, 2 * kMiB, "test region", device::DevicePool::Reuse::in_issue_order);
    device::DeviceBuffer a = pool.allocate(1024 * kKiB, "a");
    device::DeviceBuffer keep = pool.allocate(256 * kKiB, "keep");
    const auto a_at = reinterpret_cast<std::uintptr_t>(a.data());
    std::atomic<bool> release{!still_running}, finished{false};
    s->host_task([&] {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(still_running ? 20 : 0));
      finished = true;
    });
    pool.free_after(std::move(a), *s);
    EXPECT_FALSE(pool.wait_one()) << "no pending buffer holds bytes in issue order";
    // 256 KiB fit the free tail (768 KiB) best: no work there, no wait.
    device::DeviceBuffer small = pool.try_allocate(256 * kKiB, "small");
    ASSERT_FALSE(small.empty());
    if (still_running) {
      EXPECT_FALSE(finished.load()) << "an allocation of unused bytes waited";
    }
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      release = true;
    });
    device::DeviceBuffer b = pool.try_allocate(1024 * kKiB, "b");  // only a's bytes hold it
    const bool finished_then = finished.load();
    releaser.join();
    ASSERT_FALSE(b.empty()) << "still_running " << still_running;
    EXPECT_TRUE(finished_then) << "b was handed out before the work on a's bytes completed";
    // Where a's work has completed or not: the calls alone place it.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()), a_at) << "still_running " << still_running;
    EXPECT_TRUE(pool.try_allocate(1024 * kKiB, "c").empty());  // full: no room, and no wait for any
  }
}

// Note [Speculative updates]: with clipping, pinned-tier modules update as their gradients land
// and are kept (norm under the threshold) or redone (over it). Either way the weights are
// bitwise those of the schedule that waits for the norm, here with the norm far under the
// threshold (every speculation kept) and far over it (step 1's redone; after a clipped step the
// engine does not speculate), over 3 steps.
TEST(ZeroEngine, SpeculativeUpdatesGiveTheBitsOfWaitingForTheNorm) {
  for (double clipping : {1e9, 1e-3}) {
    TempDir dir;
    std::vector<std::vector<float>> waited, speculated;
    for (bool speculate : {false, true}) {
      config::Config c = make_config(3, config::OffloadDevice::kCpu, config::OffloadDevice::kCpu, dir.path(), clipping);
      c.strata.speculative_updates = speculate;
      EngineRun run(c);
      for (int s = 0; s < 3; ++s) run.step(0);
      run.engine->finish_updates();
      const zero::EngineCounters counters = run.engine->counters();
      if (speculate) {
        const unsigned speculating_steps = clipping < 1 ? 1u : 3u;
        EXPECT_EQ(counters.speculative_updates, speculating_steps * kModules) << "clipping " << clipping;
        EXPECT_EQ(counters.speculative_redone, clipping < 1 ? 1u * kModules : 0u) << "clipping " << clipping;
        speculated = run.weights();
      } else {
        EXPECT_EQ(counters.speculative_updates, 0u);
        waited = run.weights();
      }
    }
    EXPECT_TRUE(same_bits(waited, speculated)) << "clipping " << clipping;
  }
}

// The speculative states' memory is bounded: with room for two modules' shadows only, two
// modules speculate each step and the others update after the norm, with the same bits.
TEST(ZeroEngine, SpeculationStaysUnderItsMemoryBudget) {
  TempDir dir;
  std::vector<std::vector<float>> reference;
  for (std::uint64_t budget : {std::uint64_t{0}, 2 * 12 * (module_numel(kModules - 1) + 64)}) {
    config::Config c = make_config(3, config::OffloadDevice::kCpu, config::OffloadDevice::kCpu, dir.path(), 1e9);
    c.strata.speculative_updates = budget != 0;
    c.strata.speculative_update_memory_bytes = budget != 0 ? budget : 1;
    EngineRun run(c);
    for (int s = 0; s < 2; ++s) run.step(0);
    run.engine->finish_updates();
    if (budget == 0) {
      reference = run.weights();
      continue;
    }
    EXPECT_EQ(run.engine->counters().speculative_updates, 2u * 2u);
    EXPECT_TRUE(same_bits(reference, run.weights()));
  }
}

// Parameter writes go on behind the next modules' updates (Note [Parameter writes behind],
// param_writer.h); one that fails is never lost: it is thrown, naming the swap file, during the next
// step (its begin_step, or the acquire of the module whose write failed, which waits for that
// module's update and its writes), and again at finish_updates(). The first write to complete
// after the first step's forward fails with EIO: whichever module's it is (completions need not
// come in issue order; under TSan they did not), the next step must not get through.
TEST(ZeroEngine, AFailedParameterWriteIsReportedNamingTheFile) {
  TempDir dir;
  config::Config c = make_config(3, config::OffloadDevice::kNvme, config::OffloadDevice::kCpu, dir.path());
  c.strata.speculative_updates = false;  // the updates after the norm, in forward order
  std::atomic<bool> armed{false};
  std::atomic<int> writes{0};
  EngineRun run(c, nullptr, 0, 1, [&](const offload::Completion& done) {
    if (!armed.load() || done.op != offload::IoOp::kWrite) return done.result;
    return writes.fetch_add(1) == 0 ? -EIO : done.result;
  });
  armed = true;  // the initial parameters are on disk: from here on, the updates' writes
  run.step(0);
  std::string error;
  try {
    run.step(0);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("swap.bin"), std::string::npos) << "not reported at the next step, or not naming the file: "
                                                       << error;
  EXPECT_NE(error.find("EIO"), std::string::npos) << error;
  try {
    run.engine->finish_updates();
    ADD_FAILURE() << "finish_updates() did not report the failed write";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("swap.bin"), std::string::npos) << e.what();
  }
}

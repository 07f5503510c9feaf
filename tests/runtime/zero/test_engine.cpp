// The ZeRO engine driven by a fake model on the host backend: placement invariance, the
// prefetch overlap (asserted from the recorded spans), the plan's refusal with its table, and
// the pieces (FetchTrace, DevicePool).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <map>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/host_tiers.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/device_pool.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/fetch_trace.h"
#include "runtime/zero/plan.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::runtime;

namespace {

constexpr int kModules = 6;
// Distinct sizes, so that a copy's byte count names its module in the trace.
std::size_t module_numel(int m) { return 40'000 + static_cast<std::size_t>(m) * 1'024; }
const char* const kComputeNames[kModules] = {"compute 0", "compute 1", "compute 2",
                                             "compute 3", "compute 4", "compute 5"};

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/strata-engine-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Config make_config(int stage, OffloadDevice params, OffloadDevice optimizer, const std::string& nvme,
                   double clipping = 1.0) {
  Config c;
  c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  // With clipping the updates are posted after the global norm; without, each as soon as its
  // module's gradient is final (engine.h).
  c.gradient_clipping = clipping;
  c.optimizer = OptimizerConfig{};
  c.optimizer->weight_decay = 0.01;
  c.zero_optimization.stage = stage;
  c.zero_optimization.offload_param.device = params;
  c.zero_optimization.offload_optimizer.device = optimizer;
  if (params == OffloadDevice::kNvme) c.zero_optimization.offload_param.nvme_path = {nvme};
  if (optimizer == OffloadDevice::kNvme) c.zero_optimization.offload_optimizer.nvme_path = {nvme};
  c.zero_optimization.stage3_param_persistence_threshold = std::uint64_t{0};
  c.zero_optimization.stage3_prefetch_bucket_size = std::uint64_t{1'000'000};
  c.zero_optimization.sub_group_size = 20'000;
  c.aio.block_size = 65'536;
  c.strata.device = DeviceKind::kHost;
  c.strata.device_memory_bytes = 64 * kMiB;
  ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  return resolve_config(c, in);
}

// A run of the engine with a fake model: forward reads each module on the compute stream
// (sleeping `compute_ms` to stand for the work), backward writes a gradient derived from the
// parameters. Owns everything a run needs.
struct EngineRun {
  EngineRun(const Config& config_in, Tracer* tracer_in = nullptr)
      : config(config_in), own_tracer(tracer_in ? nullptr : std::make_unique<Tracer>("")),
        tracer(tracer_in ? *tracer_in : *own_tracer) {
    DeviceOptions o;
    o.kind = "host";
    o.memory_bytes = config.strata.device_memory_bytes;
    o.tracer = &tracer;
    device = Device::create(o);
    CommOptions co;
    co.backend = CommBackend::single;
    comm = create_communicator(*device, co);
    compute = device->create_stream("compute");
    tiers = std::make_unique<HostTiers>(config, *device);
    EngineSetup setup;
    for (int m = 0; m < kModules; ++m) {
      setup.module_numels.push_back(module_numel(m));
      setup.module_names.push_back("m" + std::to_string(m));
    }
    engine = std::make_unique<ZeroEngine>(config, setup, *device, *compute, *comm, *tiers, tracer);
    done = device->create_event();
    for (int m = 0; m < kModules; ++m) {
      std::vector<float> v(module_numel(m));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i * 7 + m) % 101) - 0.5f;
      engine->load_module(m, v.data());
    }
  }

  // host_sync: the fake model waits for each module's compute before it acquires the next one
  // (as a model with host-side control flow would), so only a fetch issued ahead by the engine
  // can overlap with compute.
  void step(int compute_ms, bool host_sync = false) {
    engine->begin_step(1e-2);
    for (int m = 0; m < kModules; ++m) {
      ModuleView v = engine->acquire(m);
      if (v.ready) compute->wait(*v.ready);
      const float* p = static_cast<const float*>(v.data);
      const std::size_t n = v.numel;
      compute->host_task(
          [p, n, compute_ms, this] {
            std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
            double s = 0;
            for (std::size_t i = 0; i < n; ++i) s += p[i];
            sink += s;
          },
          kComputeNames[m]);
      done->record(*compute);
      engine->release(m, *done);
      if (host_sync) compute->synchronize();
    }
    for (int m = kModules - 1; m >= 0; --m) {
      ModuleView v = engine->acquire(m);
      if (v.ready) compute->wait(*v.ready);
      ModuleView g = engine->acquire_grads(m);
      const float* p = static_cast<const float*>(v.data);
      float* gp = static_cast<float*>(g.data);
      const std::size_t n = v.numel;
      compute->host_task(
          [p, gp, n] {
            for (std::size_t i = 0; i < n; ++i) gp[i] += 0.1f * p[i] + 0.001f * static_cast<float>(i % 13);
          },
          "backward");
      done->record(*compute);
      engine->release(m, *done);
      engine->grads_ready(m, *done);
    }
    engine->step();
  }

  std::vector<std::vector<float>> weights() {
    std::vector<std::vector<float>> w;
    for (int m = 0; m < kModules; ++m) {
      w.emplace_back(module_numel(m));
      engine->gather_module(m, w.back().data());
    }
    return w;
  }

  Config config;
  std::unique_ptr<Tracer> own_tracer;
  Tracer& tracer;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Stream> compute;
  std::unique_ptr<HostTiers> tiers;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<Event> done;
  double sink = 0;
};

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t m = 0; m < a.size(); ++m) {
    if (a[m].size() != b[m].size() || std::memcmp(a[m].data(), b[m].data(), a[m].size() * 4) != 0) return false;
  }
  return true;
}

}  // namespace

TEST(ZeroEngine, PlacementNeverChangesTheBits) {
  struct Case {
    int stage;
    OffloadDevice params, optimizer;
  };
  const Case cases[] = {
      {3, OffloadDevice::kNone, OffloadDevice::kNone}, {3, OffloadDevice::kCpu, OffloadDevice::kCpu},
      {3, OffloadDevice::kNvme, OffloadDevice::kNvme}, {3, OffloadDevice::kCpu, OffloadDevice::kNvme},
      {2, OffloadDevice::kNone, OffloadDevice::kCpu},  {1, OffloadDevice::kNone, OffloadDevice::kNvme},
  };
  for (double clipping : {1.0, 0.0}) {
    TempDir dir;
    std::vector<std::vector<float>> reference;
    for (const Case& c : cases) {
      EngineRun run(make_config(c.stage, c.params, c.optimizer, dir.path(), clipping));
      for (int s = 0; s < 3; ++s) run.step(0);
      std::vector<std::vector<float>> w = run.weights();
      if (reference.empty()) {
        reference = w;
        // The steps changed something.
        std::vector<float> initial(module_numel(0));
        for (std::size_t i = 0; i < initial.size(); ++i) initial[i] = 0.01f * static_cast<float>((i * 7) % 101) - 0.5f;
        EXPECT_NE(std::memcmp(initial.data(), w[0].data(), initial.size() * 4), 0);
      } else {
        EXPECT_TRUE(same_bits(reference, w)) << "clipping " << clipping << ", stage " << c.stage << " params "
                                             << to_string(c.params) << " optimizer " << to_string(c.optimizer);
      }
    }
  }
}

// With compute slowed down, the fetch of module i+1 (its NVMe read, then its H2D) runs while
// module i computes, and has finished by the time module i's compute ends: module i+1's
// compute never waits for it. Asserted from the spans of step 2 (step 1 records the order).
// The model waits for each module's compute before acquiring the next, so without prefetching
// every fetch would start after the previous module's compute.
TEST(ZeroEngine, PrefetchOverlapsTheNextFetchWithCompute) {
  for (OffloadDevice params : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    TempDir dir;
    const std::string trace_path = dir.path() + "/trace.json";
    Tracer tracer(trace_path);
    {
      EngineRun run(make_config(3, params, OffloadDevice::kCpu, dir.path()), &tracer);
      run.step(0);
      const std::int64_t step2_start = Tracer::now_ns();
      run.step(40, /*host_sync=*/true);
      EXPECT_GT(run.engine->counters().prefetched, 0u);
      tracer.flush();
      (void)step2_start;
    }
    std::ifstream f(trace_path);
    const nlohmann::json trace = nlohmann::json::parse(f);
    // Track ids by name.
    std::map<int, std::string> tracks;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
    }
    struct Span {
      double start, end;
    };
    std::vector<std::vector<Span>> compute(kModules), h2d(kModules);
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const std::string& track = tracks[e["tid"].get<int>()];
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      if (track == "compute") {
        for (int m = 0; m < kModules; ++m)
          if (e["name"] == kComputeNames[m]) compute[m].push_back({ts, ts + dur});
      } else if (track == "h2d" && e.contains("args")) {
        const std::uint64_t bytes = e["args"]["bytes"].get<std::uint64_t>();
        for (int m = 0; m < kModules; ++m) {
          // A shard copy: the module's elements padded to 64 (fp32, one rank).
          if (bytes == (module_numel(m) + 63) / 64 * 64 * 4) h2d[m].push_back({ts, ts + dur});
        }
      }
    }
    for (int m = 0; m < kModules; ++m) {
      ASSERT_EQ(compute[m].size(), 2u) << "module " << m;  // one forward compute per step
    }
    // Step 2's forward: module i+1's H2D of that step is the last one that starts before its
    // compute.
    for (int i = 0; i + 1 < kModules; ++i) {
      const Span& ci = compute[i][1];
      const Span& next = compute[i + 1][1];
      const Span* fetch = nullptr;
      for (const Span& h : h2d[i + 1])
        if (h.start <= next.start && (fetch == nullptr || h.start > fetch->start)) fetch = &h;
      ASSERT_NE(fetch, nullptr) << "no H2D of module " << i + 1 << " before its compute";
      EXPECT_LT(fetch->start, ci.end) << "the fetch of module " << i + 1 << " started after module " << i
                                      << " finished computing (params " << to_string(params) << ")";
      EXPECT_LE(fetch->end, ci.end) << "module " << i + 1 << "'s compute had to wait for its fetch (params "
                                    << to_string(params) << ")";
    }
  }
}

TEST(ZeroPlan, ABudgetBelowTheMinimumFailsWithTheTable) {
  Config c = make_config(3, OffloadDevice::kCpu, OffloadDevice::kCpu, "");
  PlanInputs in;
  in.module_numels = {1'000'000, 2'000'000, 2'000'000};
  in.module_names = {"embedding", "h.0", "h.1"};
  in.activation_bytes = 4 * kMiB;
  in.device_budget_bytes = 8 * kMiB;
  in.pinned_budget_bytes = 1 * kGiB;
  try {
    make_plan(c, in);
    FAIL() << "a plan needing more than the budget was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needed"), std::string::npos) << what;
    EXPECT_NE(what.find("available"), std::string::npos) << what;
    EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
    EXPECT_NE(what.find("strata.device_memory"), std::string::npos) << what;
  }
  in.device_budget_bytes = 64 * kMiB;
  const ZeroPlan plan = make_plan(c, in);
  EXPECT_LE(plan.needed(Tier::device), in.device_budget_bytes);
  EXPECT_FALSE(plan.modules[1].resident);
  EXPECT_EQ(plan.modules[1].param_tier, Tier::pinned);
  EXPECT_EQ(plan.modules[1].optimizer_tier, Tier::pinned);
}

TEST(ZeroPlan, AShardLargerThanTheNvmeStagingBufferIsRefused) {
  Config c = make_config(3, OffloadDevice::kNvme, OffloadDevice::kNvme, "/tmp");
  c.zero_optimization.offload_param.buffer_size = 1000;
  PlanInputs in;
  in.module_numels = {4000, 500};
  in.module_names = {"a", "b"};
  in.device_budget_bytes = 64 * kMiB;
  in.pinned_budget_bytes = 64 * kMiB;
  in.nvme_free_bytes = 1 * kGiB;
  try {
    make_plan(c, in);
    FAIL() << "a 4000-element shard was accepted with 1000-element staging buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "zero_optimization.offload_param.buffer_size");
  }
  c.zero_optimization.offload_param.buffer_size = 4096;
  EXPECT_NO_THROW(make_plan(c, in));
}

TEST(ZeroPlan, OptimizerRatioOffloadsWholeModulesFromTheFirst) {
  Config c = make_config(3, OffloadDevice::kNone, OffloadDevice::kCpu, "");
  c.zero_optimization.offload_optimizer.ratio = 0.5;
  PlanInputs in;
  in.module_numels = {1000, 1000, 1000, 1000};
  in.module_names = {"a", "b", "c", "d"};
  in.device_budget_bytes = 64 * kMiB;
  in.pinned_budget_bytes = 64 * kMiB;
  const ZeroPlan plan = make_plan(c, in);
  EXPECT_EQ(plan.modules[0].optimizer_tier, Tier::pinned);
  EXPECT_EQ(plan.modules[1].optimizer_tier, Tier::pinned);
  EXPECT_EQ(plan.modules[2].optimizer_tier, Tier::device);
  EXPECT_EQ(plan.modules[3].optimizer_tier, Tier::device);
}

TEST(FetchTrace, RecordsFollowsAndRecordsAgainAfterADivergence) {
  FetchTrace t;
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

TEST(DevicePool, ABufferReturnsOnlyAfterItsStreamsWork) {
  DeviceOptions o;
  o.kind = "host";
  o.memory_bytes = 4 * kMiB;
  std::unique_ptr<Device> device = Device::create(o);
  std::unique_ptr<Stream> s = device->create_stream("s");
  DevicePool pool(*device, 2 * kMiB, "test region");
  DeviceBuffer a = pool.allocate(1536 * kKiB, "a");
  std::atomic<bool> release{false};
  s->host_task([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  pool.free_after(std::move(a), *s);
  // The stream still "uses" it: no room without waiting.
  EXPECT_TRUE(pool.try_allocate(1536 * kKiB, "b").empty());
  release = true;
  DeviceBuffer b = pool.allocate(1536 * kKiB, "b");  // waits for the stream, then reuses
  EXPECT_FALSE(b.empty());
  EXPECT_THROW(pool.allocate(1536 * kKiB, "c"), OutOfMemory);
}

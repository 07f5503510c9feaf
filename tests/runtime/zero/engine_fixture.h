#pragma once
// The ZeRO engine driven by a fake model on the host backend, for the engine's tests and the
// checkpoint tests: a temp folder, a config per placement, and EngineRun (device, single-rank
// communicator, tiers, engine and a fake model that reads every module in forward and writes a
// gradient derived from the parameters in backward).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine.h"

namespace strata::runtime::engine_test {

namespace fs = std::filesystem;


constexpr int kModules = 6;
// Distinct sizes, so that a copy's byte count names its module in the trace.
inline std::size_t module_numel(int m) { return 40'000 + static_cast<std::size_t>(m) * 1'024; }
inline const char* const kComputeNames[kModules] = {"compute 0", "compute 1", "compute 2",
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

inline config::Config make_config(int stage, config::OffloadDevice params, config::OffloadDevice optimizer,
                                  const std::string& nvme, double clipping = 1.0) {
  config::Config c;
  c.train_micro_batch_size_per_gpu = std::uint64_t{1};
  // With clipping the updates are posted after the global norm; without, each as soon as its
  // module's gradient is final (engine.h).
  c.gradient_clipping = clipping;
  c.optimizer = config::OptimizerConfig{};
  c.optimizer->weight_decay = 0.01;
  c.zero_optimization.stage = stage;
  c.zero_optimization.offload_param.device = params;
  c.zero_optimization.offload_optimizer.device = optimizer;
  if (params == config::OffloadDevice::kNvme) c.zero_optimization.offload_param.nvme_path = {nvme};
  if (optimizer == config::OffloadDevice::kNvme) c.zero_optimization.offload_optimizer.nvme_path = {nvme};
  c.zero_optimization.stage3_param_persistence_threshold = std::uint64_t{0};
  c.zero_optimization.stage3_prefetch_bucket_size = std::uint64_t{1'000'000};
  c.zero_optimization.sub_group_size = 20'000;
  c.aio.block_size = 65'536;
  c.strata.device = config::DeviceKind::kHost;
  c.strata.device_memory_bytes = 64 * kMiB;
  config::ResolveInputs in;
  in.host_memory_bytes = 8 * kGiB;
  in.cpu_count = 2;
  return resolve_config(c, in);
}

// A run of the engine with a fake model: forward reads each module on the compute stream
// (sleeping `compute_ms` to stand for the work), backward writes a gradient derived from the
// parameters. Owns everything a run needs.
struct EngineRun {
  // link_bytes_per_s: the host device's emulated PCIe (DeviceOptions::host_link_bytes_per_s).
  // numel_scale: every module is module_numel(m) * numel_scale elements.
  // io_hook: the tier I/O engine's completion hook (fault injection, offload/aio_engine.h).
  // copy_hook: the host device's (DeviceOptions::host_copy_hook): a test may hold copies open.
  EngineRun(const config::Config& config_in, trace::Tracer* tracer_in = nullptr, std::uint64_t link_bytes_per_s = 0,
            std::size_t numel_scale = 1, offload::CompletionHook io_hook = {},
            std::function<void(const std::string& stream, std::size_t bytes)> copy_hook = {})
      : config(config_in), own_tracer(tracer_in ? nullptr : std::make_unique<trace::Tracer>("")),
        tracer(tracer_in ? *tracer_in : *own_tracer), scale(numel_scale) {
    device::DeviceOptions o;
    o.kind = "host";
    o.memory_bytes = config.strata.device_memory_bytes;
    o.tracer = &tracer;
    o.host_link_bytes_per_s = link_bytes_per_s;
    o.host_copy_hook = std::move(copy_hook);
    device = device::Device::create(o);
    comm::CommOptions co;
    co.backend = comm::CommBackend::single;
    comm = create_communicator(*device, co);
    compute = device->create_stream("compute");
    zero::EngineSetup setup;
    for (int m = 0; m < kModules; ++m) {
      setup.module_numels.push_back(numel(m));
      setup.module_names.push_back("m" + std::to_string(m));
    }
    setup.io_completion_hook = std::move(io_hook);
    engine = std::make_unique<zero::ZeroEngine>(config, setup, *device, *compute, *comm, tracer);
    done = device->create_event();
    for (int m = 0; m < kModules; ++m) {
      std::vector<float> v(numel(m));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i * 7 + m) % 101) - 0.5f;
      engine->load_module(m, v.data());
    }
  }

  // One step of gradient_accumulation_steps micro-batches (each the same forward and backward:
  // the parameters do not change within a step).
  // host_sync: the fake model waits for each module's compute before it acquires the next one
  // (as a model with host-side control flow would), so only a fetch issued ahead by the engine
  // can overlap with compute.
  void step(int compute_ms, bool host_sync = false) {
    engine->begin_step(1e-2);
    const auto gas = config.gradient_accumulation_steps.value_or(std::uint64_t{1}).value_or(1);
    for (std::uint64_t micro = 0; micro < gas; ++micro) micro_batch(compute_ms, host_sync);
    engine->step();
  }

  void micro_batch(int compute_ms, bool host_sync) {
    for (int m = 0; m < kModules; ++m) {
      params::ModuleView v = engine->acquire(m);
      if (v.ready) compute->wait(*v.ready);
      const float* p = static_cast<const float*>(v.data);
      const std::size_t n = v.numel;
      compute->host_task(
          [p, n, m, compute_ms, this] {
            if (on_forward_compute) on_forward_compute(m);
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
      params::ModuleView v = engine->acquire(m);
      if (v.ready) compute->wait(*v.ready);
      params::ModuleView g = engine->acquire_grads(m);
      const float* p = static_cast<const float*>(v.data);
      float* gp = static_cast<float*>(g.data);
      const std::size_t n = v.numel;
      const bool round = bf16_grads;
      compute->host_task(
          [p, gp, n, round] {
            for (std::size_t i = 0; i < n; ++i) {
              gp[i] += 0.1f * p[i] + 0.001f * static_cast<float>(i % 13);
              if (round) gp[i] = bf16_to_fp32(fp32_to_bf16(gp[i]));
            }
          },
          "backward");
      done->record(*compute);
      engine->release(m, *done);
      engine->grads_ready(m, *done);
    }
  }

  std::vector<std::vector<float>> weights() {
    std::vector<std::vector<float>> w;
    for (int m = 0; m < kModules; ++m) {
      w.emplace_back(numel(m));
      engine->gather_module(m, w.back().data());
    }
    return w;
  }

  std::size_t numel(int m) const { return module_numel(m) * scale; }

  config::Config config;
  std::unique_ptr<trace::Tracer> own_tracer;
  trace::Tracer& tracer;
  std::unique_ptr<device::Device> device;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<device::Stream> compute;
  std::unique_ptr<zero::ZeroEngine> engine;
  std::unique_ptr<device::Event> done;
  std::size_t scale = 1;
  bool bf16_grads = false;  // backward rounds each gradient to bf16 (stays fp32 in memory)
  // Tests: runs at the start of module m's forward compute, on the compute stream; it may block
  // (the compute lasts until it returns). Set it with the compute stream idle.
  std::function<void(int module)> on_forward_compute;
  double sink = 0;
};

inline bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t m = 0; m < a.size(); ++m) {
    if (a[m].size() != b[m].size() || std::memcmp(a[m].data(), b[m].data(), a[m].size() * 4) != 0) return false;
  }
  return true;
}

}  // namespace strata::runtime::engine_test

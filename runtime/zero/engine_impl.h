#pragma once
// ZeroEngine's state, shared by its implementation files:
//   engine.cpp        construction (plan, allocation), load / gather, counters
//   engine_fetch.cpp  acquire / release and the prefetch scheduler
//   engine_grads.cpp  acquire_grads / grads_ready: reduction and fp32 accumulation
//   engine_step.cpp   the optimizer step: norm, clipping, overflow, Adam per tier, write-back
//   engine_checkpoint.cpp  optimizer states in and out for checkpoints
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "cpu_adam/adam.h"
#include "runtime/zero/device_pool.h"
#include "runtime/zero/engine.h"
#include "runtime/zero/fetch_trace.h"
#include "runtime/zero/loss_scaler.h"
#include "runtime/zero/update_worker.h"

namespace strata::runtime {

// A pinned buffer that streams read or write; reused only after `done` (recorded by its last
// user) has completed.
struct Staging {
  offload::HostBuffer buffer;
  std::unique_ptr<Event> done;  // stream work that uses the buffer
  offload::AioHandle io;        // an NVMe write from it
};

enum class FetchState {
  idle,      // nothing on the device
  reading,   // NVMe read in flight into staging[staging]
  gathered,  // gathered buffer allocated, H2D + all-gather enqueued (ready event recorded)
};

struct ModuleState {
  ModulePlan plan;
  std::string name;
  // Parameters.
  DeviceBuffer full;                 // resident: the full parameters (padded)
  DeviceBuffer shard_dev;            // not resident, device tier: this rank's shard
  offload::HostBuffer shard_pin;     // not resident, pinned tier
  offload::ExtentId shard_ext = 0;   // not resident, nvme tier
  FetchState fetch = FetchState::idle;
  int staging = -1;                  // index into Impl::param_staging while reading
  offload::AioHandle read;
  DeviceBuffer gathered;             // the gathered parameters while fetched
  std::unique_ptr<Event> ready;      // when `gathered` (or, resident, `full`) may be read
  int holders = 0;                   // acquires not yet released
  bool prefetched = false;           // fetched ahead and not acquired yet
  // Gradients.
  DeviceBuffer grad;                 // the step's device gradient buffer (compute dtype, padded)
  int grad_calls = 0;                // grads_ready calls this step (the last: gradient_accumulation_steps)
  std::unique_ptr<Event> grad_done;  // the fp32 accumulation of the step's last micro-batch
  // Updates (the optimizer worker). `updated` marks the end of the last update's device work
  // (H2D of new parameters, or the device optimizer); `stale`: a resident module updated since
  // its last all-gather (several ranks).
  std::unique_ptr<Event> updated;
  bool stale = false;
  // Optimizer states of this rank's shard (fp32).
  DeviceBuffer acc_dev, master_dev, exp_avg_dev, exp_avg_sq_dev;
  offload::HostBuffer acc_pin, master_pin, exp_avg_pin, exp_avg_sq_pin;
  offload::ExtentId master_ext = 0, exp_avg_ext = 0, exp_avg_sq_ext = 0;
};

struct ZeroEngine::Impl {
  Impl(const Config& config, const EngineSetup& setup, Device& device, Stream& compute,
       Communicator& comm, HostTiers& tiers, Tracer& tracer);

  // engine.cpp
  void allocate_states();
  std::size_t shard_bytes(const ModuleState& s) const { return s.plan.part.shard_numel * dtype_size(dtype); }
  std::size_t shard_offset_bytes(const ModuleState& s) const {
    return s.plan.part.shard_offset(shard_rank) * dtype_size(dtype);
  }
  void h2d(void* dst, const void* src, std::size_t bytes);  // enqueued on copy_in, counted
  void d2h(void* dst, const void* src, std::size_t bytes);  // enqueued on copy_out, counted
  void count_all_gather(std::size_t full_bytes);
  void count_reduce(std::size_t full_bytes, bool all_reduce);
  offload::SwapSpace& swap() const;
  Staging& take_staging(std::vector<Staging>& pool, int* next);
  void read_master(const ModuleState& s, float* out);  // this rank's fp32 master shard
  std::size_t tiers_chunk_numel() const;  // engine_checkpoint.cpp: state_chunk_numel()

  // engine_fetch.cpp
  void start_read(int module);            // NVMe: read the shard into a staging buffer
  bool gather(int module, bool on_demand); // H2D + all-gather into a new device buffer
  void prefetch(bool may_wait);           // runs fetches ahead along the trace
  bool keep_for_reuse(int module) const;
  void drop_gathered(int module);
  void drop_all_gathered();
  // Device memory for a gathered module or a gradient buffer, needed now: waits for buffers
  // whose work is finishing, then gives up modules kept for reuse or fetched ahead (the one
  // needed last first); throws OutOfMemory only when none is left.
  DeviceBuffer allocate_now(int size_class, std::size_t bytes, const std::string& what);
  bool evict_one(int size_class);
  void make_pools();

  // engine_grads.cpp
  void reduce_gradient(ModuleState& s);

  // engine_step.cpp
  StepOutcome step();
  cpu_adam::AdamHyper make_hyper(double lr) const;
  void norm_and_overflow(bool need_norm, bool need_finite, double* sq_norm, bool* overflow);
  // Posts module m's update to the worker (hyper-parameters, step and scale by value).
  void post_update(int module, const cpu_adam::AdamHyper& hyper, std::int64_t step, float grad_scale);
  void wait_update(int module);          // until module m's posted updates have finished
  bool update_pending(int module);
  void wait_all_updates();               // and rethrow the worker's error
  void update_module(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step, float grad_scale);
  void update_device_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step, float grad_scale);
  void update_pinned_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step, float grad_scale);
  void update_nvme_tier(ModuleState& s, const cpu_adam::AdamHyper& hyper, std::int64_t step, float grad_scale);
  // Writes updated parameters [offset, offset + n) of s's shard to where they live, from a
  // host Adam run: returns the buffer the Adam step should write them to (params_out) and
  // delivers them afterwards in deliver_params().
  void* params_out_for(ModuleState& s, std::size_t offset, Staging** staging);
  void deliver_params(ModuleState& s, std::size_t offset, std::size_t n, const float* master,
                      Staging* staging);

  const Config& config;
  DType dtype;
  Device& device;
  Stream& compute;
  Communicator& comm;
  HostTiers& tiers;
  Tracer& tracer;
  int world = 1;
  int rank = 0;
  int shard_rank = 0;  // rank within the shards (0 at stage 0)
  int threads = 1;
  PlanInputs plan_inputs;
  ZeroPlan plan;
  std::vector<ModuleState> modules;

  std::unique_ptr<Stream> copy_in;   // H2D (and D2D into gathered buffers)
  std::unique_ptr<Stream> copy_out;  // D2H of gradient shards
  std::unique_ptr<Stream> comm_stream;
  std::unique_ptr<Stream> accum;     // fp32 accumulation of host gradient shards
  std::unique_ptr<Stream> optim;     // device-resident optimizer work
  std::unique_ptr<Event> copy_in_done, copy_out_done, comm_done;
  std::unique_ptr<DevicePool> pools[2];  // transient buffers, per size class (plan.h)
  DevicePool& pool_of(const ModuleState& s) { return *pools[s.plan.size_class]; }

  std::vector<Staging> param_staging;  // NVMe parameter reads
  std::vector<bool> param_staging_busy;
  std::vector<Staging> grad_staging;   // gradient D2H
  int grad_staging_next = 0;
  std::vector<Staging> out_staging;    // updated parameters on their way to their tier
  int out_staging_next = 0;
  // NVMe optimizer: a ring of swap sets (master, exp_avg, exp_avg_sq of one sub-group each).
  struct SwapSet {
    offload::HostBuffer master, exp_avg, exp_avg_sq;
    offload::AioHandle reads[3], writes[3];
  };
  std::vector<SwapSet> swap_sets;

  FetchTrace trace;
  std::uint64_t live_numel = 0;        // elements in gathered buffers
  std::uint64_t prefetch_numel = 0;    // of which fetched ahead and not acquired yet
  std::uint64_t prefetch_bucket = 0;
  std::uint64_t max_live = 0;
  std::uint64_t max_reuse_distance = 0;
  std::size_t reduce_bucket = 0;      // elements per gradient collective

  LossScaler scaler;
  int gas = 1;
  std::int64_t adam_steps = 0;
  // Without clipping and fp16 a module's update is posted as soon as its gradient is final;
  // with them, after the global norm / overflow check in step().
  bool global_before_update = false;
  cpu_adam::AdamHyper step_hyper;  // of the step begun last
  std::mutex update_mutex;
  std::condition_variable update_cv;
  std::vector<std::uint64_t> updates_posted, updates_done;
  std::mutex counters_mutex;       // h2d() runs on the trainer and on the worker
  EngineCounters counters;
  std::uint64_t io_read_base = 0, io_write_base = 0;
  UpdateWorker worker;  // last: stops (after its queue) before the states it uses go away
};

}  // namespace strata::runtime

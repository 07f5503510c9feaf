#pragma once
// The ZeRO engine: a ParamProvider (runtime/params/param_provider.h) that keeps every model
// state in the tier the plan names, fetches parameters ahead of the model, reduces and
// offloads gradients while backward continues, and runs the optimizer on each rank's shard.
// This class is the facade the model and the trainer see; the work is done by its parts:
//
//   runtime/tiers/tier_store.h   where each state lives (the plan) and the operations on it
//   param_fetcher.h              acquire / release, prefetch along the trace, transient memory
//   grad_path.h                  reduce, D2H, fp32 accumulation; the global norm / overflow
//   updater.h (+ swap_ring.h)    Adam over the windows of each module on the optimizer worker
//     param_writer.h             its new parameters into their tier (NVMe writes behind)
//     speculation.h              its updates before the global norm (with clipping)
//   update_gate.h                which module's update is pending, and its `updated` event
//
// Per step, driven by one thread (the trainer):
//   begin_step(lr)                     this step's learning rate; start the fetch trace
//   for each micro-batch: model.forward(...) and model.backward(backward_loss_scale())
//                                      acquire / release / acquire_grads / grads_ready come here
//   step()                             the end of the step's gradients
//
// Updates run on the optimizer worker, overlapped with compute: without gradient clipping and
// fp16, module m's Adam update is posted as soon as its last gradient of the step lands; with
// them, step() waits for every gradient, computes the global norm and the overflow check, and
// posts the updates in the order the next forward needs the modules. The next acquire of
// module m (and its accumulation of new gradients) waits only for module m's update. The math
// is the same as a step-then-forward schedule.
//
// The model's backward scales the loss by loss_scale / (gradient_accumulation_steps * world), so
// the accumulated gradient is the mean over all micro-batches of all ranks, times loss_scale.
//
// Invariant (tested): on the host backend, the same run with the states on the device, pinned
// host or NVMe gives bitwise-identical parameters (the same CPU Adam, the same fp32 accumulation
// and reductions in a fixed order).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu_adam/adam.h"
#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"
#include "runtime/zero/loss_scaler.h"
#include "runtime/tiers/plan.h"
#include "runtime/tiers/tier.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine_setup.h"
#include "runtime/zero/expert_union.h"

namespace strata::runtime::zero {

struct StepOutcome {
  bool skipped = false;     // fp16 overflow: no update
  double grad_norm = -1;    // of the unscaled mean gradient; -1 when not needed (no clipping, no fp16)
  float loss_scale = 1.0f;  // the scale the step's backward used
};

class ZeroEngine final : public params::ParamProvider {
 public:
  // config: resolved, with concrete optimizer values. Makes the tier store (the host tiers, the
  // plan — throws strata::Error with the per-tier table when it does not fit — and every state
  // it places). Borrowed references must outlive the engine. `tracer` may be disabled.
  ZeroEngine(const config::Config& config, const EngineSetup& setup, device::Device& device, device::Stream& compute,
             comm::Communicator& comm, trace::Tracer& tracer);
  ~ZeroEngine() override;
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  const tiers::ZeroPlan& plan() const;
  const tiers::PlanInputs& plan_inputs() const;
  // Where every state lives, and the host tiers (pinned pool, I/O engine, swap space) behind them.
  tiers::TierStore& tiers() const;

  // Initial values of module m: its full fp32 values (numel, host memory). Every rank passes the
  // same values and keeps its shard: fp32 master, zero moments, parameters in the compute dtype.
  void load_module(int module, const float* values);
  // The current fp32 master weights of module m, all shards (numel, host memory). Collective:
  // every rank calls it for the same modules in the same order.
  void gather_module(int module, float* out);

  // The scale the model's backward multiplies d(loss)/d(logits) by.
  float backward_loss_scale() const;
  void begin_step(double lr);
  // After the last micro-batch's backward. With clipping or fp16 it waits for the gradients
  // and returns the norm / the skip decision; otherwise it returns at once (the updates are
  // already under way). Rethrows a failure of an earlier update.
  StepOutcome step();
  // Waits until every posted update has finished (and rethrows a failure).
  void finish_updates();

  // ---- Checkpoints (runtime/checkpoint/) -------------------------------------------------------
  // This rank's optimizer states are read and written in chunks of shard elements: `offset` is
  // a multiple of state_chunk_numel() (NVMe blocks stay aligned), n at most that, `buf` host
  // memory aligned for O_DIRECT (a HostBuffer). Synchronous. Call them from a task of
  // run_after_updates(), or on the trainer thread between steps with the updates finished.
  int shards() const;       // shard files of a checkpoint: the ranks, or 1 at stage 0
  int shard_index() const;  // this rank's shard (0 at stage 0)
  std::size_t shard_numel(int module) const;
  const std::string& module_name(int module) const;
  std::size_t state_chunk_numel() const;
  void read_state(int module, tiers::OptimState state, std::size_t offset, std::size_t n, float* buf);
  // Writing the master also writes the parameters made from it, as an update does.
  void write_state(int module, tiers::OptimState state, std::size_t offset, std::size_t n, const float* buf);
  // Runs `task` on the optimizer worker after the updates posted so far and before any posted
  // later, so that a checkpoint reads each module's states after its last update and before
  // the next step's. `done` runs after it (also when it is skipped after an earlier failure).
  void run_after_updates(std::function<void()> task, std::function<void()> done);
  // The step counters and loss scaler; restored on resume before the first step.
  struct TrainState {
    std::int64_t adam_steps = 0;  // Adam updates applied (the bias-correction step)
    std::string loss_scaler;      // LossScaler::save_state()
  };
  TrainState train_state() const;
  void restore_train_state(const TrainState& state);

  EngineCounters counters() const;
  // The device arena's use with the engine's transient regions counted by what is carved from
  // them (the regions are reserved whole at start). The peak adds the regions' own peaks to the
  // rest's: an upper bound.
  device::ArenaStats device_memory() const;

  // ParamProvider.
  int module_count() const override;
  std::size_t module_numel(int module) const override;
  params::ModuleView acquire(int module) override;
  void release(int module, const device::Event& done) override;
  params::ModuleView acquire_grads(int module) override;
  void grads_ready(int module, const device::Event& done) override;
  // No gradient buffer, no copy: the accumulator is left as it is (zeroed at a step's first
  // micro-batch). With several ranks the module's collective still runs, on a zero buffer.
  void grads_none(int module, const device::Event& done) override;
  void prefetch(int module) override;
  void cancel_prefetch(int module) override;
  bool resident(int module) const override;  // the plan keeps it on the device
  params::ModuleView resident_view(int module) override;
  // Several shards: the union over the ranks (a max all-reduce on the comm stream, waited for).
  void picked_on_any_rank(std::vector<std::uint8_t>& picked) override;

  struct Parts;  // engine.cpp: the streams, the tier store and the parts below

 private:
  cpu_adam::AdamHyper make_hyper(double lr) const;
  // Module m's gradient is final for the step: its update is posted (or speculated).
  void gradient_final(int module);
  void post_update(int module, float grad_scale);

  const config::Config& config_;
  device::Device& device_;
  int world_ = 1;
  int gas_ = 1;
  // Without clipping and fp16 a module's update is posted as soon as its gradient is final;
  // with them, after the global norm / overflow check in step().
  bool global_before_update_ = false;
  // With clipping and no fp16: pinned-tier modules update as their gradients land, and step()
  // commits or redoes them (Note [Speculative updates] in speculation.h).
  bool speculate_ = false;
  std::uint64_t step_id_ = 0;            // begin_step() calls
  bool last_step_clipped_ = false;       // then this step does not speculate: it would be redone
  std::vector<char> speculated_;         // this step, per module
  std::uint64_t speculative_updates_ = 0, speculative_redone_ = 0;
  LossScaler scaler_;
  std::int64_t adam_steps_ = 0;
  cpu_adam::AdamHyper step_hyper_;  // of the step begun last
  std::uint64_t skipped_steps_ = 0;
  std::uint64_t io_read_base_ = 0, io_write_base_ = 0;
  ExpertUnion expert_union_;  // picked_on_any_rank's
  std::unique_ptr<Parts> parts_;
};

}  // namespace strata::runtime::zero

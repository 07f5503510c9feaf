#pragma once
// The updater: Adam on this rank's shard of each module, on the optimizer worker (one thread,
// host_worker.h), overlapped with backward and the next step's forward.
//
// One update loop for every tier: wait for the module's last gradient accumulation; then, over
// the module's windows (an NVMe sub-group of the swap ring, or a window of the pinned states;
// the device tier is one window updated by ops::adam_step on the optimizer stream), Adam writes
// the new master and moments in place and the new parameters in the compute dtype either
// straight into a pinned parameter shard or into a pinned staging buffer that goes on to the
// device (H2D) or to NVMe; then the accumulator is zeroed and the gate's `updated` event is
// recorded after the module's device work.
//
// post() queues module m's update (its hyper-parameters, Adam step and gradient scale by value);
// run_after() queues any task behind the updates posted so far (checkpoints). Both run in
// posting order.
//
// The updater composes two parts, each with its own Note: the parameter writer
// (param_writer.h, Note [Parameter writes behind]: where Adam writes the new parameters and how
// they reach their tier, NVMe writes going on behind the next modules' updates) and the speculation
// (speculation.h, Note [Speculative updates]: updates before the global norm is known, out of
// place, kept or redone once it is).
//
// Threads: post*(), run_after(), cancel_speculation(), drain() and check() are called by the
// trainer thread; flush_swaps() by the trainer with the worker idle, or from a task on the
// worker. The tasks (update(), commit()) run on the optimizer worker. Each member below says who
// writes it.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_adam/adam.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/grad_path.h"
#include "runtime/zero/swap_ring.h"
#include "runtime/zero/host_worker.h"
#include "runtime/zero/param_writer.h"
#include "runtime/zero/speculation.h"
#include "runtime/zero/update_gate.h"
#include "runtime/trace/trace.h"

namespace strata::runtime::zero {


struct UpdateArgs {
  cpu_adam::AdamHyper hyper;
  std::int64_t step = 0;   // Adam's step (bias correction)
  float grad_scale = 1.0f; // clip / loss_scale
};

class Updater {
 public:
  // Borrowed references outlive the updater.
  Updater(const config::Config& config, tiers::TierStore& store, device::Device& device, EngineStreams& streams,
          UpdateGate& gate, GradPath& grads, trace::Tracer& tracer);
  ~Updater();  // finishes the queued work and the swap ring's I/O (the facade reports errors first)
  Updater(const Updater&) = delete;
  Updater& operator=(const Updater&) = delete;

  void post(int module, const UpdateArgs& args);
  // Speculation (Note [Speculative updates]); `step` numbers the engine's steps. Returns false,
  // posting nothing, when module m cannot speculate (states not in pinned memory, or its shadow
  // would pass the memory budget): it is then updated after the norm with post().
  bool post_speculative(int module, const UpdateArgs& args, std::uint64_t step);
  void post_commit(int module);
  // Skips the speculative updates of steps <= `step` that have not started, then redoes m.
  void cancel_speculation(std::uint64_t step) { speculation_.cancel_through(step); }
  void post_redo(int module, const UpdateArgs& args);
  void run_after(std::function<void()> task, std::function<void()> done);
  // Waits until every posted task and its parameter writes have finished; rethrows the first
  // error (an update's, then a write's).
  void drain();
  // Rethrows the first error of an update or of a parameter write, without waiting.
  void check();
  // Every NVMe optimizer state and parameter write on disk and no read ahead pending: call with
  // the worker idle or from a task on it, before reading or writing those states elsewhere.
  // Rethrows a failed parameter write.
  void flush_swaps();

 private:
  enum class Mode { in_place, speculative, redo };
  void queue(int module, std::function<void()> task);
  void update(int module, const UpdateArgs& args, Mode mode = Mode::in_place);
  void update_on_device(int module, const UpdateArgs& args);
  int upcoming(std::size_t k);

  // Set at construction, then read-only.
  tiers::TierStore& store_;
  EngineStreams& streams_;
  UpdateGate& gate_;
  GradPath& grads_;
  trace::Tracer& tracer_;
  DType dtype_;
  int threads_ = 1;
  std::vector<std::string> adam_span_names_;  // "adam <module>", per module
  // The worker's (and flush_swaps()'s, with the worker idle or on it).
  SwapRing ring_;
  ParamWriter writer_;       // its members' threads: param_writer.h
  Speculation speculation_;  // its members' threads: speculation.h
  // Pushed by the trainer (queue(), run_after()), popped on the worker as a task ends, read by
  // the worker (upcoming()): under queue_mutex_.
  std::mutex queue_mutex_;
  std::deque<int> queued_;  // modules of the posted tasks not finished, in order; -1: another task
  HostWorker worker_;  // last: stops (after its queue) before the states it uses go away
};

}  // namespace strata::runtime::zero

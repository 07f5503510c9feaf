#pragma once
// The updater: Adam on this rank's shard of each module, on the optimizer worker (one thread,
// update_worker.h), overlapped with backward and the next step's forward.
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
// Note [Speculative updates]. With gradient clipping the updates need the global norm, so they
// would all wait for the end of backward, and the next forward for them. Instead, a module
// whose optimizer states are in pinned memory is updated as soon as its gradient is final
// (post_speculative), as if the norm were under the threshold (clip coefficient 1), out of
// place: Adam reads the current master, exp_avg and exp_avg_sq and writes a second set (the
// module's shadow, pageable host memory under strata.speculative_update_memory), and the new
// parameters go to their tier as usual. Once the norm is known, each speculated module gets a
// commit (the norm was under the threshold: swap the shadow in, nothing is recomputed) or a
// redo (it was over: the same out-of-place update again from the untouched current states
// with the true clip coefficient, then the swap; speculative updates not yet started are
// skipped). Either way the states and parameters are bitwise those of the update after the
// norm: the same CPU Adam on the same inputs with the same scale. The next step's fetch of the
// module waits for its commit or redo through the gate, like any update. The engine does not
// speculate in a step after a clipped one (the work would most likely be redone).
#include <cstddef>
#include <atomic>
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
#include "runtime/zero/update_gate.h"
#include "runtime/zero/host_worker.h"
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
  void cancel_speculation(std::uint64_t step) { cancelled_through_ = step; }
  void post_redo(int module, const UpdateArgs& args);
  void run_after(std::function<void()> task, std::function<void()> done);
  // Waits until every posted task has finished; rethrows the first error.
  void drain() { worker_.drain(); }
  void check() { worker_.check(); }
  // Every NVMe optimizer state on disk and no read ahead pending: call with the worker idle or
  // from a task on it, before reading or writing those states elsewhere.
  void flush_swaps() { ring_.flush(); }

 private:
  struct Staging {
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> done;  // the H2D from it
    offload::AioHandle io;        // the NVMe write from it
  };
  enum class Mode { in_place, speculative, redo };
  struct Shadow {
    offload::HostBuffer master, exp_avg, exp_avg_sq;  // the other set of the module's states
  };
  void queue(int module, std::function<void()> task);
  void update(int module, const UpdateArgs& args, Mode mode = Mode::in_place);
  void commit(int module);
  void update_on_device(int module, const UpdateArgs& args);
  // Where Adam writes the new parameters of [offset, offset + n): the pinned shard itself, or a
  // staging buffer (returned in *staging) that deliver() sends on to the parameters' tier.
  void* params_out(int module, std::size_t offset, Staging** staging);
  void deliver(int module, std::size_t offset, std::size_t n, const float* master, Staging* staging);
  int upcoming(std::size_t k);

  tiers::TierStore& store_;
  EngineStreams& streams_;
  UpdateGate& gate_;
  GradPath& grads_;
  trace::Tracer& tracer_;
  DType dtype_;
  int threads_ = 1;
  std::vector<std::string> adam_span_names_;  // "adam <module>", per module
  std::vector<Staging> out_staging_;  // updated parameters on their way to their tier
  std::size_t out_next_ = 0;
  SwapRing ring_;
  std::vector<Shadow> shadows_;             // per module; empty until it first speculates (worker)
  std::vector<char> has_shadow_;            // per module: shadows_[m] allocated (trainer)
  std::uint64_t shadow_budget_bytes_ = 0;   // strata.speculative_update_memory
  std::uint64_t shadow_bytes_ = 0;          // allocated so far (trainer thread)
  std::atomic<std::uint64_t> cancelled_through_{0};
  std::mutex queue_mutex_;
  std::deque<int> queued_;  // modules of the posted tasks not finished, in order; -1: another task
  HostWorker worker_;     // last: stops (after its queue) before the states it uses go away
};

}  // namespace strata::runtime::zero

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
// Note [Parameter writes behind]. New parameters bound for NVMe leave through the pinned staging
// buffers (two, used in turn) as asynchronous writes, and the worker does not wait for them at
// the end of the module: it goes on to the next module's Adam while they run. Each write, as it
// is issued, is handed to the parameter write watcher (a HostWorker of the updater's own, like
// the fetcher's read watcher), the only thread that waits on their AIO handles: in issue order,
// it waits for the write, then raises its staging buffer's `written` count, which params_out
// waits on before reusing the buffer (also for a later window of the same module). When a task
// that wrote ends, the worker queues the gate's `finished` for its module on the watcher, behind
// those writes. So the gate opens module m (the next step's NVMe read of its parameters, the
// reuse of its gradient accumulator) only once its update AND its parameter writes are
// complete; a task that wrote nothing signals `finished` at once. A failed write is kept (the
// first one, naming its file) before the gate opens, and rethrown by check() and drain() (so by
// the next gate wait); the watcher still waits for every other write, so no buffer is reused
// under a write in flight. drain(), flush_swaps() and every run_after task start only once the
// watcher has no write left.
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
#include <exception>
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
  struct Staging {
    Staging(offload::HostBuffer b, std::unique_ptr<device::Event> e) : buffer(std::move(b)), done(std::move(e)) {}
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> done;  // the H2D from it
    std::uint64_t writes = 0;             // NVMe writes started from it (worker)
    std::atomic<std::uint64_t> written{0};  // of which finished, failed or not (write watcher)
  };
  // An NVMe write of new parameters, for the write watcher to wait for.
  struct PendingWrite {
    offload::AioHandle io;
    Staging* staging = nullptr;
    std::uint64_t count = 0;  // staging->writes once it was started
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
  // On the worker, once a task of `module` has ended (done or failed): the gate's `finished`,
  // at once or after the task's parameter writes (Note [Parameter writes behind]).
  void finish(int module);
  void wait_write(const PendingWrite& w);  // on the write watcher
  void wait_for_writes();  // every write posted to the watcher so far; rethrows a failed one
  void check_writes();
  int upcoming(std::size_t k);

  tiers::TierStore& store_;
  EngineStreams& streams_;
  UpdateGate& gate_;
  GradPath& grads_;
  trace::Tracer& tracer_;
  DType dtype_;
  int threads_ = 1;
  std::vector<std::string> adam_span_names_;  // "adam <module>", per module
  std::deque<Staging> out_staging_;  // updated parameters on their way to their tier
  std::size_t out_next_ = 0;
  bool task_wrote_ = false;  // the task running on the worker has handed writes to the watcher
  std::mutex write_error_mutex_;
  std::exception_ptr write_error_;  // the first failed parameter write (write watcher)
  SwapRing ring_;
  std::vector<Shadow> shadows_;             // per module; empty until it first speculates (worker)
  std::vector<char> has_shadow_;            // per module: shadows_[m] allocated (trainer)
  std::uint64_t shadow_budget_bytes_ = 0;   // strata.speculative_update_memory
  std::uint64_t shadow_bytes_ = 0;          // allocated so far (trainer thread)
  std::atomic<std::uint64_t> cancelled_through_{0};
  std::mutex queue_mutex_;
  std::deque<int> queued_;  // modules of the posted tasks not finished, in order; -1: another task
  HostWorker write_watcher_;  // waits for the parameter writes; stops after the worker, which posts to it
  HostWorker worker_;     // last: stops (after its queue) before the states it uses go away
};

}  // namespace strata::runtime::zero

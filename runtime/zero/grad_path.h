#pragma once
// The gradient path: acquire_grads hands the model a zeroed device buffer (compute dtype,
// padded); ready() reduces it over the ranks on the comm stream and accumulates this rank's
// shard into the module's accumulator (a state of the tier store: fp32, or bf16 / fp16 with
// data_types.grad_accum_dtype), on the device when the accumulator is there, else on the host
// after a D2H copy:
//
//   compute --done--> comm: reduce-scatter (stage >= 1) or all-reduce (stage 0), in place
//     accumulator on the device:  comm: acc += shard                   buffer freed after comm
//     accumulator in pinned host: d2h: shard -> pinned staging --> accumulator thread: acc += staging
//                                                                      buffer freed after d2h
//
// The host accumulation runs on a thread of strata's own (host_worker.h), never on a stream's
// host function (CUDA runs those of every stream on one thread and blocks the stream meanwhile):
// the thread waits for the D2H's event, adds, and frees the staging buffer. The first
// micro-batch of a step stores (acc = 0 + g) instead of adding, so the host accumulators are
// never zeroed: not after an update, not before a step. Device accumulators are zeroed by the
// update on the optimizer stream and accumulate on the comm stream.
//
// Collectives carry at most reduce_bucket_size elements (see reduce()). The global checks of a
// step (squared norm, overflow) read the accumulators here.
// Driven by the trainer thread; wait_grad_done() may be called from any thread.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/trace/trace.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/host_worker.h"
#include "runtime/zero/param_fetcher.h"
#include "runtime/zero/update_gate.h"

namespace strata::runtime::zero {

class GradPath {
 public:
  // Borrowed references outlive the path. The fetcher lends its transient device memory.
  GradPath(const config::Config& config, tiers::TierStore& store, device::Device& device, device::Stream& compute,
           EngineStreams& streams, comm::Communicator& comm, ParamFetcher& fetcher, UpdateGate& gate,
           trace::Tracer& tracer);
  ~GradPath();  // waits for the accumulations in flight (errors are dropped: drain() first)
  GradPath(const GradPath&) = delete;
  GradPath& operator=(const GradPath&) = delete;

  void begin_step();
  params::ModuleView acquire(int module);
  // The model's gradient of module m is in its buffer once `done` completes. Returns true when
  // this was the step's last micro-batch for m (its accumulation ends at grad_done(m)).
  bool ready(int module, const device::Event& done);
  // ready() for a micro-batch that added nothing to module m (ParamProvider::grads_none), without
  // a buffer or a copy when this is the only rank: a device accumulator stays as the update left
  // it (zero), a host one is zeroed by the accumulator thread at the step's first micro-batch.
  // With several ranks (another's tokens may reach the module) it is acquire() and ready().
  bool ready_none(int module, const device::Event& done);
  // Asserts that every module got gradient_accumulation_steps gradients and none is held.
  void check_step_complete() const;
  // Blocks until the step's last accumulation into module m's accumulator has finished (on the
  // device or on the accumulator thread); rethrows a failed accumulation. Any thread.
  void wait_grad_done(int module);
  // Every accumulation posted so far has finished; rethrows the first failure.
  void drain();

  // Global checks over this rank's accumulators, after every accumulation has finished:
  // sum of squares of grads * unscale (module order, so the same bits on every placement), and
  // whether all are finite; summed / or-ed over the ranks.
  void norm_and_overflow(bool need_norm, bool need_finite, float unscale, double* sq_norm, bool* overflow);
  // After a skipped step: the device accumulators start the next step from zero (the host ones
  // are overwritten by the next step's first micro-batch anyway).
  void zero_accumulators();
  std::uint64_t collective_bytes() const { return collective_bytes_; }

 private:
  struct Module {
    device::DeviceBuffer grad;             // the step's device gradient buffer (compute dtype, padded)
    int calls = 0;                 // ready() calls this step (the last: gradient_accumulation_steps)
    std::unique_ptr<device::Event> done;   // device accumulator: its accumulation of the step's last micro-batch
  };
  struct Staging {
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> copied;  // the D2H into it
    bool busy = false;                      // (mutex_) an accumulation has yet to read it
  };
  void reduce(int module);
  void accumulate_on_host(int module, const void* shard, bool first);
  void zero_on_host(int module);
  void count_reduce(std::size_t full_bytes, bool all_reduce);

  tiers::TierStore& store_;
  device::Device& device_;
  device::Stream& compute_;
  EngineStreams& streams_;
  comm::Communicator& comm_;
  ParamFetcher& fetcher_;
  UpdateGate& gate_;
  DType dtype_;
  DType grad_dtype_;  // the accumulators'
  int world_ = 1;
  int gas_ = 1;
  int threads_ = 1;
  std::size_t reduce_bucket_ = 0;  // elements per gradient collective
  std::vector<Module> modules_;
  trace::Tracer& tracer_;
  std::vector<Staging> staging_;   // gradient D2H, used in turn
  std::size_t staging_next_ = 0;
  std::unique_ptr<device::Event> comm_done_;
  std::unique_ptr<device::Event> zeroed_;  // ready_none with several ranks: after the zero fill
  std::uint64_t collective_bytes_ = 0;
  // Host accumulations per module: posted (trainer) and finished (accumulator thread).
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::uint64_t> host_posted_, host_done_;
  HostWorker accumulator_;  // last: stops (after its queue) before the buffers it uses go away
};

}  // namespace strata::runtime::zero

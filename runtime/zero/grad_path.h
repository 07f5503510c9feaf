#pragma once
// The gradient path: acquire_grads hands the model a zeroed device buffer (compute dtype,
// padded); ready() reduces it over the ranks on the comm stream and accumulates this rank's
// shard into the module's fp32 accumulator (a state of the tier store), on the device when the
// accumulator is there, else on the host after a D2H copy:
//
//   compute --done--> comm: reduce-scatter (stage >= 2) or all-reduce (stage 0-1), in place
//     accumulator on the device:  comm: acc += shard                   buffer freed after comm
//     accumulator in pinned host: d2h: shard -> pinned staging --> accum: acc += staging
//                                                                      buffer freed after d2h
//
// Collectives carry at most reduce_bucket_size elements (see reduce()). The global checks of a
// step (squared norm, overflow) and the zeroing after a skipped step read the accumulators here.
// Driven by the trainer thread; the accumulation runs on the accumulate stream.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/engine_streams.h"
#include "runtime/zero/param_fetcher.h"
#include "runtime/zero/update_gate.h"

namespace strata::runtime::zero {

class GradPath {
 public:
  // Borrowed references outlive the path. The fetcher lends its transient device memory.
  GradPath(const config::Config& config, tiers::TierStore& store, device::Device& device, device::Stream& compute,
           EngineStreams& streams, comm::Communicator& comm, ParamFetcher& fetcher, UpdateGate& gate);
  GradPath(const GradPath&) = delete;
  GradPath& operator=(const GradPath&) = delete;

  void begin_step();
  params::ModuleView acquire(int module);
  // The model's gradient of module m is in its buffer once `done` completes. Returns true when
  // this was the step's last micro-batch for m (its accumulation ends at grad_done(m)).
  bool ready(int module, const device::Event& done);
  // Asserts that every module got gradient_accumulation_steps gradients and none is held.
  void check_step_complete() const;
  const device::Event& grad_done(int module) const { return *modules_[static_cast<std::size_t>(module)].done; }

  // Global checks over this rank's accumulators, after every accumulation has finished:
  // sum of squares of grads * unscale (module order, so the same bits on every placement), and
  // whether all are finite; summed / or-ed over the ranks.
  void norm_and_overflow(bool need_norm, bool need_finite, float unscale, double* sq_norm, bool* overflow);
  // After a skipped step: the next step starts from zero gradients.
  void zero_accumulators();
  std::uint64_t collective_bytes() const { return collective_bytes_; }

 private:
  struct Module {
    device::DeviceBuffer grad;             // the step's device gradient buffer (compute dtype, padded)
    int calls = 0;                 // ready() calls this step (the last: gradient_accumulation_steps)
    std::unique_ptr<device::Event> done;   // the fp32 accumulation of the step's last micro-batch
  };
  struct Staging {
    offload::HostBuffer buffer;
    std::unique_ptr<device::Event> done;   // the accumulation that read it
  };
  void reduce(int module);
  void accumulate_on_host(int module, const void* shard);
  void count_reduce(std::size_t full_bytes, bool all_reduce);

  tiers::TierStore& store_;
  device::Device& device_;
  device::Stream& compute_;
  EngineStreams& streams_;
  comm::Communicator& comm_;
  ParamFetcher& fetcher_;
  UpdateGate& gate_;
  DType dtype_;
  int world_ = 1;
  int gas_ = 1;
  int threads_ = 1;
  std::size_t reduce_bucket_ = 0;  // elements per gradient collective
  std::vector<Module> modules_;
  std::vector<Staging> staging_;   // gradient D2H, used in turn
  std::size_t staging_next_ = 0;
  std::unique_ptr<device::Event> comm_done_, copy_out_done_;
  std::uint64_t collective_bytes_ = 0;
};

}  // namespace strata::runtime::zero

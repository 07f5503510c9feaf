#pragma once
// The tier store: every model state of this rank, in the tier the plan puts it, and the host
// tiers behind them.
//
// Made in this order, from the resolved config and the model's module sizes:
//  1. the host tiers: the pinned pool (pinned through the device's hook: cudaHostRegister on
//     CUDA, nothing on the host device), the I/O engine over it, and the swap space over the
//     NVMe folders the placement uses (plan.h: nvme_paths); each reports its usage to the
//     device, so an out-of-memory error lists every tier;
//  2. the plan (plan.h): the tier of every state, and whether they fit the budgets (the
//     per-tier table when they do not, before anything is allocated);
//  3. one TierState per module and state kind (tier_state.h): the parameter shard (or the full
//     parameters of a resident module), and with an optimizer the fp32 master, exp_avg,
//     exp_avg_sq and the gradient accumulator (fp32, or data_types.grad_accum_dtype).
// Nothing else in the engine decides or tests where a state lives beyond asking its TierState.
//
// Without an optimizer (inference) only the parameters are allocated. A quantized parameter
// shard (ModulePlan::quantized) is a state of bytes (elem_bytes 1, numel = shard_bytes): its
// packed values and scales (kernels/host/quantize.h).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/swap_space.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "runtime/tiers/tier.h"
#include "runtime/tiers/tier_state.h"

namespace strata::runtime::tiers {

struct StoreSetup {
  std::vector<std::size_t> module_numels;
  std::vector<std::string> module_names;
  std::vector<char> routed_modules;    // PlanInputs::routed_modules
  DType dtype = DType::f32;            // compute dtype of the parameters
  std::uint64_t activation_bytes = 0;  // the model's reserve() for the micro-batch (for the plan)
  std::uint64_t kv_cache_pinned_bytes = 0;  // inference: a KV cache allocated from pinned() (for the plan)
  std::string activation_flags;  // inference: what shrinks activation_bytes (PlanInputs)
  int world = 1;
  int rank = 0;
  bool optimizer = true;               // allocate the optimizer states and gradient accumulators
  offload::CompletionHook io_completion_hook;  // tests only: the I/O engine's (aio_engine.h)
  WeightQuant quant;                   // inference only: the streamed shards' format (plan.h)
};

class TierStore {
 public:
  // config: resolved. device: borrowed, must outlive the store. `init` zeroes the device-tier
  // optimizer states (waited for before the constructor returns). Throws strata::Error for what
  // the tiers refuse (a missing NVMe folder, O_DIRECT required where the file system lacks it,
  // ...) and, with the plan's table, when the states do not fit.
  TierStore(const config::Config& config, const StoreSetup& setup, device::Device& device, device::Stream& init);
  ~TierStore();
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;

  const ZeroPlan& plan() const { return plan_; }
  const PlanInputs& plan_inputs() const { return inputs_; }
  const ModulePlan& module_plan(int module) const { return plan_.modules.at(static_cast<std::size_t>(module)); }
  int module_count() const { return static_cast<int>(modules_.size()); }
  DType dtype() const { return dtype_; }
  DType grad_dtype() const { return inputs_.grad_dtype; }  // of the gradient accumulators
  int shard_rank() const { return shard_rank_; }  // this rank's shard (0 at stage 0)

  TierState& state(int module, StateKind kind);
  const TierState& state(int module, StateKind kind) const;

  // Elements per optimizer window: an NVMe sub-group, or the largest shard when nothing is on
  // NVMe. Window offsets are multiples of it, so NVMe windows stay block-aligned.
  std::size_t window_numel() const;
  // Elements per checkpoint chunk: one aio.block_size of elements, so fp32 and 2-byte offsets
  // both stay whole blocks.
  std::size_t chunk_numel() const { return chunk_numel_; }
  // strata.cpu_threads: the CPU Adam's threads, which first touch the pinned states.
  int cpu_threads() const { return backing_->cpu_threads; }

  offload::HostPool& pinned() const { return backing_->pinned; }
  offload::AioEngine& io() const { return backing_->io; }
  offload::SwapSpace* swap() const { return backing_->swap.get(); }  // null when nothing is on NVMe
  const TransferCounters& transfers() const { return transfers_; }
  TransferCounters& transfers() { return transfers_; }

 private:
  // Shared with the usage reports the device holds, which may outlive the store: they see an
  // expired pointer and report nothing.
  struct Backing {
    Backing(const config::Config& config, device::Device& device, const offload::CompletionHook& io_hook);
    // What the pool's touch hook partitions by (tier_store.cpp: touch_hook): the CPU Adam's
    // thread count and window, so each page is first touched by the thread that updates it.
    // The window is known once the plan is made (0 before: one window).
    const int cpu_threads;
    std::atomic<std::size_t> touch_window_numel{0};
    offload::HostPool pinned;
    offload::AioEngine io;
    std::unique_ptr<offload::SwapSpace> swap;
  };
  void register_usage(device::Device& device);
  void fill_inputs(const StoreSetup& setup, device::Device& device);
  void allocate(const StoreSetup& setup, device::Device& device, device::Stream& init);

  std::shared_ptr<Backing> backing_;  // first: the states below use it
  DType dtype_;
  int shard_rank_ = 0;
  std::size_t chunk_numel_ = 0;
  PlanInputs inputs_;
  ZeroPlan plan_;
  TransferCounters transfers_;
  std::vector<std::array<TierState, kStateKinds>> modules_;
};

}  // namespace strata::runtime::tiers

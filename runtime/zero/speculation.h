#pragma once
// Speculative updates: the second set of optimizer states (the shadows) that lets the updater
// update a module before the global gradient norm is known, and keep or redo the update after.
//
// Note [Speculative updates]. With gradient clipping the updates need the global norm, so they
// would all wait for the end of backward, and the next forward for them. Instead, a module
// whose optimizer states are in pinned memory is updated as soon as its gradient is final
// (Updater::post_speculative), as if the norm were under the threshold (clip coefficient 1),
// out of place: Adam reads the current master, exp_avg and exp_avg_sq and writes a second set
// (the module's shadow, pageable host memory under strata.speculative_update_memory), and the
// new parameters go to their tier as usual. Once the norm is known, each speculated module gets
// a commit (the norm was under the threshold: swap the shadow in, nothing is recomputed) or a
// redo (it was over: the same out-of-place update again from the untouched current states with
// the true clip coefficient, then the swap; speculative updates not yet started are skipped).
// Either way the states and parameters are bitwise those of the update after the norm: the same
// CPU Adam on the same inputs with the same scale. The next step's fetch of the module waits for
// its commit or redo through the gate, like any update. The engine does not speculate in a step
// after a clipped one (the work would most likely be redone).
//
// Threads: reserve() and cancel_through() run on the trainer thread; cancelled(),
// out_of_place() and commit() on the optimizer worker (updater.h), in tasks queued after the
// reserve() of their module.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "offload/host_buffer.h"
#include "runtime/tiers/tier_store.h"
#include "runtime/zero/swap_ring.h"

namespace strata::runtime::zero {

class Speculation {
 public:
  // Borrowed `store` outlives this. budget_bytes: strata.speculative_update_memory.
  Speculation(tiers::TierStore& store, std::uint64_t budget_bytes);
  Speculation(const Speculation&) = delete;
  Speculation& operator=(const Speculation&) = delete;

  // Trainer. Whether module m may be updated out of place: its states in pinned memory and its
  // shadow allocated (now, on its first speculation, if it fits the budget; kept from then on).
  bool reserve(int module);
  // Trainer. The speculative updates of steps <= `step` that have not started are to be skipped
  // (the norm was over the threshold: they are redone).
  void cancel_through(std::uint64_t step) { cancelled_through_ = step; }
  // Worker. Whether the speculative update of engine step `step` is to be skipped.
  bool cancelled(std::uint64_t step) const { return cancelled_through_.load() >= step; }

  // The current states Adam reads in an out-of-place update.
  struct Inputs {
    const float* master = nullptr;
    const float* exp_avg = nullptr;
    const float* exp_avg_sq = nullptr;
  };
  // Worker. For the window of module m at `offset`, whose current states `w` points at: returns
  // those as Adam's inputs and points `w` at the shadow, where Adam writes the new states.
  Inputs out_of_place(int module, std::size_t offset, SwapRing::Window& w);
  // Worker. The shadow holds the new states: it becomes the module's states, and the old ones
  // its shadow.
  void commit(int module);

 private:
  struct Shadow {
    offload::HostBuffer master, exp_avg, exp_avg_sq;  // the other set of the module's states
  };
  tiers::TierStore& store_;
  const std::uint64_t budget_bytes_;
  // Trainer only.
  std::vector<char> has_shadow_;  // per module: shadows_[m] allocated
  std::uint64_t shadow_bytes_ = 0;  // allocated so far
  // Allocated by the trainer (reserve(), before the first task that uses it is queued); from then
  // on only the worker touches a shadow (commit() swaps it).
  std::vector<Shadow> shadows_;
  // Written by the trainer, read by the worker.
  std::atomic<std::uint64_t> cancelled_through_{0};
};

}  // namespace strata::runtime::zero

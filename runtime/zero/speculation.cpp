#include "runtime/zero/speculation.h"

#include <string>

namespace strata::runtime::zero {

Speculation::Speculation(tiers::TierStore& store, std::uint64_t budget_bytes)
    : store_(store), budget_bytes_(budget_bytes) {
  shadows_.resize(static_cast<std::size_t>(store.module_count()));
  has_shadow_.assign(static_cast<std::size_t>(store.module_count()), 0);
}

bool Speculation::reserve(int module) {
  const tiers::TierState& master = store_.state(module, tiers::StateKind::master);
  if (master.tier() != tiers::Tier::pinned) return false;
  const std::size_t m = static_cast<std::size_t>(module);
  if (has_shadow_[m]) return true;
  // Allocated here, before the first task that uses it is queued; from then on only the worker
  // touches the shadow (commit swaps it), so the trainer reads has_shadow_ alone.
  Shadow& sh = shadows_[m];
  const std::uint64_t bytes = 3 * master.bytes();
  if (shadow_bytes_ + bytes > budget_bytes_) return false;
  const std::string& name = store_.plan_inputs().module_names[m];
  sh.master = offload::HostBuffer::allocate(master.bytes(), name + " speculative master");
  sh.exp_avg = offload::HostBuffer::allocate(master.bytes(), name + " speculative exp_avg");
  sh.exp_avg_sq = offload::HostBuffer::allocate(master.bytes(), name + " speculative exp_avg_sq");
  shadow_bytes_ += bytes;
  has_shadow_[m] = 1;
  return true;
}

Speculation::Inputs Speculation::out_of_place(int module, std::size_t offset, SwapRing::Window& w) {
  const Inputs in{w.master, w.exp_avg, w.exp_avg_sq};
  Shadow& sh = shadows_[static_cast<std::size_t>(module)];
  w.master = reinterpret_cast<float*>(sh.master.data()) + offset;
  w.exp_avg = reinterpret_cast<float*>(sh.exp_avg.data()) + offset;
  w.exp_avg_sq = reinterpret_cast<float*>(sh.exp_avg_sq.data()) + offset;
  return in;
}

void Speculation::commit(int module) {
  Shadow& sh = shadows_[static_cast<std::size_t>(module)];
  store_.state(module, tiers::StateKind::master).swap_host_buffer(sh.master);
  store_.state(module, tiers::StateKind::exp_avg).swap_host_buffer(sh.exp_avg);
  store_.state(module, tiers::StateKind::exp_avg_sq).swap_host_buffer(sh.exp_avg_sq);
}

}  // namespace strata::runtime::zero

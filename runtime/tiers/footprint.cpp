#include "runtime/tiers/footprint.h"

namespace strata::runtime::tiers {

std::uint64_t Footprint::tier_bytes(Tier tier) const {
  std::uint64_t sum = 0;
  for (int c = 0; c < kStateClasses; ++c) sum += bytes[static_cast<int>(tier)][c];
  return sum;
}

std::uint64_t Footprint::model_states_bytes() const {
  std::uint64_t sum = 0;
  for (int t = 0; t < kTiers; ++t) {
    for (StateClass c : {StateClass::parameters, StateClass::gradients, StateClass::optimizer_states}) {
      sum += bytes[t][static_cast<int>(c)];
    }
  }
  return sum;
}

Footprint footprint(const ZeroPlan& plan, const PlanInputs& inputs) {
  Footprint f;
  for (const PlanLine& l : plan.lines) {
    if (!l.headroom) f.bytes[static_cast<int>(l.tier)][static_cast<int>(l.kind)] += l.bytes;
  }
  // The transient buffers' line counts the minimum; the fetcher takes what the budget leaves.
  const std::uint64_t beside = device_bytes_beside_pools(plan, inputs);
  const std::uint64_t minimum = plan.class_minimum_bytes[0] + plan.class_minimum_bytes[1];
  const std::uint64_t left = inputs.device_budget_bytes > beside ? inputs.device_budget_bytes - beside : 0;
  const TransientPools pools = transient_pools(plan, left);
  if (pools.total() > minimum) {
    f.bytes[static_cast<int>(Tier::device)][static_cast<int>(StateClass::buffers)] += pools.total() - minimum;
  }
  return f;
}

}  // namespace strata::runtime::tiers

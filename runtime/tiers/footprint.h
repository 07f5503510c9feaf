#pragma once
// What a plan allocates on one rank, per tier and per class of state: the plan's lines
// (plan.h) but the headroom kept free for scratch, with the device's transient buffers at the size the parameter fetcher gives its
// pools when the device budget of the plan inputs is what is left (transient_pools), not at
// their minimum. This is what `strata estimate` prints and what `strata train` measures as each
// tier's peak (the pinned pool's and the swap space's are exact; the device arena adds only its
// alignment).
#include <cstdint>

#include "runtime/tiers/plan.h"
#include "runtime/tiers/tier.h"

namespace strata::runtime::tiers {


struct Footprint {
  std::uint64_t bytes[kTiers][kStateClasses] = {};  // [Tier][StateClass]
  std::uint64_t at(Tier tier, StateClass kind) const {
    return bytes[static_cast<int>(tier)][static_cast<int>(kind)];
  }
  std::uint64_t tier_bytes(Tier tier) const;
  // Parameters, gradients and optimizer states over every tier: the ZeRO paper's model states.
  std::uint64_t model_states_bytes() const;
};

// `inputs.device_budget_bytes` is the device's budget as the tier store sees it (the arena's
// budget less what was allocated before the engine). When it is below the plan's minimum, the
// transient buffers count at their minimum (the run would refuse to start).
Footprint footprint(const ZeroPlan& plan, const PlanInputs& inputs);

}  // namespace strata::runtime::tiers

// The names of tiers, placements, states and state classes (tier.h): spelled here only (the
// tiers' words in core/tier_names.h, which the layers below the tiers read too).
#include "runtime/tiers/tier.h"

#include "core/tier_names.h"

namespace strata::runtime::tiers {

const char* tier_key(Tier tier) {
  switch (tier) {
    case Tier::device: return tier_names::kDevice;
    case Tier::pinned: return tier_names::kPinnedKey;
    case Tier::nvme: return tier_names::kNvme;
  }
  return "?";
}

const char* tier_name(Tier tier) { return tier == Tier::pinned ? tier_names::kPinned : tier_key(tier); }

Tier placement_tier(config::OffloadDevice device) {
  switch (device) {
    case config::OffloadDevice::kNone: return Tier::device;
    case config::OffloadDevice::kCpu: return Tier::pinned;
    case config::OffloadDevice::kNvme: return Tier::nvme;
  }
  return Tier::device;
}

std::string placement_label(int stage, config::OffloadDevice params, config::OffloadDevice optimizer) {
  std::string s = "stage " + std::to_string(stage) + ", offload ";
  if (stage == 3) s += "params " + std::string(config::to_string(params)) + ", ";
  return s + "optimizer " + std::string(config::to_string(optimizer));
}

const char* state_class_name(StateClass c) {
  switch (c) {
    case StateClass::parameters: return "parameters";
    case StateClass::gradients: return "gradients";
    case StateClass::optimizer_states: return "optimizer states";
    case StateClass::activations: return "activations";
    case StateClass::buffers: return "buffers";
  }
  return "?";
}

const char* state_name(StateKind kind) {
  switch (kind) {
    case StateKind::param: return "param";
    case StateKind::master: return "master";
    case StateKind::exp_avg: return "exp_avg";
    case StateKind::exp_avg_sq: return "exp_avg_sq";
    case StateKind::grad_accum: return "grad_accum";
  }
  return "?";
}

}  // namespace strata::runtime::tiers

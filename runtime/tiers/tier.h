#pragma once
// The tiers a model state can live in, the states the tier store keeps per module, and the one
// place their names are spelled (the tiers' words themselves in core/tier_names.h, for the layers
// below this one).
#include <cstdint>
#include <string>

#include "runtime/config/config.h"

namespace strata::runtime::tiers {

enum class Tier { device, pinned, nvme };
inline constexpr int kTiers = 3;

// Names (docs/config.md, "Names of tiers and placements"). Tiers are strata's vocabulary;
// placements, what a config's offload_param / offload_optimizer device says, DeepSpeed's.
//   tier_key(t)   "device" | "pinned" | "nvme"         JSON keys, chart series, narrow columns
//   tier_name(t)  "device" | "pinned host" | "nvme"    tables and messages
//   a placement   config::to_string(d): "none" | "cpu" | "nvme", in JSON and in placement_label()
const char* tier_key(Tier tier);
const char* tier_name(Tier tier);
// Where a placement puts the states: none -> device, cpu -> pinned, nvme -> nvme.
Tier placement_tier(config::OffloadDevice device);
// "stage 3, offload params nvme, optimizer none"; "stage 1, offload optimizer cpu" (no
// parameter offload below stage 3).
std::string placement_label(int stage, config::OffloadDevice params, config::OffloadDevice optimizer);

// The states of one module on one rank, each owned by the tier store (tier_store.h).
enum class StateKind {
  param,       // this rank's parameter shard in the compute dtype (resident: the full parameters)
  master,      // fp32 master weights of the shard
  exp_avg,     // Adam's first moment (fp32)
  exp_avg_sq,  // Adam's second moment (fp32)
  grad_accum,  // gradient accumulator of the shard (fp32, or data_types.grad_accum_dtype)
};
inline constexpr int kStateKinds = 5;
const char* state_name(StateKind kind);  // "param", "master", ...

// What an allocation holds, as the ZeRO analysis groups a run's memory: the model states
// (parameters, gradients, optimizer states), the activations of the micro-batch, and buffers
// (transient gathered parameters and gradients, staging for copies and swaps, scratch).
enum class StateClass { parameters, gradients, optimizer_states, activations, buffers };
inline constexpr int kStateClasses = 5;
const char* state_class_name(StateClass c);  // "parameters", "gradients", "optimizer states", ...

// The optimizer states of a shard, as checkpoints name and order them.
enum class OptimState { master = 0, exp_avg = 1, exp_avg_sq = 2 };
inline constexpr int kOptimStates = 3;
inline StateKind state_kind(OptimState state) {
  switch (state) {
    case OptimState::master: return StateKind::master;
    case OptimState::exp_avg: return StateKind::exp_avg;
    case OptimState::exp_avg_sq: return StateKind::exp_avg_sq;
  }
  return StateKind::master;
}

}  // namespace strata::runtime::tiers

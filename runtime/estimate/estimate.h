#pragma once
// `strata estimate`'s rows: for one model at B x T on `world` ranks, every ZeRO stage x
// placement, the bytes per rank in each tier split by class of state (the plan code the engine
// runs, runtime/tiers/footprint.h), the ZeRO paper's model-state formula beside strata's own
// accounting, the collective bytes per step, whether the cell fits the budgets and, when not,
// what to change. With a machine profile, each row also has its predicted step
// (runtime/estimate/step_model.h). The inputs are plain: the model as a description of its
// modules and activations (EstimateModel; train/run_plan.h makes one of a models::ModelSpec),
// the parsed config, the budgets and the machine profile. tools/ parses the flags into them and
// prints the rows (tools/estimate/estimate_report.h, tools/cmd_estimate.cpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/estimate/machine_profile.h"
#include "runtime/estimate/moe_traffic.h"
#include "runtime/estimate/step_model.h"
#include "runtime/tiers/footprint.h"

namespace strata::runtime::estimate {

// What the estimate needs of a model, whatever its family: what models::ModelSpec says of its
// shape, its layout's modules, and its activation bytes (train::estimate_model fills it).
struct EstimateModel {
  std::string describe;           // one line for the header: the shape and size
  std::int64_t num_params = 0;    // a tied head counted once
  int hidden_size = 0;            // C
  int max_positions = 0;          // the longest sequence
  std::vector<std::size_t> module_numels;  // the layout's modules, in order
  std::vector<std::string> module_names;
  // A mixture of experts (runtime/estimate/moe_traffic.h; experts 0 when dense) and its expert
  // modules: routed_modules[m] is 1 when module m is acquired only when routed to
  // (models::ModelLayout::routed_modules; empty when dense).
  MoeRouting routing;
  std::vector<char> routed_modules;
  // Device bytes the model's reserve(B, T) allocates when built in `dtype` for `backend`, with
  // or without activation checkpointing.
  std::function<std::uint64_t(DType dtype, bool activation_checkpointing, device::Backend backend, int B, int T)>
      activation_bytes;
};

// Every budget is per rank. The device is one GPU's; pinned host memory and NVMe space belong to
// a node, shared by the ranks_per_node ranks on it (min(world, --ranks-per-node)): each rank gets
// the node's divided by ranks_per_node. A config's strata.pinned_memory is already per rank (what
// each rank's run pins) and is not divided.
struct Budgets {
  std::uint64_t device = 0;   // the device arena
  std::uint64_t pinned = 0;   // the pinned host pool
  std::uint64_t nvme = 0;     // free space in the NVMe folders (each file system once)
  int ranks_per_node = 1;     // ranks sharing one node's host memory and drives
  std::uint64_t node_pinned = 0, node_nvme = 0;  // the node's, before the division
  std::string device_source, pinned_source, nvme_source;  // where each came from, for the header
  std::string ranks_per_node_source;
  // The node's free NVMe bytes, and each rank's share.
  void set_node_nvme(std::uint64_t free_bytes) {
    node_nvme = free_bytes;
    nvme = free_bytes / static_cast<std::uint64_t>(ranks_per_node);
  }
};

struct EstimateInputs {
  EstimateModel model;
  config::Config config;  // parsed, not resolved (the cells set stage and offload devices)
  int world = 1;
  int batch = 1;     // micro-batch
  int seq_len = 0;   // 0: min(the model's longest, 1024)
  bool activation_checkpointing = false;
  device::Backend backend = device::Backend::host;
  std::string nvme_path;  // the cells' nvme_path when the config names none
  Budgets budgets;
  std::optional<MachineProfile> profile;
};

// The tokens a sequence: seq_len, else min(the model's longest, 1024).
int sequence_length(const EstimateInputs& in);

// One stage x placement. offload_param is kNone below stage 3.
struct Placement {
  int stage = 0;
  config::OffloadDevice param = config::OffloadDevice::kNone;
  config::OffloadDevice optimizer = config::OffloadDevice::kNone;
  std::string label() const;  // "stage 3, offload params cpu, optimizer nvme" (tiers::placement_label)
};
std::vector<Placement> all_placements();  // 0; 1-2 x optimizer none/cpu/nvme; 3 x 7 valid pairs

struct EstimateRow {
  Placement placement;
  int world = 1;
  std::string error;  // the config cannot work at any budget (then nothing else is set)
  // What the run allocates with these budgets: the device's transient buffers (the fetcher's
  // pools) grown into the free device memory, capped at what they can use at once. strata train
  // measures this (memory.*.allocated_bytes).
  tiers::Footprint bytes;
  // What the plan allocates at the least: the transient buffers at their minimum. Its device
  // bytes plus the scratch kept free (tiers::kDeviceScratchBytes) are need[device].
  tiers::Footprint minimum;
  std::uint64_t model_states_bytes = 0;  // strata's: parameters + gradients + optimizer states
  std::uint64_t formula_bytes = 0;       // the paper's (zero_theory.h)
  std::uint64_t psi_padded = 0;          // Ψ as the formula took it (padded to the shards)
  double collective_bytes = 0;           // per rank and step
  std::uint64_t need[3] = {0, 0, 0};     // per tier: what the plan needs to start (device: minimum)
  // The device bytes the run allocates when the budget has room (bytes' device tier), never
  // below need[device]: above it only when the transient buffers grow.
  std::uint64_t device_use_bytes() const;
  bool fits = false;
  std::string advice;                    // when not: each tier short and by how much
  std::optional<StepPrediction> step;  // with a profile
};

struct Estimate {
  int batch = 0, seq_len = 0, gas = 1;
  DType dtype = DType::f32;
  config::Config resolved_base;  // the base config resolved (for the header)
  std::vector<EstimateRow> rows;
};

// The config of one cell: `base` with the stage and offload devices set, nvme_path filled in
// when the cell uses NVMe and the config names none, and the inputs' micro-batch when the config
// gives no batch size; then resolved for `world` ranks. Throws strata::Error for configs that cannot be resolved.
config::Config placement_config(const EstimateInputs& in, const Placement& p);

Estimate make_estimate(const EstimateInputs& in, const std::vector<Placement>& placements);

// The row of one resolved config (strata train --config auto checks its pick with it).
EstimateRow estimate_row(const EstimateInputs& in, const Placement& p, const config::Config& resolved);

// Ranks sharing a node: min(world, ranks_per_node_flag); a flag of 0 takes the CUDA GPUs found
// (`gpus`) when there are any, else kDefaultRanksPerNode. `source` says which.
inline constexpr int kDefaultRanksPerNode = 8;
int ranks_per_node(int world, int ranks_per_node_flag, int gpus, std::string* source = nullptr);

// Free bytes for this user on the file systems of `paths`, each file system once (0 for a
// path that does not exist).
std::uint64_t free_nvme_bytes(const std::vector<std::string>& paths);

}  // namespace strata::runtime::estimate

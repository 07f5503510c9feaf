#pragma once
// `strata estimate`'s rows: for one model at B x T on `world` ranks, every ZeRO stage x
// placement, the bytes per rank in each tier split by class of state (the plan code the engine
// runs, runtime/tiers/footprint.h), the ZeRO paper's model-state formula beside strata's own
// accounting, the collective bytes per step, whether the cell fits the budgets and, when not,
// what to change. With a machine profile, each row also has its predicted step
// (runtime/estimate/step_model.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model_spec.h"
#include "runtime/config/config.h"
#include "runtime/estimate/machine_profile.h"
#include "runtime/estimate/step_model.h"
#include "runtime/tiers/footprint.h"

namespace strata::tools {

struct Budgets {
  std::uint64_t device = 0;   // the device arena
  std::uint64_t pinned = 0;   // the pinned host pool
  std::uint64_t nvme = 0;     // free space in the NVMe folders (each file system once)
  std::string device_source, pinned_source, nvme_source;  // where each came from, for the header
};

struct EstimateInputs {
  const models::ModelSpec* model = nullptr;
  runtime::config::Config config;  // parsed, not resolved (the cells set stage and offload devices)
  int world = 1;
  int batch = 1;     // micro-batch
  int seq_len = 0;   // 0: min(the model's longest, 1024)
  bool activation_checkpointing = false;
  runtime::device::Backend backend = runtime::device::Backend::host;
  std::string nvme_path;  // the cells' nvme_path when the config names none
  Budgets budgets;
  std::optional<runtime::estimate::MachineProfile> profile;
};

// One stage x placement. offload_param is kNone below stage 3.
struct Placement {
  int stage = 0;
  runtime::config::OffloadDevice param = runtime::config::OffloadDevice::kNone;
  runtime::config::OffloadDevice optimizer = runtime::config::OffloadDevice::kNone;
  std::string label() const;  // "stage 3, params cpu, optimizer nvme"
};
std::vector<Placement> all_placements();  // 0; 1-2 x optimizer none/cpu/nvme; 3 x 7 valid pairs

struct EstimateRow {
  Placement placement;
  int world = 1;
  std::string error;  // the config cannot work at any budget (then nothing else is set)
  runtime::tiers::Footprint bytes;
  std::uint64_t model_states_bytes = 0;  // strata's: parameters + gradients + optimizer states
  std::uint64_t formula_bytes = 0;       // the paper's (runtime/estimate/zero_theory.h)
  std::uint64_t psi_padded = 0;          // Ψ as the formula took it (padded to the shards)
  double collective_bytes = 0;           // per rank and step
  std::uint64_t need[3] = {0, 0, 0};     // per tier: what the plan needs to start (device: minimum)
  bool fits = false;
  std::string advice;                    // when not: each tier short and by how much
  std::optional<runtime::estimate::StepPrediction> step;  // with a profile
};

struct Estimate {
  int batch = 0, seq_len = 0, gas = 1;
  DType dtype = DType::f32;
  runtime::config::Config resolved_base;  // the base config resolved (for the header)
  std::vector<EstimateRow> rows;
};

// The config of one cell: `base` with the stage and offload devices set, nvme_path filled in
// when the cell uses NVMe and the config names none, and the inputs' micro-batch when the config
// gives no batch size; then resolved for `world` ranks. Throws strata::Error for configs that cannot be resolved.
runtime::config::Config placement_config(const EstimateInputs& in, const Placement& p);

Estimate make_estimate(const EstimateInputs& in, const std::vector<Placement>& placements);

// The row of one resolved config (strata train --config auto checks its pick with it).
EstimateRow estimate_row(const EstimateInputs& in, const Placement& p, const runtime::config::Config& resolved);

// Free bytes for this user on the file systems of `paths`, each file system once (0 for a
// path that does not exist).
std::uint64_t free_nvme_bytes(const std::vector<std::string>& paths);

}  // namespace strata::tools

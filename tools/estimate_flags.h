#pragma once
// The flags `strata estimate` and `strata compare` share, and the EstimateInputs they make:
// the model (--model / --preset), the config (--config, over DeepSpeed's defaults in bf16 when
// none is given), --world, --batch, --seq-len, --dtype, --activation-checkpointing, the budgets
// (--device / --device-memory, --pinned-memory, the NVMe folder's free space; the node's pinned
// memory and NVMe space divided among --ranks-per-node ranks) and --profile.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "models/model_spec.h"
#include "tools/device_flags.h"
#include "runtime/estimate/estimate.h"

namespace strata::tools {

struct EstimateFlags {
  std::string model_path, preset;
  DeviceFlags device;
  int world = 1;
  std::optional<int> ranks_per_node;  // unset: the CUDA GPUs found, else kDefaultRanksPerNode (runtime/estimate/estimate.h)
  int batch = 0;    // 0: the config's micro-batch, else 1
  int seq_len = 0;  // 0: min(the model's longest, 1024)
  std::string dtype;  // "": the config's (bf16 without --config)
  bool activation_checkpointing = false;
  std::string pinned_memory;
  std::string nvme_path;
  std::string profile_path;
  // The config's text, when it does not come from --config (strata train --config auto).
  std::string config_json;
};

// `ranks_per_node`: whether to offer --ranks-per-node (strata compare runs every rank on this
// machine, and sets flags.ranks_per_node to its world instead).
void add_estimate_flags(CLI::App& command, EstimateFlags& flags, bool ranks_per_node = true);

// Throws strata::Error naming the flag for bad values, a missing config or profile, and for
// --device cuda on a machine without a GPU unless --device-memory says how large it is.
// `model` is borrowed: it must outlive the inputs (train::estimate_model).
runtime::estimate::EstimateInputs estimate_inputs(const EstimateFlags& flags, const models::ModelSpec& model);

}  // namespace strata::tools

#pragma once
// `strata train --config auto`, and a config whose placement is "auto"
// (zero_optimization: "auto", or its stage, offload_param.device or offload_optimizer.device
// "auto", in the file or by --set): the stage, placements, offload ratio and micro-batch picked
// by runtime/estimate/recommend.h (auto_plan) for this model, machine and run, printed with why.
// The global batch the config or the flags fix is kept (the micro-batch may be traded for
// accumulation). Here only the flags and the file are read and the pick printed.
#include <string>
#include <vector>

#include "tools/device_flags.h"
#include "train/train_options.h"

namespace strata::tools {

// Whether `config_path` with `overrides` asks for the automatic placement: "auto", or a file (or
// an override) with an "auto" placement as above. Throws strata::Error for an unreadable or
// malformed file.
bool wants_auto_placement(const std::string& config_path, const std::vector<std::string>& overrides);

// Plans the run and sets options.config_json to the picked config: the file's keys with
// options.overrides applied (its other "auto"s left for the run to resolve), the picked
// placement, and the batch sizes. The batch flags (--micro-batch, --grad-accum) are used here
// and cleared from options.flags. Prints the pick and why on stderr (rank 0), with what changed
// of the batch. `profile_path`: a machine profile, or empty. Throws strata::Error when nothing
// fits, saying what is short.
void auto_config(train::TrainOptions& options, const DeviceFlags& device, const std::string& profile_path);

}  // namespace strata::tools

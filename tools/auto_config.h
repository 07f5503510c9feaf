#pragma once
// `strata train --config auto`, and a config whose placement is "auto"
// (zero_optimization: "auto", or its stage, offload_param.device or offload_optimizer.device
// "auto"): the stage, placements, offload ratio and micro-batch picked by
// tools/estimate/recommend.h for this model, machine and run, printed with why.
#include <string>

#include "tools/device_flags.h"
#include "train/train_options.h"

namespace strata::tools {

// Whether `config_path` asks for the automatic placement: "auto", or a file with an "auto"
// placement as above. Throws strata::Error for an unreadable or malformed file.
bool wants_auto_placement(const std::string& config_path);

// The picked config as JSON (the file's other keys kept), for TrainOptions::config_json; prints
// the pick and why on stderr (rank 0). `profile_path`: a machine profile, or empty. Throws
// strata::Error when nothing fits, saying what is short.
std::string auto_config(const train::TrainOptions& options, const DeviceFlags& device, const std::string& profile_path);

}  // namespace strata::tools

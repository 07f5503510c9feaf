#pragma once
// The flags `strata train` and `strata config` share for config keys: --set key.path=value and
// the common training values (--lr, --micro-batch, --grad-accum, --clip, --warmup-steps). Parse
// only: runtime/config (resolve_config_explained) decides what they do to the config.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/config/config.h"

namespace strata::tools {

// Registers the flags on `command`; they fill `overrides` and `flags` (borrowed: both must
// outlive the command's callback).
void add_training_flags(CLI::App& command, std::vector<std::string>& overrides,
                        runtime::config::TrainingFlags& flags);

}  // namespace strata::tools

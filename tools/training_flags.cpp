#include "tools/training_flags.h"

namespace strata::tools {

void add_training_flags(CLI::App& command, std::vector<std::string>& overrides,
                        runtime::config::TrainingFlags& flags) {
  command
      .add_option("--set", overrides,
                  "override a config key before validation: key.path=value (value read as JSON, else as a "
                  "string); repeatable")
      ->allow_extra_args(false);
  command.add_option_function<double>(
      "--lr", [&flags](double v) { flags.lr = v; },
      "learning rate: optimizer.params.lr and a WarmupLR/WarmupDecayLR warmup_max_lr (replaces the config's; "
      "\"auto\" without it: 5e-5, HF's default)")
      ->check(CLI::NonNegativeNumber);
  command.add_option_function<std::uint64_t>(
      "--micro-batch", [&flags](std::uint64_t v) { flags.micro_batch = v; },
      "train_micro_batch_size_per_gpu (replaces the config's; \"auto\" without it: 8, HF's default)")
      ->check(CLI::PositiveNumber);
  command.add_option_function<std::uint64_t>(
      "--grad-accum", [&flags](std::uint64_t v) { flags.grad_accum = v; },
      "gradient_accumulation_steps (replaces the config's; \"auto\" without it: 1)")
      ->check(CLI::PositiveNumber);
  command.add_option_function<double>(
      "--clip", [&flags](double v) { flags.clip = v; },
      "gradient_clipping, the global norm to clip to; 0 = off (replaces the config's; \"auto\" without it: 1.0)")
      ->check(CLI::NonNegativeNumber);
  command.add_option_function<std::uint64_t>(
      "--warmup-steps", [&flags](std::uint64_t v) { flags.warmup_steps = v; },
      "scheduler.params.warmup_num_steps (replaces the config's; needs a scheduler section; 0 runs as 1)");
}

}  // namespace strata::tools

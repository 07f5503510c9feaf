// strata config FILE [--set key.path=value ...] [--lr X] [--micro-batch N] [--grad-accum N]
// [--clip X] [--warmup-steps N] [--steps N] [--world-size N] [--hidden-size H]: validates a
// DeepSpeed-style config and prints it resolved as `strata train` would run it (every key,
// pretty JSON, on stdout), with the table of the "auto" values it resolved and where each came
// from on stderr. Warnings (unknown keys, ignored DeepSpeed keys) go to stderr through the log; a
// bad config throws strata::Error, which main prints as "strata: error: ..." and exits 1.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/log.h"
#include "runtime/config/config.h"
#include "tools/commands.h"
#include "tools/training_flags.h"

namespace strata::tools {
namespace {

struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;
  runtime::config::TrainingFlags flags;
  std::uint32_t world_size = 1;
  std::uint64_t hidden_size = 0;  // 0 = not given
};

void run_config(const ConfigOptions& options) {
  runtime::config::ParsedConfig parsed = runtime::config::load_config_file(options.file, options.overrides);
  runtime::config::ResolveInputs inputs;
  inputs.world_size = options.world_size;
  if (options.hidden_size > 0) inputs.hidden_size = options.hidden_size;
  inputs.training = true;  // as strata train resolves it
  inputs.flags = options.flags;
  const runtime::config::Resolution resolution = runtime::config::resolve_config_explained(parsed.config, inputs);

  std::string text = runtime::config::config_to_json(resolution.config);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);

  for (const std::string& note : resolution.notes) log::info("config {}: {}", options.file, note);
  const std::string table = runtime::config::resolution_table(resolution.autos);
  if (!table.empty()) std::fprintf(stderr, "%s", table.c_str());
  // What needs the model or the run (bucket sizes without --hidden-size, total_num_steps without
  // --steps): strata train fills it; say which keys so nobody mistakes "auto" for a value.
  std::vector<std::string> open = runtime::config::unresolved_auto_keys(resolution.config);
  if (!open.empty()) {
    log::info("config {}: still \"auto\" (resolved at run time, or give --hidden-size / --steps): {}", options.file,
              fmt::join(open, ", "));
  }
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto options = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app.add_subcommand(
      "config", "validate a DeepSpeed-style JSON config and print it resolved as strata train runs it (every key)");
  cmd->add_option("file", options->file, "config file (JSON)")->required();
  add_training_flags(*cmd, options->overrides, options->flags);
  cmd->add_option_function<std::uint64_t>(
         "--steps", [options](std::uint64_t v) { options->flags.steps = v; },
         "the run's optimizer steps, for an \"auto\" scheduler total_num_steps (as strata train --steps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--world-size", options->world_size,
                  "data-parallel ranks, for train_batch_size = micro * accumulation * world")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hidden-size", options->hidden_size,
                  "model hidden size, to resolve \"auto\" bucket sizes")
      ->check(CLI::PositiveNumber);
  cmd->callback([options] { run_config(*options); });
}

}  // namespace strata::tools

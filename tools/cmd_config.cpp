// strata config FILE [--set key.path=value ...] [--world-size N] [--hidden-size H]:
// validates a DeepSpeed-style config and prints it resolved (every key, pretty JSON, on
// stdout). Warnings (unknown keys, ignored DeepSpeed keys) go to stderr through the log; a
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

namespace strata::tools {
namespace {

struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;
  std::uint32_t world_size = 1;
  std::uint64_t hidden_size = 0;  // 0 = not given
};

void run_config(const ConfigOptions& options) {
  runtime::config::ParsedConfig parsed = runtime::config::load_config_file(options.file, options.overrides);
  runtime::config::ResolveInputs inputs;
  inputs.world_size = options.world_size;
  if (options.hidden_size > 0) inputs.hidden_size = options.hidden_size;
  runtime::config::Config resolved = runtime::config::resolve_config(parsed.config, inputs);

  std::string text = runtime::config::config_to_json(resolved);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);

  // Values left "auto" are fine here (the engine resolves them from the model and the run),
  // but say which they are so nobody mistakes "auto" for a value.
  std::vector<std::string> open = runtime::config::unresolved_auto_keys(resolved);
  if (!open.empty()) {
    log::info("config {}: still \"auto\" (resolved at run time): {}", options.file,
              fmt::join(open, ", "));
  }
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto options = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app.add_subcommand(
      "config", "validate a DeepSpeed-style JSON config and print it resolved (every key)");
  cmd->add_option("file", options->file, "config file (JSON)")->required();
  cmd->add_option("--set", options->overrides,
                  "override a key before validation: key.path=value (value read as JSON, else as "
                  "a string); repeatable")
      ->allow_extra_args(false);
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

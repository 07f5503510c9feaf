// PLACEHOLDER (being written): strata config
#include "tools/commands.h"
namespace strata::tools {
void add_config_command(CLI::App& app) { app.add_subcommand("config", "validate a config"); }
}  // namespace strata::tools

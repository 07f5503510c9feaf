// PLACEHOLDER (being written): strata info
#include "tools/commands.h"
namespace strata::tools {
void add_info_command(CLI::App& app) { app.add_subcommand("info", "what this machine offers"); }
}  // namespace strata::tools

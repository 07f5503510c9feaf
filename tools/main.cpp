// strata: train and serve transformers larger than GPU memory.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: train and serve transformer models larger than GPU memory"};
  app.require_subcommand(1);
  strata::tools::add_info_command(app);
  strata::tools::add_config_command(app);
  strata::tools::add_bench_command(app);
  strata::tools::add_train_command(app);
  strata::tools::add_convert_command(app);
  strata::tools::add_infer_command(app);
  strata::tools::add_chart_command(app);
  strata::tools::add_estimate_command(app);
  strata::tools::add_compare_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}

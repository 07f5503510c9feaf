// strata: train and serve transformers larger than GPU memory.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "runtime/comm/comm.h"
#include "runtime/launch/launch.h"
#include "tools/cli_errors.h"
#include "tools/commands.h"
#include "tools/version.h"

namespace {

// "rank R of W: " under mpirun with several ranks (whose errors land in one terminal), else "".
std::string rank_prefix() {
  try {
    const strata::runtime::launch::LaunchInfo launch = strata::runtime::launch::detect_launch();
    if (launch.world > 1) {
      return "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world) + ": ";
    }
  } catch (const strata::Error&) {
    // A malformed launcher environment was reported by the command itself.
  }
  return "";
}

// Prints the error, then ends the other ranks if they may be waiting for this one
// (end_job_after_error: they would otherwise wait in their next collective forever).
int fail(const char* kind, const char* what, int code) {
  std::fprintf(stderr, "strata: %s: %s%s\n", kind, rank_prefix().c_str(), what);
  std::fflush(stderr);
  strata::runtime::comm::end_job_after_error(code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: train and serve transformer models larger than GPU memory"};
  app.require_subcommand(1);
  app.set_version_flag("--version", strata::tools::version_text(), "the version, the git commit and whether CUDA is compiled in");
  strata::tools::add_version_command(app);
  strata::tools::add_info_command(app);
  strata::tools::add_config_command(app);
  strata::tools::add_bench_command(app);
  strata::tools::add_train_command(app);
  strata::tools::add_convert_command(app);
  strata::tools::add_tokenize_command(app);
  strata::tools::add_infer_command(app);
  strata::tools::add_serve_command(app);
  strata::tools::add_chart_command(app);
  strata::tools::add_estimate_command(app);
  strata::tools::add_compare_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return strata::tools::report_parse_error(app, e);
  } catch (const strata::Error& e) {
    return fail("error", e.what(), 1);
  } catch (const std::exception& e) {
    return fail("internal error", e.what(), 2);
  }
  return 0;
}

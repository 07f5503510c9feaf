// strata info [--dir PATH] [--json]: what this machine offers, as strata finds it by asking
// (cpuid, hwloc or sysfs, the CUDA driver, a real io_uring ring, a real O_DIRECT file in the
// folder where swap files would go, the MPI launcher's environment).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/topology/topology.h"
#include "tools/commands.h"

namespace strata::tools {
namespace {

struct InfoOptions {
  std::string dir = ".";
  bool json = false;
};

void run_info(const InfoOptions& options) {
  // Report the folder as an absolute path (what "." meant), but probe it as given so that a
  // missing folder is reported by the probe with its reason.
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(options.dir, ec).lexically_normal();
  // "/work/." normalizes to "/work/": drop the trailing separator for the report.
  if (!abs.has_filename() && abs != abs.root_path()) abs = abs.parent_path();
  const std::string dir = ec ? options.dir : abs.string();
  const runtime::MachineReport report = runtime::collect_machine_report(dir);
  const std::string text =
      options.json ? runtime::machine_report_json(report) + "\n" : runtime::format_machine_report(report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "what this machine offers (CPU, NUMA, GPUs, io_uring, O_DIRECT, MPI)");
  cmd->add_option("--dir", options->dir, "folder to probe for O_DIRECT (where swap files would go)")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "print the report as JSON");
  cmd->callback([options] { run_info(*options); });
}

}  // namespace strata::tools

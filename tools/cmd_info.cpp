// strata info [--dir PATH] [--json]: what this machine offers, as strata finds it by asking
// (cpuid, hwloc or sysfs, the CUDA driver, a real io_uring ring, a real O_DIRECT file in the
// folder where swap files would go, the MPI launcher's environment).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/units.h"
#include "runtime/device/device.h"
#include "runtime/topology/topology.h"
#include "tools/commands.h"
#include "tools/device_flags.h"

namespace strata::tools {
namespace {

struct InfoOptions {
  std::string dir = ".";
  bool json = false;
  DeviceFlags device;
};

// The device strata would run on with these flags (and config): created for real, so that
// what is printed is what a run gets. Throws strata::Error when it cannot be created (e.g.
// --device cuda without a GPU), after the machine report has been printed.
nlohmann::json chosen_device(const runtime::device::DeviceOptions& options) {
  const std::unique_ptr<runtime::device::Device> device = runtime::device::Device::create(options);
  const runtime::device::ArenaStats stats = device->memory_stats();
  return {{"asked", options.kind},
          {"backend", std::string(runtime::device::backend_name(device->backend()))},
          {"name", device->name()},
          {"arena_budget_bytes", stats.budget_bytes}};
}

void run_info(const InfoOptions& options) {
  // Report the folder as an absolute path (what "." meant), but probe it as given so that a
  // missing folder is reported by the probe with its reason.
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(options.dir, ec).lexically_normal();
  // "/work/." normalizes to "/work/": drop the trailing separator for the report.
  if (!abs.has_filename() && abs != abs.root_path()) abs = abs.parent_path();
  const std::string dir = ec ? options.dir : abs.string();
  // Bad flags or config fail before anything is printed.
  const runtime::device::DeviceOptions device_options = resolve_device_options(options.device);
  const runtime::topology::MachineReport report = runtime::topology::collect_machine_report(dir);
  if (options.json) {
    nlohmann::json j = nlohmann::json::parse(runtime::topology::machine_report_json(report));
    j["device"] = chosen_device(device_options);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const std::string text = runtime::topology::format_machine_report(report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  const nlohmann::json device = chosen_device(device_options);
  const std::string backend = device["backend"].get<std::string>();
  const std::string name = device["name"].get<std::string>();
  std::printf("\nDevice (what a run gets with these flags)\n  %-15s %s\n  %-15s %s\n  %-15s %s\n",
              "asked", device["asked"].get<std::string>().c_str(), "backend",
              (name == backend ? backend : backend + " (" + name + ")").c_str(), "arena budget",
              format_bytes(device["arena_budget_bytes"].get<std::uint64_t>()).c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "what this machine offers (CPU, NUMA, GPUs, io_uring, O_DIRECT, MPI)");
  cmd->add_option("--dir", options->dir, "folder to probe for O_DIRECT (where swap files would go)")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "print the report as JSON");
  add_device_flags(*cmd, options->device);
  cmd->callback([options] { run_info(*options); });
}

}  // namespace strata::tools

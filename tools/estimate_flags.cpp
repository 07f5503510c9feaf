#include "tools/estimate_flags.h"

#include <optional>

#include "core/error.h"
#include "core/units.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"

namespace strata::tools {
namespace {

std::uint64_t size_flag(const std::string& text, const char* flag) {
  const std::optional<std::uint64_t> bytes = parse_bytes(text);
  if (!bytes) throw Error(std::string(flag) + " '" + text + "' is not a size", flag, "e.g. 64GiB");
  return *bytes;
}

// The backend and the device budget: --device-memory, else strata.device_memory, else what the
// backend would take (host: its default arena; cuda: the first GPU's free memory less the reserve).
void resolve_device(const EstimateFlags& o, const runtime::config::Config& file, EstimateInputs& in) {
  std::string kind = std::string(runtime::config::to_string(file.strata.device));
  if (!o.device.device.empty()) kind = o.device.device;
  std::uint64_t budget = file.strata.device_memory_bytes;
  in.budgets.device_source = "strata.device_memory";
  if (const std::optional<std::uint64_t> flag = device_memory_bytes(o.device)) {
    budget = *flag;
    in.budgets.device_source = "--device-memory";
  }
  const runtime::device::CudaAvailability cuda =
      kind == "host" ? runtime::device::CudaAvailability{} : runtime::device::cuda_availability();
  const bool gpu = !cuda.devices.empty();
  if (kind == "cuda" || (kind == "auto" && gpu)) {
    in.backend = runtime::device::Backend::cuda;
    if (budget == 0) {
      if (!gpu) {
        throw Error("--device cuda, but this machine has no usable GPU (" + cuda.why_not + ")", "--device",
                    "give the GPU's memory with --device-memory (e.g. 80GB) to estimate for another machine");
      }
      const runtime::device::CudaDeviceInfo& d = cuda.devices.front();
      const std::uint64_t free_bytes = d.free_bytes > 0 ? d.free_bytes : d.total_bytes;
      const std::uint64_t reserve = runtime::device::DeviceOptions{}.cuda_reserve_bytes;
      budget = free_bytes > reserve ? free_bytes - reserve : 0;
      in.budgets.device_source = d.name + ": free less the CUDA reserve";
    }
  } else {
    in.backend = runtime::device::Backend::host;
    if (budget == 0) {
      budget = runtime::config::kHostDeviceDefaultMemoryBytes;
      in.budgets.device_source = "the host backend's default";
    }
  }
  in.budgets.device = budget;
}

}  // namespace

void add_estimate_flags(CLI::App& cmd, EstimateFlags& o) {
  cmd.add_option("--model", o.model_path, "a Hugging Face model folder or its config.json");
  cmd.add_option("--preset", o.preset, "a built-in model: " + [] {
    std::string s;
    for (const std::string& n : models::preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }());
  cmd.add_option("--world", o.world, "ranks (GPUs) the states are sharded over")->capture_default_str();
  cmd.add_option("--batch", o.batch, "micro-batch per rank (default: the config's, else 1)");
  cmd.add_option("--seq-len", o.seq_len, "tokens per sequence (default: min(the model's longest, 1024))");
  cmd.add_option("--dtype", o.dtype, "compute dtype (default: the config's; bf16 without --config)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd.add_flag("--activation-checkpointing", o.activation_checkpointing, "recompute activations in backward");
  cmd.add_option("--pinned-memory", o.pinned_memory, "pinned host budget (default: strata.pinned_memory, else half of RAM)");
  cmd.add_option("--nvme-path", o.nvme_path, "swap folder of the nvme cells when the config names none (default .)");
  cmd.add_option("--profile", o.profile_path, "a machine profile (strata bench machine): predict each row's step");
  add_device_flags(cmd, o.device);
}

EstimateInputs estimate_inputs(const EstimateFlags& o, const models::ModelSpec& model) {
  // Without --config: DeepSpeed's defaults, in bf16 (what a model of this size trains in).
  const runtime::config::ParsedConfig parsed =
      !o.config_json.empty()       ? runtime::config::parse_config(o.config_json, "the config")
      : o.device.config_path.empty() ? runtime::config::parse_config(R"({"bf16": {"enabled": true}})", "(defaults)")
                                     : runtime::config::load_config_file(o.device.config_path);
  EstimateInputs in;
  in.model = &model;
  in.config = parsed.config;
  if (!o.dtype.empty()) {
    in.config.bf16.enabled = o.dtype == "bf16";
    in.config.fp16.enabled = o.dtype == "fp16";
  }
  if (o.world < 1) throw Error("--world " + std::to_string(o.world), "--world", "give 1 or more ranks");
  in.world = o.world;
  if (o.batch < 0) throw Error("--batch " + std::to_string(o.batch), "--batch", "give 1 or more sequences");
  if (o.batch > 0) {
    in.config.train_micro_batch_size_per_gpu = static_cast<std::uint64_t>(o.batch);
    in.config.train_batch_size.reset();
  }
  in.batch = o.batch > 0 ? o.batch : 1;
  in.seq_len = o.seq_len;
  if (o.seq_len < 0 || o.seq_len > model.max_positions()) {
    throw Error("--seq-len " + std::to_string(o.seq_len) + " is outside 1.." + std::to_string(model.max_positions()) +
                    " (the model's longest sequence)",
                "--seq-len", "give at most " + std::to_string(model.max_positions()));
  }
  in.activation_checkpointing = o.activation_checkpointing;
  resolve_device(o, parsed.config, in);
  if (!o.pinned_memory.empty()) {
    in.config.strata.pinned_memory_bytes = size_flag(o.pinned_memory, "--pinned-memory");
    in.budgets.pinned_source = "--pinned-memory";
  } else {
    in.budgets.pinned_source = in.config.strata.pinned_memory_bytes ? "strata.pinned_memory" : "half of physical memory";
  }
  in.nvme_path = o.nvme_path.empty() ? "." : o.nvme_path;
  // The NVMe folders of the nvme cells: the config's, else --nvme-path.
  const runtime::config::Config nvme_cell =
      placement_config(in, {3, runtime::config::OffloadDevice::kNvme, runtime::config::OffloadDevice::kNvme});
  const std::vector<std::string> paths = runtime::tiers::nvme_paths(nvme_cell);
  in.budgets.nvme = free_nvme_bytes(paths);
  for (const std::string& p : paths) in.budgets.nvme_source += (in.budgets.nvme_source.empty() ? "in " : ", ") + p;
  if (!o.profile_path.empty()) in.profile = runtime::estimate::read_machine_profile(o.profile_path);
  // The pinned budget: strata.pinned_memory as the run resolves it.
  in.budgets.pinned =
      placement_config(in, {0, runtime::config::OffloadDevice::kNone, runtime::config::OffloadDevice::kNone})
          .strata.pinned_memory_bytes;
  return in;
}

}  // namespace strata::tools

#include "tools/estimate_flags.h"

#include <optional>

#include "core/error.h"
#include "core/units.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "runtime/tiers/plan.h"
#include "train/run_plan.h"

namespace strata::tools {
namespace {

using runtime::estimate::Budgets;
using runtime::estimate::EstimateInputs;
using runtime::estimate::placement_config;

std::uint64_t size_flag(const std::string& text, const char* flag) {
  const std::optional<std::uint64_t> bytes = parse_bytes(text);
  if (!bytes) throw Error(std::string(flag) + " '" + text + "' is not a size", flag, "e.g. 64GiB");
  return *bytes;
}

// The backend and the device budget: --device-memory, else strata.device_memory, else what the
// backend would take (host: its default arena; cuda: the first GPU's free memory less the reserve).
// Returns the CUDA GPUs found (0 on the host backend).
int resolve_device(const EstimateFlags& o, const runtime::config::Config& file, EstimateInputs& in) {
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
  return in.backend == runtime::device::Backend::cuda ? static_cast<int>(cuda.devices.size()) : 0;
}

// The pinned host budget per rank. --pinned-memory and the default (half of physical memory)
// are the node's, divided among its ranks; strata.pinned_memory is what each rank's run pins.
void resolve_pinned(const EstimateFlags& o, EstimateInputs& in) {
  Budgets& b = in.budgets;
  const auto per_node = static_cast<std::uint64_t>(b.ranks_per_node);
  const std::string split = per_node > 1 ? ", / " + std::to_string(per_node) + " ranks a node" : "";
  if (!o.pinned_memory.empty()) {
    b.node_pinned = size_flag(o.pinned_memory, "--pinned-memory");
    b.pinned_source = "--pinned-memory" + split;
  } else if (in.config.strata.pinned_memory_bytes != 0) {
    b.node_pinned = in.config.strata.pinned_memory_bytes * per_node;
    b.pinned_source = "strata.pinned_memory, per rank";
  } else {
    // strata.pinned_memory as a run on this node resolves it.
    b.node_pinned = placement_config(in, {0, runtime::config::OffloadDevice::kNone, runtime::config::OffloadDevice::kNone})
                        .strata.pinned_memory_bytes;
    b.pinned_source = "half of physical memory" + split;
  }
  b.pinned = b.node_pinned / per_node;
  if (b.pinned == 0) {
    throw Error("the node's pinned memory (" + b.pinned_source + ", " + std::to_string(b.node_pinned) +
                    " bytes) leaves nothing to each of " + std::to_string(per_node) + " ranks",
                "--pinned-memory", "give the node's pinned host memory, e.g. 64GiB");
  }
  in.config.strata.pinned_memory_bytes = b.pinned;  // what each cell's rank pins
}

}  // namespace

void add_estimate_flags(CLI::App& cmd, EstimateFlags& o, bool ranks_per_node) {
  cmd.add_option("--model", o.model_path, "a Hugging Face model folder or its config.json");
  cmd.add_option("--preset", o.preset, "a built-in model: " + [] {
    std::string s;
    for (const std::string& n : models::preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }());
  cmd.add_option("--world", o.world, "ranks (GPUs) the states are sharded over")->capture_default_str();
  if (ranks_per_node) {
    cmd.add_option_function<int>(
        "--ranks-per-node", [&o](int n) { o.ranks_per_node = n; },
        "ranks sharing one node's pinned memory and NVMe, which each gets its share of (default: the CUDA GPUs "
        "found, else " + std::to_string(runtime::estimate::kDefaultRanksPerNode) + "; at most --world)");
  }
  cmd.add_option("--batch", o.batch, "micro-batch per rank (default: the config's, else 1)");
  cmd.add_option("--seq-len", o.seq_len, "tokens per sequence (default: min(the model's longest, 1024))");
  cmd.add_option("--dtype", o.dtype, "compute dtype (default: the config's; bf16 without --config)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd.add_flag("--activation-checkpointing", o.activation_checkpointing, "recompute activations in backward");
  cmd.add_option("--pinned-memory", o.pinned_memory,
                 "the node's pinned host budget (default: strata.pinned_memory per rank, else half of RAM a node)");
  cmd.add_option("--nvme-path", o.nvme_path,
                 "swap folder of the nvme cells when the config names none (default .); its free space is the node's");
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
  in.model = train::estimate_model(model);
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
  const int gpus = resolve_device(o, parsed.config, in);
  if (o.ranks_per_node && *o.ranks_per_node < 1) {
    throw Error("--ranks-per-node " + std::to_string(*o.ranks_per_node), "--ranks-per-node", "give 1 or more ranks");
  }
  in.budgets.ranks_per_node =
      runtime::estimate::ranks_per_node(o.world, o.ranks_per_node.value_or(0), gpus, &in.budgets.ranks_per_node_source);
  resolve_pinned(o, in);
  in.nvme_path = o.nvme_path.empty() ? "." : o.nvme_path;
  // The NVMe folders of the nvme cells: the config's, else --nvme-path.
  const runtime::config::Config nvme_cell =
      placement_config(in, {3, runtime::config::OffloadDevice::kNvme, runtime::config::OffloadDevice::kNvme});
  const std::vector<std::string> paths = runtime::tiers::nvme_paths(nvme_cell);
  in.budgets.set_node_nvme(runtime::estimate::free_nvme_bytes(paths));
  for (const std::string& p : paths) in.budgets.nvme_source += (in.budgets.nvme_source.empty() ? "in " : ", ") + p;
  if (in.budgets.ranks_per_node > 1) {
    in.budgets.nvme_source += ", / " + std::to_string(in.budgets.ranks_per_node) + " ranks a node";
  }
  if (!o.profile_path.empty()) in.profile = runtime::estimate::read_machine_profile(o.profile_path);
  return in;
}

}  // namespace strata::tools

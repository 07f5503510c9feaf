// strata estimate (--model DIR|config.json | --preset NAME) [--config ds.json] [--world N]
//                 [--batch B] [--seq-len T] [--activation-checkpointing] [--device host|cuda|auto]
//                 [--device-memory SIZE] [--pinned-memory SIZE] [--nvme-path DIR] [--stage S]
//                 [--profile machine.json] [--json]
// Before a run: per rank, for every ZeRO stage x placement, the bytes in each tier (device,
// pinned host, NVMe) split by class of state, from the plan code `strata train` runs
// (tools/estimate/estimate.h); the ZeRO paper's formula beside strata's model states; the
// collective bytes per step; whether the cell fits this machine (or the budgets given) and what
// to change when not; with --profile, the predicted step time and its bottleneck.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "runtime/device/device.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/estimate/estimate.h"

namespace strata::tools {
namespace {

using runtime::tiers::StateClass;
using runtime::tiers::Tier;

struct EstimateOptions {
  std::string model_path, preset;
  DeviceFlags device;
  int world = 1;
  int batch = 0;  // 0: the config's micro-batch, else 1
  int seq_len = 0;
  bool activation_checkpointing = false;
  std::string pinned_memory;
  std::string nvme_path;
  int stage = -1;  // -1: every stage
  std::string profile_path;
  std::string dtype;  // "": the config's (bf16 without --config)
  bool json = false;
};

std::uint64_t size_flag(const std::string& text, const char* flag) {
  const std::optional<std::uint64_t> bytes = parse_bytes(text);
  if (!bytes) throw Error(std::string(flag) + " '" + text + "' is not a size", flag, "e.g. 64GiB");
  return *bytes;
}

// The backend and the device budget: --device-memory, else strata.device_memory, else what the
// backend would take (host: its default arena; cuda: the first GPU's free memory less the reserve).
void resolve_device(const EstimateOptions& o, const runtime::config::Config& file, EstimateInputs& in) {
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

std::string cell_bytes(std::uint64_t b) { return b == 0 ? "-" : format_bytes(b); }

void print_table(const EstimateOptions& o, const EstimateInputs& in, const Estimate& e) {
  const models::ModelSpec& m = *in.model;
  std::printf("strata estimate: %s, %lld parameters, %s, micro-batch %d x %d%s, %d rank(s)%s\n",
              m.describe().c_str(), static_cast<long long>(m.num_params()),
              std::string(dtype_name(e.dtype)).c_str(), e.batch, e.seq_len,
              e.gas > 1 ? fmt::format(" x {} accumulation steps", e.gas).c_str() : "", in.world,
              in.activation_checkpointing ? ", activation checkpointing" : "");
  std::printf("budgets per rank: device %s (%s), pinned host %s (%s), nvme %s free (%s)\n\n",
              format_bytes(in.budgets.device).c_str(), in.budgets.device_source.c_str(),
              format_bytes(in.budgets.pinned).c_str(), in.budgets.pinned_source.c_str(),
              format_bytes(in.budgets.nvme).c_str(), in.budgets.nvme_source.c_str());
  std::string head = fmt::format("{:<42} {:>10} {:>10} {:>10} {:>13} {:>13} {:>12}  {}", "stage, placement", "device",
                                 "pinned", "nvme", "model states", "ZeRO paper", "comm/step", "fits");
  if (in.profile) head += fmt::format("   {:>9} {:>10}  {}", "step", "tokens/s", "bottleneck");
  std::printf("%s\n", head.c_str());
  for (const EstimateRow& r : e.rows) {
    if (!r.error.empty()) {
      std::printf("%-42s refused: %s\n", r.placement.label().c_str(), r.error.c_str());
      continue;
    }
    std::string line = fmt::format(
        "{:<42} {:>10} {:>10} {:>10} {:>13} {:>13} {:>12}  {}", r.placement.label(),
        cell_bytes(r.bytes.tier_bytes(Tier::device)), cell_bytes(r.bytes.tier_bytes(Tier::pinned)),
        cell_bytes(r.bytes.tier_bytes(Tier::nvme)), format_bytes(r.model_states_bytes), format_bytes(r.formula_bytes),
        r.collective_bytes > 0 ? format_bytes(static_cast<std::uint64_t>(r.collective_bytes)) : "-",
        r.fits ? "yes" : "no");
    if (r.step) {
      const double tokens = static_cast<double>(e.batch) * e.seq_len * e.gas * in.world;
      line += fmt::format("   {:>7.0f}ms {:>10.0f}  {}", r.step->step_ms, tokens / (r.step->step_ms / 1e3),
                          r.step->bottleneck);
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("\nby kind (parameters / gradients / optimizer states / activations / buffers):\n");
  for (const EstimateRow& r : e.rows) {
    if (!r.error.empty()) continue;
    std::string line = fmt::format("  {:<40}", r.placement.label());
    for (Tier t : {Tier::device, Tier::pinned, Tier::nvme}) {
      if (r.bytes.tier_bytes(t) == 0) continue;
      line += fmt::format(" {}:", t == Tier::pinned ? "pinned" : runtime::tiers::tier_name(t));
      for (int c = 0; c < runtime::tiers::kStateClasses; ++c) {
        line += (c == 0 ? " " : " / ") + cell_bytes(r.bytes.at(t, static_cast<StateClass>(c)));
      }
    }
    std::printf("%s\n", line.c_str());
  }
  bool any_short = false;
  for (const EstimateRow& r : e.rows) {
    if (r.error.empty() && !r.fits) {
      if (!any_short) std::printf("\nwhat does not fit, and what to change:\n");
      any_short = true;
      std::printf("  %-40s %s\n", r.placement.label().c_str(), r.advice.c_str());
    }
  }
  std::printf(
      "\nmodel states are parameters, gradients and optimizer states over all tiers. The ZeRO paper counts\n"
      "(2d + 12) bytes a parameter (d: the compute dtype's bytes; 12: fp32 master, exp_avg, exp_avg_sq) split\n"
      "as its stages split them, over Ψ = %llu: the parameters padded to %d equal shards a module. strata keeps\n"
      "an fp32 gradient accumulator shard (4Ψ/N) where the paper keeps a d-byte gradient (dΨ at stage 1,\n"
      "dΨ/N at 2-3), rounds pinned buffers to 4 KiB pages and NVMe extents to aio.block_size. Device\n"
      "buffers count what the engine takes from the budget for gathered parameters and gradients.\n",
      static_cast<unsigned long long>(e.rows.empty() ? 0 : e.rows.front().psi_padded), in.world);
  (void)o;
}

nlohmann::json row_json(const EstimateInputs& in, const Estimate& e, const EstimateRow& r) {
  auto word = [](runtime::config::OffloadDevice d) { return std::string(runtime::config::to_string(d)); };
  nlohmann::json j = {{"stage", r.placement.stage},
                      {"world", r.world},
                      {"offload_param", word(r.placement.param)},
                      {"offload_optimizer", word(r.placement.optimizer)},
                      {"batch", e.batch},
                      {"seq_len", e.seq_len},
                      {"gradient_accumulation_steps", e.gas}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    j["fits"] = false;
    return j;
  }
  const char* tier_keys[] = {"device", "pinned", "nvme"};
  const char* kind_keys[] = {"parameters", "gradients", "optimizer_states", "activations", "buffers"};
  nlohmann::json bytes, by_kind, need;
  for (int t = 0; t < runtime::tiers::kTiers; ++t) {
    bytes[tier_keys[t]] = r.bytes.tier_bytes(static_cast<Tier>(t));
    need[tier_keys[t]] = r.need[t];
    nlohmann::json kinds;
    for (int c = 0; c < runtime::tiers::kStateClasses; ++c) kinds[kind_keys[c]] = r.bytes.bytes[t][c];
    by_kind[tier_keys[t]] = kinds;
  }
  j["model_states_bytes"] = r.model_states_bytes;
  j["formula_bytes"] = r.formula_bytes;
  j["psi_padded"] = r.psi_padded;
  j["bytes"] = bytes;
  j["bytes_by_kind"] = by_kind;
  j["needed_bytes"] = need;
  j["budget_bytes"] = {{"device", in.budgets.device}, {"pinned", in.budgets.pinned}, {"nvme", in.budgets.nvme}};
  j["collective_bytes"] = r.collective_bytes;
  j["fits"] = r.fits;
  if (!r.fits) j["advice"] = r.advice;
  if (r.step) {
    nlohmann::json res;
    for (const auto& [name, ms] : r.step->resource_ms) res[name] = ms;
    const double tokens = static_cast<double>(e.batch) * e.seq_len * e.gas * in.world;
    j["predicted"] = {{"step_ms", r.step->step_ms},
                      {"tokens_per_s", tokens / (r.step->step_ms / 1e3)},
                      {"bottleneck", r.step->bottleneck},
                      {"resource_ms", res}};
  }
  return j;
}

void run_estimate(const EstimateOptions& o) {
  const models::ModelSpecPtr model = models::model_from_flags(o.model_path, o.preset);
  // Without --config: DeepSpeed's defaults, in bf16 (what a model of this size trains in).
  const runtime::config::ParsedConfig parsed =
      o.device.config_path.empty() ? runtime::config::parse_config(R"({"bf16": {"enabled": true}})", "(defaults)")
                                   : runtime::config::load_config_file(o.device.config_path);
  EstimateInputs in;
  in.model = model.get();
  in.config = parsed.config;
  if (!o.dtype.empty()) {
    in.config.bf16.enabled = o.dtype == "bf16";
    in.config.fp16.enabled = o.dtype == "fp16";
  }
  if (o.world < 1) throw Error("--world " + std::to_string(o.world), "--world", "give 1 or more ranks");
  in.world = o.world;
  if (o.batch > 0) {
    in.config.train_micro_batch_size_per_gpu = static_cast<std::uint64_t>(o.batch);
    in.config.train_batch_size.reset();
  }
  in.batch = o.batch > 0 ? o.batch : 1;
  in.seq_len = o.seq_len;
  if (o.seq_len > model->max_positions()) {
    throw Error("--seq-len " + std::to_string(o.seq_len) + " is longer than the model's longest sequence (" +
                    std::to_string(model->max_positions()) + ")",
                "--seq-len", "give at most " + std::to_string(model->max_positions()));
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
  std::vector<Placement> placements;
  for (const Placement& p : all_placements()) {
    if (o.stage < 0 || p.stage == o.stage) placements.push_back(p);
  }
  if (placements.empty()) throw Error("--stage " + std::to_string(o.stage), "--stage", "give 0, 1, 2 or 3");
  // The NVMe folders of the nvme cells: the config's, else --nvme-path.
  runtime::config::Config nvme_cell = cell_config(in, {3, runtime::config::OffloadDevice::kNvme,
                                                       runtime::config::OffloadDevice::kNvme});
  const std::vector<std::string> paths = runtime::tiers::nvme_paths(nvme_cell);
  in.budgets.nvme = free_nvme_bytes(paths);
  in.budgets.nvme_source.clear();
  for (const std::string& p : paths) in.budgets.nvme_source += (in.budgets.nvme_source.empty() ? "in " : ", ") + p;
  if (!o.profile_path.empty()) in.profile = runtime::estimate::read_machine_profile(o.profile_path);
  // The pinned budget: strata.pinned_memory as the run resolves it.
  in.budgets.pinned = cell_config(in, {0, runtime::config::OffloadDevice::kNone, runtime::config::OffloadDevice::kNone})
                          .strata.pinned_memory_bytes;
  const Estimate e = make_estimate(in, placements);
  if (o.json) {
    for (const EstimateRow& r : e.rows) std::printf("%s\n", row_json(in, e, r).dump().c_str());
    return;
  }
  print_table(o, in, e);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "estimate", "memory per tier (and, with --profile, step time) of every ZeRO stage and placement, before a run");
  cmd->add_option("--model", o->model_path, "a Hugging Face model folder or its config.json");
  cmd->add_option("--preset", o->preset, "a built-in model: " + [] {
    std::string s;
    for (const std::string& n : models::preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }());
  cmd->add_option("--world", o->world, "ranks (GPUs) the states are sharded over")->capture_default_str();
  cmd->add_option("--batch", o->batch, "micro-batch per rank (default: the config's, else 1)");
  cmd->add_option("--seq-len", o->seq_len, "tokens per sequence (default: min(the model's longest, 1024))");
  cmd->add_option("--dtype", o->dtype, "compute dtype (default: the config's; bf16 without --config)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd->add_flag("--activation-checkpointing", o->activation_checkpointing, "recompute activations in backward");
  cmd->add_option("--pinned-memory", o->pinned_memory, "pinned host budget (default: strata.pinned_memory, else half of RAM)");
  cmd->add_option("--nvme-path", o->nvme_path, "swap folder of the nvme cells when the config names none (default .)");
  cmd->add_option("--stage", o->stage, "only this ZeRO stage's rows");
  cmd->add_option("--profile", o->profile_path, "a machine profile (strata bench machine): predict each row's step");
  cmd->add_flag("--json", o->json, "one JSON object per stage x placement");
  add_device_flags(*cmd, o->device);
  cmd->callback([o] { run_estimate(*o); });
}

}  // namespace strata::tools

// strata estimate (--model DIR|config.json | --preset NAME) [--config ds.json] [--world N]
//                 [--ranks-per-node N] [--batch B] [--seq-len T] [--activation-checkpointing]
//                 [--device host|cuda|auto] [--device-memory SIZE] [--pinned-memory SIZE]
//                 [--nvme-path DIR] [--stage S]
//                 [--dtype bf16|fp16|fp32] [--profile machine.json]
//                 [--recommend] [--json] [--svg DIR]
// Before a run: per rank, for every ZeRO stage x placement, the bytes in each tier (device,
// pinned host, NVMe) a plan needs, split by class of state, from the plan code `strata train` runs
// (runtime/estimate/estimate.h); the ZeRO paper's formula beside strata's model states; the
// collective bytes per step; whether the cell fits this machine (or the budgets given) and what
// to change when not; with --profile, the predicted step time and its bottleneck. For a mixture
// of experts, the active parameters and its expected expert traffic (tools/estimate/estimate_report.h).
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
#include "runtime/estimate/estimate.h"
#include "runtime/estimate/recommend.h"
#include "runtime/tiers/plan.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/estimate/estimate_report.h"
#include "tools/estimate_flags.h"

namespace strata::tools {
namespace {

using runtime::estimate::Candidate;
using runtime::estimate::Estimate;
using runtime::estimate::EstimateInputs;
using runtime::estimate::EstimateRow;
using runtime::estimate::Placement;
using runtime::estimate::Recommendation;
using runtime::tiers::StateClass;
using runtime::tiers::Tier;

struct EstimateOptions {
  EstimateFlags estimate;
  int stage = -1;  // -1: every stage
  std::string svg_dir;
  bool json = false;
  bool recommend = false;
};

std::string cell_bytes(std::uint64_t b) { return b == 0 ? "-" : format_bytes(b); }

// The rank-per-node clause of the budgets line: "" for one rank.
std::string node_clause(const EstimateInputs& in) {
  if (in.world <= 1) return "";
  const int n = in.budgets.ranks_per_node;
  return fmt::format(", {} {} a node ({}; pinned host and nvme are the node's, shared)", n, n == 1 ? "rank" : "ranks",
                     in.budgets.ranks_per_node_source);
}

void print_table(const EstimateInputs& in, const Estimate& e) {
  std::printf("strata estimate: %s, %s, %s, micro-batch %d x %d%s, %d rank(s)%s\n",
              in.model.describe.c_str(), parameters_clause(in.model).c_str(),
              std::string(dtype_name(e.dtype)).c_str(), e.batch, e.seq_len,
              e.gas > 1 ? fmt::format(" x {} accumulation steps", e.gas).c_str() : "", in.world,
              in.activation_checkpointing ? ", activation checkpointing" : "");
  std::printf("budgets per rank%s: device %s (%s), pinned host %s (%s), nvme %s free (%s)\n\n",
              node_clause(in).c_str(), format_bytes(in.budgets.device).c_str(), in.budgets.device_source.c_str(),
              format_bytes(in.budgets.pinned).c_str(), in.budgets.pinned_source.c_str(),
              format_bytes(in.budgets.nvme).c_str(), in.budgets.nvme_source.c_str());
  // Each tier's column is what the plan needs (fits is decided on it); "grows to" is what the run
  // allocates on the device when the budget has room for more transient buffers.
  std::string head = fmt::format("{:<45} {:>10} {:>10} {:>10} {:>10} {:>13} {:>13} {:>12}  {}", "stage, placement",
                                 runtime::tiers::tier_key(Tier::device), "grows to", runtime::tiers::tier_key(Tier::pinned),
                                 runtime::tiers::tier_key(Tier::nvme), "model states", "ZeRO paper", "comm/step", "fits");
  if (in.profile) head += fmt::format("   {:>9} {:>10}  {}", "step", "tokens/s", "bottleneck");
  std::printf("%s\n", head.c_str());
  bool any_growth = false;
  for (const EstimateRow& r : e.rows) {
    if (!r.error.empty()) {
      std::printf("%-45s refused: %s\n", r.placement.label().c_str(), r.error.c_str());
      continue;
    }
    const std::uint64_t use = r.device_use_bytes();
    any_growth = any_growth || use > r.need[0];
    std::string line = fmt::format(
        "{:<45} {:>10} {:>10} {:>10} {:>10} {:>13} {:>13} {:>12}  {}", r.placement.label(), cell_bytes(r.need[0]),
        use > r.need[0] ? format_bytes(use) : "", cell_bytes(r.need[1]), cell_bytes(r.need[2]),
        format_bytes(r.model_states_bytes), format_bytes(r.formula_bytes),
        r.collective_bytes > 0 ? format_bytes(static_cast<std::uint64_t>(r.collective_bytes)) : "-",
        r.fits ? "yes" : "no");
    if (r.step) {
      const double tokens = static_cast<double>(e.batch) * e.seq_len * e.gas * in.world;
      line += fmt::format("   {:>7.0f}ms {:>10.0f}  {}", r.step->step_ms, tokens / (r.step->step_ms / 1e3),
                          r.step->bottleneck);
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("\nby kind, what the plan needs (parameters / gradients / optimizer states / activations / buffers):\n");
  for (const EstimateRow& r : e.rows) {
    if (!r.error.empty()) continue;
    std::string line = fmt::format("  {:<43}", r.placement.label());
    for (Tier t : {Tier::device, Tier::pinned, Tier::nvme}) {
      if (r.minimum.tier_bytes(t) == 0) continue;
      line += fmt::format(" {}:", runtime::tiers::tier_key(t));
      for (int c = 0; c < runtime::tiers::kStateClasses; ++c) {
        line += (c == 0 ? " " : " / ") + cell_bytes(r.minimum.at(t, static_cast<StateClass>(c)));
      }
    }
    std::printf("%s\n", line.c_str());
  }
  bool any_short = false;
  for (const EstimateRow& r : e.rows) {
    if (r.error.empty() && !r.fits) {
      if (!any_short) std::printf("\nwhat does not fit, and what to change:\n");
      any_short = true;
      std::printf("  %-43s %s\n", r.placement.label().c_str(), r.advice.c_str());
    }
  }
  std::printf(
      "\ndevice, pinned and nvme are what each plan needs to start (fits is decided on them; --json's\n"
      "needed_bytes); the device's is its least working set, one module's gathered parameters and\n"
      "gradients at a time, and %s of scratch kept free.%s\n",
      format_bytes(runtime::tiers::kDeviceScratchBytes).c_str(),
      any_growth ? " With room in the budget the run takes more: \"grows to\"\n"
                   "is what it allocates with this budget (--json's bytes.device), its buffers for gathered\n"
                   "parameters and gradients grown into the free device memory, up to every module's at once,\n"
                   "so fetches run further ahead."
                 : "");
  // The accumulators' dtype decides how far strata's model states are from the paper's.
  const DType grad_dtype = runtime::config::to_dtype(in.config.data_types.grad_accum_dtype);
  const std::string accumulators =
      grad_dtype == DType::f32
          ? "an fp32 gradient accumulator shard (4Ψ/N) where the paper keeps a d-byte gradient (dΨ at stage 1,\n"
            "dΨ/N at 2-3; data_types.grad_accum_dtype \"bf16\" gives the paper's 2 bytes)"
          : fmt::format("a {} gradient accumulator shard (2Ψ/N, data_types.grad_accum_dtype) where the paper keeps\n"
                        "a d-byte gradient (dΨ at stage 1, dΨ/N at 2-3)",
                        dtype_name(grad_dtype));
  std::printf(
      "model states are parameters, gradients and optimizer states over all tiers. The ZeRO paper counts\n"
      "(2d + 12) bytes a parameter (d: the compute dtype's bytes; 12: fp32 master, exp_avg, exp_avg_sq) split\n"
      "as its stages split them, over Ψ = %llu: the parameters padded to %d equal shards a module. strata keeps\n"
      "%s, rounds pinned buffers to 4 KiB pages and NVMe extents to aio.block_size.\n",
      static_cast<unsigned long long>(e.rows.empty() ? 0 : e.rows.front().psi_padded), in.world,
      accumulators.c_str());
  const std::string moe = moe_section(in, e);
  if (!moe.empty()) std::printf("\n%s", moe.c_str());
}

// The pick, what it changes in a config, and the runners-up.
void print_recommendation(const EstimateInputs& in, const Recommendation& r, bool json) {
  const nlohmann::json config = nlohmann::json::parse(runtime::config::config_to_json(r.config));
  nlohmann::json keys = {{"train_micro_batch_size_per_gpu", config["train_micro_batch_size_per_gpu"]},
                         {"gradient_accumulation_steps", config["gradient_accumulation_steps"]},
                         {"zero_optimization",
                          {{"stage", config["zero_optimization"]["stage"]},
                           {"offload_param", config["zero_optimization"]["offload_param"]},
                           {"offload_optimizer", config["zero_optimization"]["offload_optimizer"]}}}};
  if (json) {
    Estimate e;
    e.batch = r.pick.micro_batch;
    e.seq_len = runtime::estimate::sequence_length(in);
    e.gas = r.pick.gas;
    e.dtype = runtime::config::compute_dtype(r.config);
    nlohmann::json j = estimate_row_json(in, e, r.pick.row);
    j["ratio"] = r.pick.ratio;
    j["considered"] = r.considered;
    j["fitting"] = r.fitting.size();
    j["why"] = r.why;
    j["batch_why"] = r.batch_why;
    j["config"] = keys;
    std::printf("%s\n", nlohmann::json{{"recommended", j}}.dump().c_str());
    return;
  }
  std::printf("\nrecommended: %s\n  %s\n  %s\n  config keys: %s\n", r.pick.label().c_str(), r.why.c_str(),
              r.batch_why.c_str(), keys.dump().c_str());
  for (std::size_t i = 1; i < r.fitting.size() && i < 5; ++i) {
    const Candidate& c = r.fitting[i];
    std::printf("  then: %s%s\n", c.label().c_str(),
                c.row.step ? fmt::format(" ({:.0f} tokens/s predicted)", c.score).c_str() : "");
  }
}

void run_estimate(const EstimateOptions& o) {
  const models::ModelSpecPtr model = models::model_from_flags(o.estimate.model_path, o.estimate.preset);
  const EstimateInputs in = estimate_inputs(o.estimate, *model);
  if (o.recommend) {
    // NVMe only where the config or --nvme-path names a folder for it.
    const bool nvme = !o.estimate.nvme_path.empty() || runtime::estimate::names_nvme(in.config);
    const Recommendation r = runtime::estimate::recommend(in, nvme);
    if (!o.json) print_table(in, runtime::estimate::make_estimate(in, runtime::estimate::all_placements()));
    print_recommendation(in, r, o.json);
    return;
  }
  std::vector<Placement> placements;
  for (const Placement& p : runtime::estimate::all_placements()) {
    if (o.stage < 0 || p.stage == o.stage) placements.push_back(p);
  }
  if (placements.empty()) throw Error("--stage " + std::to_string(o.stage), "--stage", "give 0, 1, 2 or 3");
  const Estimate e = runtime::estimate::make_estimate(in, placements);
  if (o.json) {
    for (const EstimateRow& r : e.rows) std::printf("%s\n", estimate_row_json(in, e, r).dump().c_str());
  } else {
    print_table(in, e);
  }
  if (!o.svg_dir.empty()) write_estimate_charts(o.svg_dir, in, e);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "estimate", "memory per tier (and, with --profile, step time) of every ZeRO stage and placement, before a run");
  add_estimate_flags(*cmd, o->estimate);
  cmd->add_option("--stage", o->stage, "only this ZeRO stage's rows");
  cmd->add_option("--svg", o->svg_dir, "write the charts here (memory per tier by kind; predicted step per resource)");
  cmd->add_flag("--json", o->json, "one JSON object per stage x placement (with --recommend: the pick)");
  cmd->add_flag("--recommend", o->recommend,
                "pick the stage, placements, offload ratio and micro-batch that fit and (with --profile) run fastest");
  cmd->callback([o] { run_estimate(*o); });
}

}  // namespace strata::tools

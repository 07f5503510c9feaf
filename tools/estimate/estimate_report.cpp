#include "tools/estimate/estimate_report.h"

#include <cstdio>

#include "tools/charts/metrics_charts.h"

namespace strata::tools {

using runtime::estimate::Budgets;
using runtime::estimate::Estimate;
using runtime::estimate::EstimateInputs;
using runtime::estimate::EstimateRow;
using runtime::tiers::StateClass;
using runtime::tiers::Tier;

nlohmann::json estimate_row_json(const EstimateInputs& in, const Estimate& e, const EstimateRow& r) {
  // Placements in DeepSpeed's words, as the config says them (and placement_label() prints them).
  auto word = [](runtime::config::OffloadDevice d) { return std::string(runtime::config::to_string(d)); };
  nlohmann::json j = {{"stage", r.placement.stage},
                      {"world", r.world},
                      {"ranks_per_node", in.budgets.ranks_per_node},
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
  const char* kind_keys[] = {"parameters", "gradients", "optimizer_states", "activations", "buffers"};
  nlohmann::json bytes, by_kind, need;
  for (int t = 0; t < runtime::tiers::kTiers; ++t) {
    const char* key = runtime::tiers::tier_key(static_cast<Tier>(t));
    bytes[key] = r.bytes.tier_bytes(static_cast<Tier>(t));
    need[key] = r.need[t];
    nlohmann::json kinds;
    for (int c = 0; c < runtime::tiers::kStateClasses; ++c) kinds[kind_keys[c]] = r.bytes.bytes[t][c];
    by_kind[key] = kinds;
  }
  j["model_states_bytes"] = r.model_states_bytes;
  j["formula_bytes"] = r.formula_bytes;
  j["psi_padded"] = r.psi_padded;
  j["bytes"] = bytes;
  j["bytes_by_kind"] = by_kind;
  j["needed_bytes"] = need;
  using runtime::tiers::tier_key;
  j["budget_bytes"] = {{tier_key(Tier::device), in.budgets.device},
                       {tier_key(Tier::pinned), in.budgets.pinned},
                       {tier_key(Tier::nvme), in.budgets.nvme}};
  j["node_budget_bytes"] = {{tier_key(Tier::pinned), in.budgets.node_pinned},
                            {tier_key(Tier::nvme), in.budgets.node_nvme}};
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

charts::MemoryCell memory_cell(const EstimateRow& row, const Budgets& budgets, bool at_least) {
  const runtime::tiers::Footprint& bytes = at_least ? row.minimum : row.bytes;
  charts::MemoryCell cell;
  cell.label = row.placement.label();
  const std::uint64_t budget[] = {budgets.device, budgets.pinned, budgets.nvme};
  for (Tier t : {Tier::device, Tier::pinned, Tier::nvme}) {
    charts::TierBytes tb;
    tb.tier = runtime::tiers::tier_key(t);
    for (int c = 0; c < runtime::tiers::kStateClasses; ++c) {
      tb.bytes_by_kind.emplace_back(runtime::tiers::state_class_name(static_cast<StateClass>(c)),
                                    bytes.at(t, static_cast<StateClass>(c)));
    }
    if (budget[static_cast<int>(t)] > 0) tb.budget_bytes = budget[static_cast<int>(t)];
    cell.tiers.push_back(std::move(tb));
  }
  return cell;
}

void write_estimate_charts(const std::string& dir, const EstimateInputs& in, const Estimate& e) {
  charts::make_chart_dir(dir);
  std::vector<charts::MemoryCell> memory;
  std::vector<charts::StepTimeCell> steps;
  for (const EstimateRow& r : e.rows) {
    if (!r.error.empty()) continue;
    memory.push_back(memory_cell(r, in.budgets, /*at_least=*/true));
    if (r.step) {
      charts::StepTimeCell s;
      s.label = r.placement.label();
      s.busy_ms = r.step->resource_ms;
      s.predicted_step_ms = r.step->step_ms;
      steps.push_back(std::move(s));
    }
  }
  charts::write_memory_chart(dir + "/memory.svg", memory,
                             "Bytes per tier and rank a plan needs, by kind (strata estimate)");
  std::fprintf(stderr, "chart: %s/memory.svg\n", dir.c_str());
  if (!steps.empty()) {
    charts::write_step_time_chart(dir + "/step_time.svg", steps, "Predicted time per resource and step");
    std::fprintf(stderr, "chart: %s/step_time.svg\n", dir.c_str());
  }
}

}  // namespace strata::tools

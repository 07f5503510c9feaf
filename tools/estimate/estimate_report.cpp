#include "tools/estimate/estimate_report.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "core/units.h"
#include "runtime/estimate/cpu_experts.h"
#include "runtime/estimate/moe_traffic.h"
#include "tools/charts/metrics_charts.h"

namespace strata::tools {

using runtime::estimate::Budgets;
using runtime::estimate::Estimate;
using runtime::estimate::EstimateInputs;
using runtime::estimate::EstimateModel;
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
  if (in.model.routing.moe()) j["moe"] = moe_json(in, e);
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

std::string parameters_clause(const EstimateModel& model) {
  std::string out = fmt::format("{} parameters", model.num_params);
  if (model.routing.moe()) out += fmt::format(" ({} active a token)", model.routing.active_params);
  return out;
}

std::vector<int> moe_decode_batches(int run_batch) {
  std::vector<int> out = {1, 4, 16, 64};
  if (run_batch >= 1 && std::find(out.begin(), out.end(), run_batch) == out.end()) {
    out.insert(std::upper_bound(out.begin(), out.end(), run_batch), run_batch);
  }
  return out;
}

namespace {

runtime::estimate::MoeBytes model_moe_bytes(const EstimateInputs& in, const Estimate& e) {
  return runtime::estimate::moe_bytes(in.model.module_numels, in.model.routed_modules, in.model.routing, e.dtype);
}

std::string bytes_text(double b) { return format_bytes(static_cast<std::uint64_t>(b + 0.5)); }

// --moe-cpu-experts auto's row limit on a cuda profile with the host matmul rates; none otherwise
// (no profile, an earlier profile, or the host backend, where auto is every row count).
std::optional<std::int64_t> host_expert_rows(const EstimateInputs& in, const Estimate& e,
                                             const runtime::estimate::MoeBytes& bytes) {
  if (!in.profile || in.profile->backend != "cuda" || in.profile->cpu_matmul_bytes_per_s <= 0 ||
      in.profile->cpu_matmul_flops_per_s <= 0) {
    return std::nullopt;
  }
  const std::uint64_t es = dtype_size(e.dtype);
  return runtime::estimate::cpu_expert_max_rows(*in.profile, bytes.one_expert_bytes / es, in.model.hidden_size, es);
}

}  // namespace

std::string moe_section(const EstimateInputs& in, const Estimate& e) {
  const runtime::estimate::MoeRouting& moe = in.model.routing;
  if (!moe.moe()) return "";
  const runtime::estimate::MoeBytes bytes = model_moe_bytes(in, e);
  std::string out = fmt::format(
      "mixture of experts: {} experts in each of {} sparse layers, {} per token; one expert {} in {}\n"
      "  (all experts {} of the model's {})\n",
      moe.experts, moe.sparse_layers, moe.per_token, format_bytes(bytes.one_expert_bytes), dtype_name(e.dtype),
      format_bytes(bytes.expert_bytes), format_bytes(bytes.non_expert_bytes + bytes.expert_bytes));
  out += "  decoding b sequences, every module streamed; a sparse layer picks E (1 - (1 - k/E)^b) experts:\n";
  out += fmt::format("  {:>7} {:>14} {:>12} {:>12}   {:>25} {:>12} {:>7}\n", "batch", "experts/layer", "bytes/step",
                     "bytes/token", "every expert: bytes/step", "bytes/token", "ratio");
  for (int b : moe_decode_batches(e.batch)) {
    const runtime::estimate::DecodeTraffic t = runtime::estimate::decode_traffic(moe, bytes, b);
    out += fmt::format("  {:>7} {:>14.2f} {:>12} {:>12}   {:>25} {:>12} {:>7.3f}\n", b, t.experts_per_layer,
                       bytes_text(t.step_bytes), bytes_text(t.token_bytes), bytes_text(t.dense_step_bytes),
                       bytes_text(t.dense_token_bytes), t.step_bytes / t.dense_step_bytes);
  }
  const runtime::estimate::TrainTraffic t = runtime::estimate::train_traffic(moe, bytes, e.batch, e.seq_len);
  out += fmt::format(
      "  training, micro-batch {} x {}: {:.2f} experts a sparse layer fetched in forward and again in backward;\n"
      "  expert bytes fetched a step{} {} (every expert: {}; ratio {:.3f})\n",
      e.batch, e.seq_len, t.experts_per_layer,
      e.gas > 1 ? fmt::format(" ({} micro-batches)", e.gas) : "", bytes_text(t.expert_bytes * e.gas),
      bytes_text(t.all_expert_bytes * e.gas), t.fraction());
  if (const std::optional<std::int64_t> rows = host_expert_rows(in, e, bytes)) {
    out += *rows > 0
               ? fmt::format("  with --moe-cpu-experts auto, an expert in pinned memory with at most {} row(s) runs on the "
                             "host\n  (the profile's host matmul beats copying it: runtime/estimate/cpu_experts.h)\n",
                             *rows)
               : "  with --moe-cpu-experts auto, every expert is copied to the device (the profile's link copies one\n"
                 "  faster than its host matmul reads it: runtime/estimate/cpu_experts.h)\n";
  }
  out +=
      "  expected values under uniform routing, tokens independent: the most such a router can expect\n"
      "  (skewed routing picks fewer distinct experts), not a bound for routers that spread tokens on purpose\n"
      "  (runtime/estimate/moe_traffic.h). Bytes are the compute dtype's, gathered on the device.\n";
  return out;
}

nlohmann::json moe_json(const EstimateInputs& in, const Estimate& e) {
  const runtime::estimate::MoeRouting& moe = in.model.routing;
  if (!moe.moe()) return nullptr;
  const runtime::estimate::MoeBytes bytes = model_moe_bytes(in, e);
  nlohmann::json decode = nlohmann::json::array();
  for (int b : moe_decode_batches(e.batch)) {
    const runtime::estimate::DecodeTraffic t = runtime::estimate::decode_traffic(moe, bytes, b);
    decode.push_back({{"batch", b},
                      {"experts_per_layer", t.experts_per_layer},
                      {"step_bytes", t.step_bytes},
                      {"token_bytes", t.token_bytes},
                      {"every_expert_step_bytes", t.dense_step_bytes},
                      {"every_expert_token_bytes", t.dense_token_bytes}});
  }
  const runtime::estimate::TrainTraffic t = runtime::estimate::train_traffic(moe, bytes, e.batch, e.seq_len);
  const std::optional<std::int64_t> host_rows = host_expert_rows(in, e, bytes);
  return {{"experts", moe.experts},
          {"experts_per_token", moe.per_token},
          {"sparse_layers", moe.sparse_layers},
          {"num_params", in.model.num_params},
          {"active_params", moe.active_params},
          {"dtype", std::string(dtype_name(e.dtype))},
          {"non_expert_bytes", bytes.non_expert_bytes},
          {"expert_bytes", bytes.expert_bytes},
          {"one_expert_bytes", bytes.one_expert_bytes},
          {"host_expert_rows", host_rows ? nlohmann::json(*host_rows) : nlohmann::json(nullptr)},
          {"decode", decode},
          {"train",
           {{"tokens", t.tokens},
            {"experts_per_layer", t.experts_per_layer},
            {"expert_bytes_per_step", t.expert_bytes * e.gas},
            {"every_expert_bytes_per_step", t.all_expert_bytes * e.gas}}}};
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

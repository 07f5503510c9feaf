#pragma once
// How `strata estimate` and `strata compare` show an estimate's rows (runtime/estimate/estimate.h): one JSON object per row
// (the fields `--json` documents) and the SVG charts of `--svg` (tools/charts).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/charts/charts.h"
#include "runtime/estimate/estimate.h"

namespace strata::tools {

// stage, world, ranks_per_node, offload_param, offload_optimizer (none / cpu / nvme), batch,
// seq_len, gradient_accumulation_steps; then either error, or model_states_bytes, formula_bytes,
// psi_padded, bytes {device, pinned, nvme} (what the run allocates with the budgets: the device's
// transient buffers grown), bytes_by_kind {tier: {parameters, gradients, optimizer_states,
// activations, buffers}}, needed_bytes (the least each tier must have: the table's columns;
// fits is decided on it), budget_bytes (per rank), node_budget_bytes {pinned, nvme} (the node's,
// before the division among ranks_per_node), collective_bytes, fits, advice (when it does not
// fit) and, with a profile, predicted {step_ms, tokens_per_s, bottleneck, resource_ms}; for a
// mixture of experts, moe (moe_json below).
nlohmann::json estimate_row_json(const runtime::estimate::EstimateInputs& in, const runtime::estimate::Estimate& e,
                                 const runtime::estimate::EstimateRow& row);

// "N parameters", or for a mixture of experts "N parameters (M active a token)": the header's.
std::string parameters_clause(const runtime::estimate::EstimateModel& model);

// A mixture of experts' traffic (runtime/estimate/moe_traffic.h) at the estimate's dtype: the
// decoding batches of the table (1, 4, 16, 64 and the run's micro-batch, ascending, once each)
// and the training micro-batch.
std::vector<int> moe_decode_batches(int run_batch);
// The "mixture of experts" section of the table ("" for a dense model): experts per sparse
// layer, k, an expert's bytes; per decoding batch the expected experts a layer picks, bytes per
// step and per token beside streaming every expert; the training micro-batch's expected experts
// fetched a layer and expert bytes per step beside all.
std::string moe_section(const runtime::estimate::EstimateInputs& in, const runtime::estimate::Estimate& e);
// The same facts as JSON (null for a dense model): experts, experts_per_token, sparse_layers,
// num_params, active_params, dtype, non_expert_bytes, expert_bytes (all experts), one_expert_bytes,
// decode [{batch, experts_per_layer, step_bytes, token_bytes, every_expert_step_bytes,
// every_expert_token_bytes}], train {tokens, experts_per_layer, expert_bytes_per_step,
// every_expert_bytes_per_step} (forward and backward, x gradient_accumulation_steps).
nlohmann::json moe_json(const runtime::estimate::EstimateInputs& in, const runtime::estimate::Estimate& e);

// The row's bytes per tier by kind, with the budgets, as the memory chart draws a cell: what the
// run allocates (row.bytes; strata compare, beside what was measured), or with `at_least` what
// the plan needs (row.minimum; strata estimate).
charts::MemoryCell memory_cell(const runtime::estimate::EstimateRow& row, const runtime::estimate::Budgets& budgets,
                               bool at_least = false);

// DIR/memory.svg (every row that could be planned: the bytes it needs per tier stacked by kind,
// budgets as lines) and, with a profile, DIR/step_time.svg (each row's predicted time per resource and
// step). Creates DIR.
void write_estimate_charts(const std::string& dir, const runtime::estimate::EstimateInputs& in,
                           const runtime::estimate::Estimate& e);

}  // namespace strata::tools

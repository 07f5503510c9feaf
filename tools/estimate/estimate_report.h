#pragma once
// How `strata estimate` and `strata compare` show an estimate's rows (runtime/estimate/estimate.h): one JSON object per row
// (the fields `--json` documents) and the SVG charts of `--svg` (tools/charts).
#include <string>

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
// fit) and, with a profile, predicted {step_ms, tokens_per_s, bottleneck, resource_ms}.
nlohmann::json estimate_row_json(const runtime::estimate::EstimateInputs& in, const runtime::estimate::Estimate& e,
                                 const runtime::estimate::EstimateRow& row);

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

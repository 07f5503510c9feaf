#pragma once
// How `strata estimate` and `strata compare` show an estimate's rows: one JSON object per row
// (the fields `--json` documents) and the SVG charts of `--svg` (tools/charts).
#include <string>

#include <nlohmann/json.hpp>

#include "tools/charts/charts.h"
#include "tools/estimate/estimate.h"

namespace strata::tools {

// stage, world, offload_param, offload_optimizer (none / cpu / nvme), batch, seq_len,
// gradient_accumulation_steps; then either error, or model_states_bytes, formula_bytes,
// psi_padded, bytes {device, pinned, nvme}, bytes_by_kind {tier: {parameters, gradients,
// optimizer_states, activations, buffers}}, needed_bytes, budget_bytes, collective_bytes, fits,
// advice (when it does not fit) and, with a profile, predicted {step_ms, tokens_per_s,
// bottleneck, resource_ms}.
nlohmann::json estimate_row_json(const EstimateInputs& in, const Estimate& e, const EstimateRow& row);

// The row's bytes per tier by kind, with the budgets, as the memory chart draws a cell.
charts::MemoryCell memory_cell(const EstimateRow& row, const Budgets& budgets);

// DIR/memory.svg (every row that could be planned: bytes per tier stacked by kind, budgets as
// lines) and, with a profile, DIR/step_time.svg (each row's predicted time per resource and
// step). Creates DIR.
void write_estimate_charts(const std::string& dir, const EstimateInputs& in, const Estimate& e);

}  // namespace strata::tools

#pragma once
// The charts of a training run, drawn from its metrics JSONL (`strata train --metrics`, one
// object per step: runtime/telemetry/step_metrics.h): `strata train --svg DIR` and
// `strata chart --metrics FILE --svg DIR`.
#include <string>
#include <vector>

namespace strata::tools::charts {

// Reads `metrics_jsonl` and writes into `dir` (created when missing):
//   loss.svg        loss over steps (steps with a null loss left out)
//   throughput.svg  tokens/s over steps
//   memory.svg      peak bytes per tier over steps, one series per tier the run used (a budget
//                   or a peak above 0 at some step), its budget as a dashed line
//   busy.svg        busy ms per resource (trace track): step 1 (warm-up) and the median of the
//                   later steps, with the step time as a marker
// Returns the paths written. Throws strata::Error naming the file (and line) when it cannot be
// read or a line is not a metrics object, and naming the folder when it cannot be created.
std::vector<std::string> write_metrics_charts(const std::string& metrics_jsonl, const std::string& dir);

// Creates the chart folder `dir` (and its parents) when missing; strata::Error naming it (as
// --svg) when it cannot.
void make_chart_dir(const std::string& dir);

}  // namespace strata::tools::charts

#pragma once
// What a training run reports besides its loss: memory per tier (device arena, pinned pool,
// NVMe swap space), bytes moved per link, and the tables printed at the end (--report full).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/telemetry/step_metrics.h"
#include "runtime/zero/engine.h"
#include "train/session.h"
#include "train/train_options.h"

namespace strata::train {

struct TierSnapshot {
  runtime::telemetry::TierMemory device, pinned, nvme;  // nvme: zero without a swap space
};
TierSnapshot snapshot(const Session& s);

// Memory per tier at named moments ("device after forward", ...), in order.
using PhaseMemory = std::vector<std::pair<std::string, runtime::telemetry::TierMemory>>;

// The engine's counters of bytes moved, per link; and the difference of two readings.
runtime::telemetry::LinkBytes link_bytes(const runtime::zero::EngineCounters& c);
runtime::telemetry::LinkBytes minus(const runtime::telemetry::LinkBytes& a, const runtime::telemetry::LinkBytes& b);

// The collective bytes per rank and step that ZeRO's analysis predicts
// (runtime/estimate/zero_theory.h): 2Ψ(W-1)/W for stages 0-2, 3Ψ(W-1)/W for stage 3; Ψ = the
// parameters' bytes in the compute dtype, each module padded to its shards as the collectives
// carry it. 0 for one rank. A stage-3 run moves less when modules persist on the device
// (stage3_param_persistence_threshold) or are reused between forward and backward.
double collective_theory_bytes(const Session& s);

// What the loop leaves for the end report.
struct RunTotals {
  PhaseMemory phases;             // the last step's memory per phase
  runtime::telemetry::LinkBytes bytes;       // moved by this rank over the whole run
  std::uint64_t steps = 0;        // the steps this run ran (after a resume: from its checkpoint on)
  int stopped_by = 0;             // the signal that stopped the run early, or 0
};

// Rank 0, --report full: memory per tier (after init, then per phase of the last step), bytes
// moved against the theory, the fetch counters, and where the trace and weights went.
void print_end_report(const Session& s, const TrainOptions& o, const TierSnapshot& after_init,
                      const RunTotals& totals);

}  // namespace strata::train

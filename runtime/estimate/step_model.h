#pragma once
// The step-time model of `strata estimate --profile`: what one training step of a plan asks of
// each resource (step_work), and how long that takes on a profiled machine, overlapped as the
// engine overlaps it (predict_step).
//
// Work per rank and step, from the plan (gas micro-batches):
//   compute     model flops (machine_profile.h: model_step_flops) at the rate the profile's
//               step points give for the model's width (interpolated in log width between the
//               two nearest points, the end point's rate outside them);
//   h2d         every streamed module's shard, gathered in forward and again in backward, per
//               micro-batch (a routed module, a mixture's expert, at the share of its layer's
//               experts the micro-batch is expected to pick: moe_traffic.h); plus, for modules whose parameters stay on the device but whose
//               optimizer is offloaded, the updated shard once per step;
//   d2h         the gradient shard of every module whose optimizer is offloaded, per micro-batch;
//   cpu adam    the elements of the offloaded optimizer shards, once per step;
//   disk        NVMe parameters read with every fetch and written once; NVMe optimizer states
//               (master, exp_avg, exp_avg_sq) read and written once.
// The engine overlaps them (Note [The prefetch scheduler] in docs/architecture.md): on a GPU the
// step is the busiest resource; on the host backend the device is the CPU itself, so compute,
// copies and Adam add up and only the disk runs beside them.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/estimate/machine_profile.h"
#include "runtime/tiers/plan.h"

namespace strata::runtime::estimate {

struct StepWork {
  int hidden = 0;  // the model's width, which sets its compute rate
  double model_flops = 0;
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  double cpu_adam_elements = 0;
  double disk_read_bytes = 0;
  double disk_write_bytes = 0;
};

// The model's shape as the flops count needs it.
struct ModelShape {
  double params = 0;  // a tied head once; a mixture's active parameters
  int layers = 0;
  int hidden = 0;
  int seq_len = 0;
};

// `tokens`: B x T x micro_batches on this rank. `routed_share`: the expected fraction of the
// routed modules (inputs.routed_modules) a micro-batch fetches (NVMe reads included).
StepWork step_work(const tiers::ZeroPlan& plan, const tiers::PlanInputs& inputs, int micro_batches,
                   const ModelShape& model, double tokens, bool activation_checkpointing, double routed_share = 1.0);

// The profile's compute rate (model flops per second) at width `hidden`.
double compute_rate(const MachineProfile& profile, int hidden);

struct StepPrediction {
  double step_ms = 0;
  std::string bottleneck;  // the resource that sets step_ms ("compute", "h2d", "cpu adam", ...)
  std::vector<std::pair<std::string, double>> resource_ms;  // each resource's time alone
};

// `host_backend`: the profile's device is the CPU (resources add up, the disk beside them).
StepPrediction predict_step(const StepWork& work, const MachineProfile& profile, bool host_backend);

}  // namespace strata::runtime::estimate

#pragma once
// The step-time model of `strata estimate --profile`: what one training step of a plan asks of
// each resource (step_work), and how long that takes on a profiled machine, overlapped as the
// engine overlaps it (predict_step).
//
// Work per rank and step, from the plan (gas micro-batches):
//   compute     model flops = (6, or 8 with activation checkpointing) x parameters x tokens
//               (the flops strata train reports), at the profile's step_flops_per_s;
//   h2d         every streamed module's shard, gathered in forward and again in backward, per
//               micro-batch; plus, for modules whose parameters stay on the device but whose
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
  double model_flops = 0;
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  double cpu_adam_elements = 0;
  double disk_read_bytes = 0;
  double disk_write_bytes = 0;
};

// `num_params`: the model's parameters (a tied head once); `tokens`: B x T x gas on this rank.
StepWork step_work(const tiers::ZeroPlan& plan, const tiers::PlanInputs& inputs, int micro_batches,
                   double num_params, double tokens, bool activation_checkpointing);

struct StepPrediction {
  double step_ms = 0;
  std::string bottleneck;  // the resource that sets step_ms ("compute", "h2d", "cpu adam", ...)
  std::vector<std::pair<std::string, double>> resource_ms;  // each resource's time alone
};

// `host_backend`: the profile's device is the CPU (resources add up, the disk beside them).
StepPrediction predict_step(const StepWork& work, const MachineProfile& profile, bool host_backend);

}  // namespace strata::runtime::estimate

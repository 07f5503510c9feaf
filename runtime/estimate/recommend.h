#pragma once
// The automatic placement of `strata estimate --recommend` and `strata train --config auto`:
// over the stages, placements, offload ratios and micro-batches a config leaves open, the
// candidate that fits the budgets (estimate.h, the plan code the engine runs)
// and, with a machine profile, has the highest predicted tokens/s. Without a profile the
// candidates are ranked by where their states live, fastest tier first (the order an engineer
// tries by hand: nothing offloaded; the optimizer on the CPU; the parameters too; NVMe last),
// then by the larger micro-batch, then by the lower stage.
//
// What is open: the stage and both offload devices always (NVMe only when the config names an
// nvme_path, or `nvme_path` of the inputs is set); offload_optimizer.ratio at stage 3 with the
// parameters on the device (1, 0.75, 0.5, 0.25); with NVMe, the staging buffer counts (the
// config's, else the fewest that work, 2 and 3: they cost pinned memory and buy read-ahead, which
// the step model does not price, so more is preferred when both fit); the micro-batch: with
// train_batch_size, the powers of two that divide it per rank (gradient accumulation makes up
// the rest), none larger than the config's micro-batch when it gives one; with a micro-batch
// alone (and accumulation), the same over micro x accumulation per rank; with neither, 1 to 64
// (at the config's accumulation, else 1). A global batch the config fixes is never changed.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/estimate/estimate.h"

namespace strata::runtime::estimate {

struct Candidate {
  Placement placement;
  double ratio = 1.0;  // offload_optimizer.ratio
  // NVMe staging: offload_param.buffer_count and offload_optimizer.buffer_count.
  std::uint64_t param_buffers = 0, optimizer_buffers = 0;
  int micro_batch = 1;
  int gas = 1;
  EstimateRow row;
  double score = 0;    // predicted tokens/s with a profile; else 0
  std::string label() const;  // "stage 3, params cpu, optimizer cpu, micro-batch 8"
};

struct Recommendation {
  Candidate pick;
  config::Config config;       // the pick's config, resolved for the run
  std::vector<Candidate> fitting;       // every candidate that fits, best first (the pick first)
  int considered = 0;                   // candidates planned
  std::string why;                      // a paragraph for the log
  // What the pick did to the config's batch: the global batch kept (and, when the micro-batch
  // was traded for accumulation, why), or picked when the config fixes none.
  std::string batch_why;
};

// `in.config` is the base (the open keys are ignored); `nvme_allowed` adds the NVMe placements.
// Throws strata::Error naming the shortest tier of the closest candidate when nothing fits.
Recommendation recommend(const EstimateInputs& in, bool nvme_allowed);

// Whether a config names an NVMe folder (offload_param's or offload_optimizer's nvme_path): the
// automatic placement offers NVMe only then (or, in `strata estimate`, with --nvme-path).
bool names_nvme(const config::Config& config);

// `strata train --config auto`'s plan (tools/auto_config.h parses the flags and prints it): the
// recommendation over `in` (NVMe only where in.config names a folder for it, the first named the
// cells' nvme_path), and the config the run gets: `base` (the run's parsed config, its other
// "auto"s left for the run to resolve) with the pick's placement, offload ratio, NVMe folders and
// buffer counts and batch sizes; with several ranks a node and no strata.pinned_memory in
// `base`, each rank's share of the node's pinned memory (the pick fits it; the run's own default
// would pin half of the node's memory on every rank).
struct AutoPlan {
  Recommendation recommendation;
  config::Config config;
};
AutoPlan auto_plan(EstimateInputs in, const config::Config& base);

}  // namespace strata::runtime::estimate

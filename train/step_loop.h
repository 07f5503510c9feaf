#pragma once
// The step loop of a training run: for each optimizer step,
//   begin_step(lr) -> (forward, backward) x gradient_accumulation_steps -> step()
//   -> the checkpoint boundary (train/checkpointing.h) -> metrics (JSONL, progress line).
#include <cstdint>

#include "train/checkpointing.h"
#include "train/report.h"
#include "train/resume.h"
#include "train/run_state.h"
#include "train/session.h"
#include "train/train_options.h"

namespace strata::train {

// Runs steps start.step .. o.steps - 1 (fewer when a stop signal ends the run after its
// checkpoint). checkpoints: nullptr without --checkpoint-dir. now: the run state that
// checkpoints record (updated at each save). Throws strata::Error when the loss is not finite.
RunTotals run_steps(Session& s, const TrainOptions& o, StartPoint start, Checkpointing* checkpoints, RunState& now);

}  // namespace strata::train

#pragma once
// The training run: `strata train` (tools/cmd_train.cpp) and in-process tests call this. The
// run, in order (train/trainer.cpp):
//   checks of the options, the checkpoint folder   train/checkpointing.h
//   setup: config, device, comm, engine, model     train/session.h
//   resume from a checkpoint or initial weights    train/resume.h
//   the step loop                                  train/step_loop.h
//   the end: --save, the trace, the report         train/report.h
#include "train/train_options.h"

namespace strata::train {

// Runs the training; throws strata::Error for bad input (config, model, data, budgets).
// Returns 0, or the signal (SIGINT / SIGTERM) that stopped it early after a checkpoint. Throws
// CheckpointNotSaved (train/checkpointing.h) at the end when the run's last checkpoint failed:
// `strata train` then exits kExitCheckpointFailed (3).
int run_training(const TrainOptions& options);

}  // namespace strata::train

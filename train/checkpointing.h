#pragma once
// The checkpoints of a training run (--checkpoint-dir): the folder, checked before any training;
// the saver (runtime/checkpoint/checkpoint_saver.h), which writes a checkpoint while the next
// step computes; the stop signals (SIGINT / SIGTERM: a checkpoint at the next step boundary,
// then the run ends). --resume's side is train/resume.h.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/checkpoint_saver.h"
#include "runtime/checkpoint/crash_points.h"
#include "train/run_state.h"
#include "train/session.h"
#include "train/stop_signals.h"
#include "train/train_options.h"

namespace strata::train {

// Makes --checkpoint-dir (and checks it for writing) before any training; nullopt without the
// flag. A new run does not write into another run's checkpoints (`latest` and keep_last would
// mix the two): a folder holding complete checkpoints is refused unless the run resumes.
std::optional<runtime::checkpoint::CheckpointDir> open_checkpoint_dir(const TrainOptions& o);

class Checkpointing {
 public:
  // dir: from open_checkpoint_dir(). o and s are borrowed and must outlive this. first_step:
  // where the run starts (later checkpoints in the folder are left alone, with a warning).
  // Installs the stop signals until destroyed.
  Checkpointing(runtime::checkpoint::CheckpointDir dir, const TrainOptions& o, Session& s, std::uint64_t first_step);
  Checkpointing(const Checkpointing&) = delete;
  Checkpointing& operator=(const Checkpointing&) = delete;

  struct Boundary {
    bool stop = false;                       // a rank got a stop signal: the run ends here
    std::vector<runtime::checkpoint::SaveResult> saves;  // saves finished at this boundary (reported)
  };
  // Collective, after each optimizer step; `done` steps are done, `applied_steps` of them not
  // skipped. Publishes the save begun at the previous boundary; begins one when due (every
  // --checkpoint-every steps, after the last step, on a stop signal), recording `now` (its step,
  // counters, loader position) as meta.json, and finishes it at once when the run ends here.
  // Throws strata::Error when a stop signal's checkpoint failed.
  Boundary after_step(std::uint64_t done, std::uint64_t applied_steps, RunState& now);

  // The signal that stopped the run (SIGTERM when only another rank got one).
  int stop_signal() const;

  // The step of the last save this run attempted when that save failed (nullopt: it succeeded,
  // or none was attempted), and the newest complete checkpoint in the folder.
  std::optional<std::uint64_t> last_save_failed() const { return last_failed_; }
  std::optional<std::uint64_t> latest_good() const { return latest_good_; }

 private:
  // At start: the folder must hold one checkpoint (every rank's shard); a warning when it cannot
  // hold the checkpoints kept plus the one being written.
  void check_free_space() const;

  const TrainOptions& o_;
  Session& s_;
  runtime::checkpoint::CrashPoints crash_;  // STRATA_CRASH_AT: the crash tests' fault injection
  std::unique_ptr<runtime::checkpoint::CheckpointSaver> saver_;
  StopSignals signals_;
  std::optional<std::uint64_t> last_failed_;
  std::optional<std::uint64_t> latest_good_;
};

// The exit status of `strata train` when the run finished but its last checkpoint could not be
// written (strata.checkpoint_on_error "continue"): 3. README.md and docs/config.md say so.
inline constexpr int kExitCheckpointFailed = 3;

// Thrown by run_training after the run (weights saved, report printed) when its last
// checkpoint failed: says which step is the latest good checkpoint, or that there is none.
class CheckpointNotSaved : public Error {
 public:
  using Error::Error;
};

}  // namespace strata::train

#pragma once
// Where a run starts: from a checkpoint (--resume: the run state of meta.json checked against
// this run, then the loader, the engine's counters and every state loaded), or from new weights
// (--init's safetensors, else GPT-2's init from --seed).
#include <cstdint>
#include <string>

#include "train/run_state.h"
#include "train/session.h"
#include "train/train_options.h"

namespace strata::train {

// What a checkpoint of this run records besides the states, before any step (and what a
// resumed run must match).
RunState start_state(const Session& s, const TrainOptions& o);

struct StartPoint {
  std::uint64_t step = 0;           // optimizer steps already done
  std::uint64_t applied_steps = 0;  // of which not skipped (fp16): the LR schedule's count
};

// Collective. Loads the checkpoint o.resume_path into the session, or initializes the weights
// when there is none. Every rank checks and loads its part; a failure on any rank throws
// strata::Error on every rank (each would otherwise wait for the others in the first step).
StartPoint resume_or_init(Session& s, const TrainOptions& o, const RunState& now);

// Throws strata::Error (naming the checkpoint and saying what to do) when the checkpoint in
// `where` cannot continue as this run: another model or world size. Logs the config keys that
// changed (tiers, buckets: allowed).
void check_resume(const RunState& saved, const RunState& now, const std::string& where);

}  // namespace strata::train

#pragma once
// The run state: meta.json of a `strata train` checkpoint, everything beside the optimizer
// states that a resumed run needs to continue bit for bit, and what it must match.
//
//   {"format": "strata.train_state", "version": 1,
//    "step": 120,             optimizer steps done (the next step is 121)
//    "applied_steps": 118,    of which not skipped for fp16 overflow (the LR schedule's count)
//    "world": 2, "shards": 2, "stage": 3, "dtype": "bf16", "seq_len": 256,
//    "seed": 0, "shuffle": false,
//    "model": {...},          the GPT config (HF names)
//    "engine": {"adam_steps": 118, "loss_scaler": {...}},
//    "loader": {...},         models::LoaderState
//    "rng": "none",           the model has no dropout: its only randomness is the seed's
//                             initial weights and --shuffle order, both recorded above
//    "config": {...}}         the resolved config (tiers may differ on resume)
// A resume must match the model, world size, shards, sequence length, seed and shuffle flag
// (check_resume, train/resume.h) and the micro-batch size and data (the loader's state). The stage may change
// between 1, 2 and 3 (the same shards) and the compute dtype may change (the master is fp32),
// except into or out of fp16, whose loss scaler state the engine refuses to mix.
#include <cstdint>
#include <string>

#include "models/model_spec.h"
#include "models/io/batch_loader.h"
#include "runtime/config/config.h"
#include "runtime/zero/engine.h"

namespace strata::train {

struct RunState {
  std::uint64_t step = 0;
  std::uint64_t applied_steps = 0;
  int world = 1;
  int shards = 1;
  int stage = 0;
  std::string dtype;
  int seq_len = 0;
  std::uint64_t seed = 0;
  bool shuffle = false;
  models::ModelSpecPtr model;  // its config.json
  runtime::zero::ZeroEngine::TrainState engine;
  models::LoaderState loader;
  std::string config_json;  // runtime::config_to_json()

  std::string to_json() const;
  // Throws strata::Error naming `where` for anything malformed.
  static RunState from_json(const std::string& text, const std::string& where);
};

}  // namespace strata::train

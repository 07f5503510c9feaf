#pragma once
// `strata train`: a GPT trained by the ZeRO engine (runtime/zero/engine.h), with its states in
// the tiers the config names. One process per rank (mpirun for several).
#include <cstdint>
#include <string>

#include "tools/device_flags.h"

namespace strata::tools {

struct TrainOptions {
  DeviceFlags device;             // --device, --device-memory, --config (required)
  std::string model_path;         // --model config.json (HF names)
  std::string preset;             // --preset NAME (when no --model)
  std::string init_path;          // --init weights.safetensors (else GPT-2 init from --seed)
  std::string data_path;          // --data tokens.bin (llm.c format)
  std::string text_path;          // --text FILE (bytes as tokens, vocabulary 256)
  std::uint64_t steps = 0;        // optimizer steps
  int seq_len = 0;                // T; 0 = min(n_positions, 1024)
  std::string save_path;          // --save out.safetensors (HF GPT-2, fp32 masters)
  std::string trace_path;         // --trace t.json (Chrome trace of every stream)
  std::string metrics_path;       // --metrics m.jsonl (one object per step)
  std::uint64_t seed = 0;         // --seed: initial weights (without --init)
  bool activation_checkpointing = false;
  bool shuffle = false;           // --shuffle: seeded order of windows
  std::string report;             // --report: "full" (tables at the end) or "none"
  // Checkpoints (runtime/checkpoint/): a save every N steps, after the last step and on
  // SIGINT / SIGTERM; --resume continues a run from one (--steps stays the run's total).
  std::string checkpoint_dir;         // --checkpoint-dir D
  std::uint64_t checkpoint_every = 0; // --checkpoint-every N (0: only at the end and on a signal)
  int checkpoint_keep = -1;           // --checkpoint-keep K (0 keeps all; -1: strata.checkpoint_keep)
  std::string resume_path;            // --resume D or D/step-NNNNNNNN
};

// Runs the training; throws strata::Error for bad input (config, model, data, budgets).
// Returns 0, or the signal (SIGINT / SIGTERM) that stopped it early after a checkpoint.
int run_training(const TrainOptions& options);

}  // namespace strata::tools

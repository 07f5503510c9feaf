#pragma once
// What one training run is asked to do: a model (models/registry.h) trained by the ZeRO engine (runtime/zero/engine.h),
// with its states in the tiers the config names. One process per rank (mpirun for several).
// `strata train` (tools/cmd_train.cpp) fills this from its flags; a test may fill it directly
// and call train::run_training (train/trainer.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/config.h"

namespace strata::train {

struct TrainOptions {
  std::string config_path;        // --config ds.json (required)
  std::string config_json;        // the config's text instead of config_path's (--config auto's pick,
                                  // with `overrides` applied already)
  std::vector<std::string> overrides;  // --set key.path=value, applied to the file before parsing
  // --lr, --micro-batch, --grad-accum, --clip, --warmup-steps: they replace their config keys'
  // values ("auto" or not); run_training adds `steps` for an "auto" total_num_steps.
  runtime::config::TrainingFlags flags;
  std::string device_kind;        // --device auto|host|cuda; "" = strata.device
  std::optional<std::uint64_t> device_memory_bytes;  // --device-memory; nullopt = strata.device_memory
  std::string model_path;         // --model DIR (HF model folder: config.json, weights if any) or config.json
  std::string preset;             // --preset NAME (when no --model)
  std::string init_path;          // --init weights (file or HF folder); else --model DIR's, else init from --seed
  std::string data_path;          // --data tokens.bin (llm.c format, uint16 or uint32 tokens)
  std::string text_path;          // --text FILE: the --model folder's tokenizer's ids, else its bytes (vocabulary 256)
  std::uint64_t steps = 0;        // optimizer steps
  int seq_len = 0;                // T; 0 = min(n_positions, 1024)
  std::string save_path;          // --save DIR (HF model folder, with the --model folder's tokenizer files) or
                                  // out.safetensors (one file); fp32 masters
  std::uint64_t save_shard_bytes = 5'000'000'000ull;  // --save-shard-size: the largest shard of a folder
  std::string trace_path;         // --trace t.json (Chrome trace of every stream); "" = strata.trace
  std::string metrics_path;       // --metrics m.jsonl (one object per step)
  std::uint64_t seed = 0;         // --seed: initial weights (without --init)
  bool activation_checkpointing = false;
  bool shuffle = false;           // --shuffle: seeded order of windows
  std::string report = "full";    // --report: "full" (tables at the end) or "none"
  // --verbose: the resolved config on the console at start. Without it the console shows the
  // plan, progress and the end report; the resolved config goes to resolved_config.json in the
  // run's folder (the --metrics file's, else --checkpoint-dir), when there is one.
  bool verbose = false;
  // Checkpoints (runtime/checkpoint/, train/checkpointing.h): a save every N steps, after the last
  // step and on SIGINT / SIGTERM; --resume continues a run from one (--steps stays the run's total).
  std::string checkpoint_dir;         // --checkpoint-dir D
  std::uint64_t checkpoint_every = 0; // --checkpoint-every N (0: only at the end and on a signal)
  int checkpoint_keep = -1;           // --checkpoint-keep K (0 keeps all; -1: strata.checkpoint_keep)
  std::string resume_path;            // --resume D or D/step-NNNNNNNN
};

// What can be refused before anything is read or built: no --config, --steps 0, an output
// path that cannot be created, --resume with --init, --checkpoint-every without a folder.
// Throws strata::Error naming the flag.
void check_options(const TrainOptions& o);

// An output file must be creatable before hours of training make something to put in it: its
// folder exists and is writable, and it is not a folder itself. Throws strata::Error naming
// `flag` (a flag or config key). An empty path passes.
void check_output_path(const std::string& path, const char* flag);
// --save: a name ending in .safetensors is a file (check_output_path); anything else a folder
// that is new, or empty of model weights, and writable.
void check_save_path(const std::string& path);

}  // namespace strata::train

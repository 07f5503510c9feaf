// strata train: its flags into a train::TrainOptions (train/train_options.h), then
// train::run_training (train/trainer.h).
#include <memory>

#include "tools/commands.h"
#include "tools/device_flags.h"
#include "train/trainer.h"

namespace strata::tools {

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  auto device = std::make_shared<DeviceFlags>();
  CLI::App* cmd = app.add_subcommand("train", "train a GPT with ZeRO stages 1-3 and states tiered over "
                                              "device, pinned host and NVMe");
  add_device_flags(*cmd, *device);
  cmd->add_option("--model", o->model_path, "HF GPT-2 config.json");
  cmd->add_option("--preset", o->preset, "a built-in model: gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny, bytes-30m");
  cmd->add_option("--init", o->init_path, "initial weights: HF GPT-2 safetensors (default: GPT-2 init from --seed)");
  cmd->add_option("--data", o->data_path, "training tokens: an llm.c token file");
  cmd->add_option("--text", o->text_path, "training text: any file, its bytes as tokens (vocabulary 256)");
  cmd->add_option("--steps", o->steps, "optimizer steps")->required();
  cmd->add_option("--seq-len", o->seq_len, "tokens per sequence (default: min(n_positions, 1024))");
  cmd->add_option("--save", o->save_path, "write the trained weights here (HF GPT-2 safetensors, fp32)");
  cmd->add_option("--trace", o->trace_path,
                  "write a Chrome trace here: every stream (on cuda the GPU's), CPU Adam, the disk "
                  "(overrides strata.trace)");
  cmd->add_option("--metrics", o->metrics_path, "write one JSON object per step here (JSONL)");
  cmd->add_option("--seed", o->seed, "seed of the initial weights (and of --shuffle)");
  cmd->add_flag("--activation-checkpointing", o->activation_checkpointing,
                "keep only each block's input; recompute the block in backward");
  cmd->add_flag("--shuffle", o->shuffle, "visit the data's windows in a seeded order");
  cmd->add_option("--report", o->report, "full (tables at the end, the default) or none")
      ->check(CLI::IsMember({"full", "none"}));
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "save checkpoints here (every --checkpoint-every steps, at the end, and on SIGINT/SIGTERM)");
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints (0: at the end only)");
  cmd->add_option("--checkpoint-keep", o->checkpoint_keep,
                  "checkpoints to keep (0 keeps all; default: strata.checkpoint_keep, 2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--resume", o->resume_path,
                  "continue from a checkpoint: its folder, or the --checkpoint-dir holding `latest`");
  cmd->callback([o, device] {
    o->config_path = device->config_path;
    o->device_kind = device->device;
    o->device_memory_bytes = device_memory_bytes(*device);
    // Stopped by a signal after its checkpoint: exit as the shell reports a signal (128 + n).
    if (const int sig = train::run_training(*o); sig != 0) throw CLI::RuntimeError(128 + sig);
  });
}

}  // namespace strata::tools

// strata train: its flags into a train::TrainOptions (train/train_options.h), then
// train::run_training (train/trainer.h); with --svg, the run's charts from its metrics at the end.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/units.h"
#include "models/registry.h"
#include "runtime/launch/launch.h"
#include "tools/charts/metrics_charts.h"
#include "core/error.h"
#include "tools/auto_config.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/training_flags.h"
#include "train/checkpointing.h"
#include "train/trainer.h"

namespace strata::tools {
namespace {

std::string presets_text() {
  std::string text;
  for (const std::string& name : models::preset_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// --svg DIR: the folder is made now, so that a run is not refused (or wasted) for it at the end,
// and the run's metrics go to DIR/metrics.jsonl unless --metrics names a file.
void prepare_svg_dir(const std::string& dir, train::TrainOptions& o) {
  charts::make_chart_dir(dir);
  if (o.metrics_path.empty()) o.metrics_path = (std::filesystem::path(dir) / "metrics.jsonl").string();
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  auto device = std::make_shared<DeviceFlags>();
  CLI::App* cmd = app.add_subcommand("train", "train a GPT-2 or LLaMA-family model with ZeRO stages 0-3 and "
                                              "states tiered over device, pinned host and NVMe");
  add_device_flags(*cmd, *device);
  // --set and the training values; runtime/config resolves them (docs/config.md, "Resolution").
  add_training_flags(*cmd, o->overrides, o->flags);
  cmd->add_option("--model", o->model_path,
                  "a Hugging Face model folder (config.json; its weights, when present, are the initial weights) or "
                  "a config.json: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
  cmd->add_option("--preset", o->preset, "a built-in model (random init): " + presets_text());
  cmd->add_option("--init", o->init_path,
                  "initial weights: a safetensors file or an HF model folder (default: the --model folder's, "
                  "else the family's init from --seed)");
  cmd->add_option("--data", o->data_path,
                  "training tokens: an llm.c token file (uint16 tokens, or uint32 for a vocabulary above 65,536; "
                  "strata tokenize writes both)");
  cmd->add_option("--text", o->text_path,
                  "training text: tokenized with the --model folder's tokenizer (in parallel), else (a preset, a "
                  "folder without one) its bytes as tokens (vocabulary 256); the run says which");
  cmd->add_option("--steps", o->steps, "optimizer steps")->required();
  cmd->add_option("--seq-len", o->seq_len, "tokens per sequence (default: min(the model's longest, 1024))");
  cmd->add_option("--save", o->save_path,
                  "write the trained weights (fp32) here: a folder in the Hugging Face layout (config.json, "
                  "model.safetensors or shards with an index, and the --model folder's tokenizer files), or one "
                  "file if the name ends in .safetensors");
  cmd->add_option_function<std::string>(
      "--save-shard-size",
      [o](const std::string& text) {
        const std::optional<std::uint64_t> bytes = parse_bytes(text);
        if (!bytes || *bytes == 0) throw CLI::ValidationError("--save-shard-size", "not a size: " + text);
        o->save_shard_bytes = *bytes;
      },
      "the largest safetensors shard --save writes in a folder (default 5GB, as transformers)");
  cmd->add_option("--trace", o->trace_path,
                  "write a Chrome trace here: every stream (on cuda the GPU's), CPU Adam, the disk "
                  "(overrides strata.trace)");
  cmd->add_option("--metrics", o->metrics_path, "write one JSON object per step here (JSONL)");
  auto svg_dir = std::make_shared<std::string>();
  cmd->add_option("--svg", *svg_dir,
                  "at the end, draw the run's charts here as SVG: loss, tokens/s, peak memory per tier, busy time "
                  "per resource (the metrics go to DIR/metrics.jsonl without --metrics; strata chart redraws them)");
  cmd->add_option("--seed", o->seed, "seed of the initial weights (and of --shuffle)");
  cmd->add_flag("--activation-checkpointing", o->activation_checkpointing,
                "keep only each block's input; recompute the block in backward");
  cmd->add_flag("--shuffle", o->shuffle, "visit the data's windows in a seeded order");
  cmd->add_option("--report", o->report, "full (tables at the end, the default) or none")
      ->check(CLI::IsMember({"full", "none"}));
  cmd->add_flag("--verbose", o->verbose,
                "print the resolved config at start (else it goes to resolved_config.json beside --metrics, "
                "or in --checkpoint-dir)");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "save checkpoints here (every --checkpoint-every steps, at the end, and on SIGINT/SIGTERM)");
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints (0: at the end only)");
  cmd->add_option("--checkpoint-keep", o->checkpoint_keep,
                  "checkpoints to keep (0 keeps all; default: strata.checkpoint_keep, 2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--resume", o->resume_path,
                  "continue from a checkpoint: its folder, or the --checkpoint-dir holding `latest`");
  auto profile_path = std::make_shared<std::string>();
  cmd->add_option("--profile", *profile_path,
                  "with --config auto: a machine profile (strata bench machine) to pick the fastest plan by");
  cmd->callback([o, device, svg_dir, profile_path] {
    o->config_path = device->config_path;
    o->device_kind = device->device;
    o->device_memory_bytes = device_memory_bytes(*device);
    if (wants_auto_placement(o->config_path, o->overrides)) {
      auto_config(*o, *device, *profile_path);
    } else if (!profile_path->empty()) {
      throw Error("--profile is for --config auto", "--profile",
                  "drop it, or give --config auto (or a config whose zero_optimization is \"auto\")");
    }
    if (!svg_dir->empty()) prepare_svg_dir(*svg_dir, *o);
    int sig = 0;
    try {
      sig = train::run_training(*o);
    } catch (const train::CheckpointNotSaved& e) {
      // The run is over and its weights saved: its own exit status, so a script can tell a lost
      // checkpoint from a failed run (1) and from a signal (128 + n).
      const runtime::launch::LaunchInfo launch = runtime::launch::detect_launch();
      const std::string rank =
          launch.world > 1 ? fmt::format("rank {} of {}: ", launch.rank, launch.world) : std::string();
      std::fprintf(stderr, "strata: error: %s%s\n", rank.c_str(), e.what());
      throw CLI::RuntimeError(train::kExitCheckpointFailed);
    }
    // Rank 0 wrote the metrics (and draws them; a run stopped by a signal has its steps so far).
    if (!svg_dir->empty() && runtime::launch::detect_launch().rank == 0) {
      const std::vector<std::string> written = charts::write_metrics_charts(o->metrics_path, *svg_dir);
      std::fprintf(stderr, "strata train: %zu charts in %s\n", written.size(), svg_dir->c_str());
    }
    // Stopped by a signal after its checkpoint: exit as the shell reports a signal (128 + n).
    if (sig != 0) throw CLI::RuntimeError(128 + sig);
  });
}

}  // namespace strata::tools

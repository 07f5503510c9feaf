// strata convert CHECKPOINT OUT [--dtype fp32|bf16|fp16] [--shard-size SIZE]: a checkpoint of
// `strata train` (any world size, states saved from any tier) to the Hugging Face layout — a
// model folder transformers loads, or one safetensors file — of the fp32 master weights, shards
// joined (DeepSpeed's zero_to_fp32.py). The reverse, HF weights into a run, is
// `strata train --model DIR` (or --init). The tokenizer files the run's model folder had (the
// checkpoint keeps a copy: models/tokenizer_files.h) go beside the weights of a folder.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "models/hf_weights.h"
#include "models/tokenizer_files.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/checkpoint_loader.h"
#include "tools/commands.h"
#include "train/run_state.h"
#include "train/train_options.h"

namespace strata::tools {
namespace {

struct ConvertOptions {
  std::string checkpoint;
  std::string out;
  std::string dtype = "fp32";
  std::string state = "master";
  std::uint64_t shard_bytes = models::kDefaultShardBytes;
};

runtime::tiers::OptimState parse_state(const std::string& s) {
  if (s == "exp_avg") return runtime::tiers::OptimState::exp_avg;
  if (s == "exp_avg_sq") return runtime::tiers::OptimState::exp_avg_sq;
  return runtime::tiers::OptimState::master;
}

// The tokenizer files the checkpoint holds (its manifest lists them), checked against the manifest.
std::vector<models::ModelFile> checkpoint_tokenizer_files(const runtime::checkpoint::CheckpointFiles& files) {
  std::vector<models::ModelFile> out;
  for (const runtime::checkpoint::ManifestFile& f : files.manifest.files) {
    if (!models::is_tokenizer_file_name(f.name)) continue;
    const std::string path = files.path + "/" + f.name;
    runtime::checkpoint::verify_file(path, f);
    out.push_back({f.name, read_text_file(path)});
  }
  return out;
}

void run_convert(const ConvertOptions& o) {
  const DType dtype = parse_dtype(o.dtype);
  const runtime::checkpoint::CheckpointFiles files = runtime::checkpoint::open_checkpoint(o.checkpoint);
  const train::RunState meta = train::RunState::from_json(files.meta_json, files.path + "/meta.json");
  runtime::checkpoint::CheckpointStates masters(files, parse_state(o.state));
  const models::ModelLayout layout = meta.model->layout();
  if (static_cast<std::size_t>(masters.module_count()) != layout.modules.size()) {
    throw Error("the checkpoint " + files.path + " holds " + std::to_string(masters.module_count()) +
                    " modules; its model has " + std::to_string(layout.modules.size()),
                files.path, "the checkpoint is damaged: convert an earlier one");
  }
  for (int m = 0; m < masters.module_count(); ++m) {
    const models::ModuleLayout& slot = layout.modules[static_cast<std::size_t>(m)];
    if (masters.module_numel(m) != slot.numel || masters.module_name(m) != slot.name) {
      throw Error("the checkpoint " + files.path + " holds module " + masters.module_name(m) + " of " +
                      std::to_string(masters.module_numel(m)) + " values; its model has " + slot.name + " of " +
                      std::to_string(slot.numel),
                  files.path, "the checkpoint is damaged: convert an earlier one");
    }
  }
  train::check_save_path(o.out);
  const std::vector<models::ModelFile> tokenizer_files = checkpoint_tokenizer_files(files);
  const bool with_tokenizer = models::write_tokenizer_files_for_weights(o.out, tokenizer_files);
  models::write_hf_model(o.out, *meta.model, [&](int m) { return masters.read(m); }, dtype, o.shard_bytes);
  std::fprintf(stderr, "strata convert: %s (step %llu, %d shard(s)) -> %s (%s, %s%s)\n", files.path.c_str(),
               static_cast<unsigned long long>(files.manifest.step), files.manifest.shards, o.out.c_str(),
               o.state.c_str(), std::string(dtype_name(dtype)).c_str(),
               with_tokenizer ? (", with " + models::file_names_text(tokenizer_files)).c_str() : "");
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "a strata train checkpoint (any world size and tiers) to the Hugging Face layout (the fp32 masters)");
  cmd->add_option("checkpoint", o->checkpoint, "a checkpoint folder, or the --checkpoint-dir holding `latest`")
      ->required();
  cmd->add_option("out", o->out,
                  "a folder to write in the Hugging Face layout (config.json, model.safetensors or shards with an "
                  "index; loadable by transformers), or one file if the name ends in .safetensors")
      ->required();
  cmd->add_option_function<std::string>(
      "--shard-size",
      [o](const std::string& text) {
        const std::optional<std::uint64_t> bytes = parse_bytes(text);
        if (!bytes || *bytes == 0) throw CLI::ValidationError("--shard-size", "not a size: " + text);
        o->shard_bytes = *bytes;
      },
      "the largest safetensors shard of a folder (default 5GB)");
  cmd->add_option("--dtype", o->dtype, "fp32 (default), bf16 or fp16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--state", o->state,
                  "master (the weights, default), or an Adam moment: exp_avg or exp_avg_sq, in the same layout "
                  "(to continue the run's optimizer elsewhere)")
      ->check(CLI::IsMember({"master", "exp_avg", "exp_avg_sq"}));
  cmd->callback([o] { run_convert(*o); });
}

}  // namespace strata::tools

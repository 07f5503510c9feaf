// Where a run starts: a checkpoint checked against this run and loaded, or new weights.
#include "train/resume.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "models/hf_weights.h"
#include "models/io/hf_checkpoint.h"
#include "offload/host_buffer.h"
#include "runtime/checkpoint/checkpoint_loader.h"

namespace strata::train {
namespace {

using nlohmann::json;

// The checkpoint's states into the engine, the data position into the loader. Returns where
// the run continues. Throws strata::Error for a checkpoint this run cannot continue from.
StartPoint load_checkpoint(Session& s, const TrainOptions& o, const RunState& now, std::string& resumed_from) {
  const runtime::checkpoint::CheckpointFiles files = runtime::checkpoint::open_checkpoint(o.resume_path);
  const std::string where = files.path + "/meta.json";
  const RunState saved = RunState::from_json(files.meta_json, where);
  if (saved.step != files.manifest.step) {
    throw Error(where + " is at step " + std::to_string(saved.step) + " but its manifest at step " +
                    std::to_string(files.manifest.step),
                where, "the checkpoint is damaged: resume from an earlier one");
  }
  check_resume(saved, now, files.path);
  if (saved.step >= o.steps) {
    throw Error("the checkpoint " + files.path + " is at step " + std::to_string(saved.step) +
                    " and --steps is " + std::to_string(o.steps) + ": nothing is left to train",
                "--steps", "--steps is the run's total: raise it to train further");
  }
  // The cheap checks (data position, loss scaling mode) before the states' I/O.
  s.loader->restore(saved.loader);
  s.engine->restore_train_state(saved.engine);
  runtime::checkpoint::load_states(files, *s.engine, s.tier_io());
  resumed_from = files.path;
  return StartPoint{saved.step, saved.applied_steps};
}

// Where the initial weights come from: --init, else the --model folder when it holds weights
// (model.safetensors or an index); "" = the family's initialization from --seed.
std::string weights_path(const TrainOptions& o) {
  if (!o.init_path.empty()) return o.init_path;
  return models::has_hf_weights(o.model_path) ? o.model_path : std::string();
}

// The initial weights (weights_path), else the family's initialization from --seed, module by
// module: one module's fp32 values in memory at a time (plus one tensor's mapped file pages).
void init_weights(Session& s, const TrainOptions& o) {
  std::unique_ptr<models::HfWeightsReader> reader;
  const std::string path = weights_path(o);
  if (!path.empty()) {
    reader = std::make_unique<models::HfWeightsReader>(path, *s.spec);
    if (s.rank0) log::info("initial weights from {}", path);
  }
  // One buffer for every module (both fill all of it, gaps included): its pages are faulted in
  // once, not once per module.
  std::size_t max_numel = 0;
  for (const models::ModuleLayout& module : s.layout.modules) max_numel = std::max(max_numel, module.numel);
  const offload::HostBuffer buffer = offload::HostBuffer::allocate(max_numel * sizeof(float), "initial weights");
  auto* values = reinterpret_cast<float*>(buffer.data());
  for (std::size_t m = 0; m < s.layout.modules.size(); ++m) {
    if (reader) {
      reader->read_module(static_cast<int>(m), values);
    } else {
      s.spec->init_module(s.layout.modules[m], o.seed, values);
    }
    s.engine->load_module(static_cast<int>(m), values);
  }
}

}  // namespace

RunState start_state(const Session& s, const TrainOptions& o) {
  RunState now;
  now.world = s.comm->world();
  now.shards = s.engine->shards();
  now.stage = s.config.zero_optimization.stage;
  now.dtype = std::string(dtype_name(s.dtype));
  now.seq_len = s.T;
  now.seed = o.seed;
  now.shuffle = o.shuffle;
  now.model = s.spec;
  now.config_json = runtime::config::config_to_json(s.config);
  return now;
}

StartPoint resume_or_init(Session& s, const TrainOptions& o, const RunState& now) {
  if (o.resume_path.empty()) {
    init_weights(s, o);
    return StartPoint{};
  }
  std::optional<Error> failed;
  std::string resumed_from;
  StartPoint start;
  try {
    start = load_checkpoint(s, o, now, resumed_from);
  } catch (const Error& e) {
    failed = e;
  }
  if (runtime::comm::any_rank(*s.comm, *s.device, *s.compute, failed.has_value())) {
    if (failed) throw *failed;
    throw Error("another rank could not resume from " + o.resume_path + " (its error says why)", "--resume",
                "see the other ranks' errors");
  }
  if (s.rank0) log::info("resumed from {} at step {}", resumed_from, start.step);
  return start;
}

void check_resume(const RunState& saved, const RunState& now, const std::string& where) {
  if (!saved.model->same_model(*now.model)) {
    throw Error("the checkpoint " + where + " is of another model: " + saved.model->to_json() + "; this run has " +
                    now.model->to_json(),
                "--resume", "give the --model / --preset it was trained with");
  }
  if (saved.world != now.world || saved.shards != now.shards) {
    throw Error("the checkpoint " + where + " was saved by " + std::to_string(saved.world) + " rank(s) (" +
                    std::to_string(saved.shards) + " shard file(s)); this run has " + std::to_string(now.world) +
                    " rank(s) (" + std::to_string(now.shards) + ")",
                "--resume",
                "resume with " + std::to_string(saved.world) + " rank(s) (mpirun -n " + std::to_string(saved.world) +
                    "), or export the weights with `strata convert " + where +
                    " weights.safetensors` and start a new run with --init weights.safetensors (the optimizer "
                    "states and data position do not carry over)");
  }
  if (saved.seq_len != now.seq_len) {
    throw Error("the checkpoint " + where + " was trained with --seq-len " + std::to_string(saved.seq_len) +
                    "; this run has " + std::to_string(now.seq_len),
                "--seq-len", "give --seq-len " + std::to_string(saved.seq_len));
  }
  if (saved.seed != now.seed || saved.shuffle != now.shuffle) {
    throw Error("the checkpoint " + where + " was trained with --seed " + std::to_string(saved.seed) +
                    (saved.shuffle ? " --shuffle" : "") + "; this run has --seed " + std::to_string(now.seed) +
                    (now.shuffle ? " --shuffle" : ""),
                saved.seed != now.seed ? "--seed" : "--shuffle",
                "give the same --seed and --shuffle: they fix the data order the run continues in");
  }
  const json diff = json::diff(json::parse(saved.config_json), json::parse(now.config_json));
  for (const json& op : diff) {
    log::info("resume: config {} changed since the checkpoint ({})", op.at("path").get<std::string>(),
              op.contains("value") ? op.at("value").dump() : std::string("removed"));
  }
}

}  // namespace strata::train

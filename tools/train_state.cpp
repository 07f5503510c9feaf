// meta.json of a training checkpoint.
#include "tools/train_state.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace strata::tools {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "strata.train_state";
constexpr int kVersion = 1;

}  // namespace

std::string TrainState::to_json() const {
  json j = {{"format", kFormat},
            {"version", kVersion},
            {"step", step},
            {"applied_steps", applied_steps},
            {"world", world},
            {"shards", shards},
            {"stage", stage},
            {"dtype", dtype},
            {"seq_len", seq_len},
            {"seed", seed},
            {"shuffle", shuffle},
            {"model", json::parse(model.to_json())},
            {"engine", {{"adam_steps", engine.adam_steps}, {"loss_scaler", json::parse(engine.loss_scaler)}}},
            {"loader", json::parse(loader.to_json())},
            {"rng", "none"},
            {"config", json::parse(config_json)}};
  return j.dump(1) + "\n";
}

TrainState TrainState::from_json(const std::string& text, const std::string& where) {
  TrainState t;
  try {
    const json j = json::parse(text);
    if (j.at("format").get<std::string>() != kFormat) {
      throw Error(where + " is not a strata training state", where, "give a checkpoint written by strata train");
    }
    if (j.at("version").get<int>() != kVersion) {
      throw Error(where + " has version " + std::to_string(j.at("version").get<int>()) + "; this strata reads " +
                      std::to_string(kVersion),
                  where, "use the strata that wrote it");
    }
    t.step = j.at("step").get<std::uint64_t>();
    t.applied_steps = j.at("applied_steps").get<std::uint64_t>();
    t.world = j.at("world").get<int>();
    t.shards = j.at("shards").get<int>();
    t.stage = j.at("stage").get<int>();
    t.dtype = j.at("dtype").get<std::string>();
    t.seq_len = j.at("seq_len").get<int>();
    t.seed = j.at("seed").get<std::uint64_t>();
    t.shuffle = j.at("shuffle").get<bool>();
    t.model = models::GptConfig::from_json(j.at("model").dump(), where);
    t.engine.adam_steps = j.at("engine").at("adam_steps").get<std::int64_t>();
    t.engine.loss_scaler = j.at("engine").at("loss_scaler").dump();
    t.loader = models::LoaderState::from_json(j.at("loader").dump(), where);
    t.config_json = j.at("config").dump();
  } catch (const json::exception& e) {
    throw Error(where + " is damaged: " + e.what(), where, "resume from an earlier checkpoint");
  }
  return t;
}

void check_resume(const TrainState& saved, const TrainState& now, const std::string& where) {
  if (!(saved.model == now.model)) {
    throw Error("the checkpoint " + where + " is of another model: " + saved.model.to_json() + "; this run has " +
                    now.model.to_json(),
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

}  // namespace strata::tools

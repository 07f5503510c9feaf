// meta.json of a training checkpoint.
#include "train/run_state.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/registry.h"

namespace strata::train {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "strata.train_state";
constexpr int kVersion = 1;

}  // namespace

std::string RunState::to_json() const {
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
            {"model", json::parse(model->to_json())},
            {"engine", {{"adam_steps", engine.adam_steps}, {"loss_scaler", json::parse(engine.loss_scaler)}}},
            {"loader", json::parse(loader.to_json())},
            {"rng", "none"},
            {"config", json::parse(config_json)}};
  return j.dump(1) + "\n";
}

RunState RunState::from_json(const std::string& text, const std::string& where) {
  RunState t;
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
    t.model = models::model_from_json(j.at("model").dump(), where);
    t.engine.adam_steps = j.at("engine").at("adam_steps").get<std::int64_t>();
    t.engine.loss_scaler = j.at("engine").at("loss_scaler").dump();
    t.loader = models::LoaderState::from_json(j.at("loader").dump(), where);
    t.config_json = j.at("config").dump();
  } catch (const json::exception& e) {
    throw Error(where + " is damaged: " + e.what(), where, "resume from an earlier checkpoint");
  }
  return t;
}

}  // namespace strata::train

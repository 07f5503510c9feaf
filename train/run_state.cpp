// meta.json of a training checkpoint.
#include "train/run_state.h"

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/registry.h"
#include "runtime/checkpoint/json_fields.h"

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
    const auto damaged = [&](const std::string& why) {
      return Error(where + " is damaged: " + why, where, "resume from an earlier checkpoint");
    };
    const auto need_int = [&](const json& obj, const char* key) {
      return static_cast<int>(runtime::checkpoint::need_uint(obj, key, std::numeric_limits<int>::max(), damaged));
    };
    constexpr std::uint64_t kMaxU64 = std::numeric_limits<std::uint64_t>::max();
    const int version = need_int(j, "version");
    if (version != kVersion) {
      throw Error(where + " has version " + std::to_string(version) + "; this strata reads " + std::to_string(kVersion),
                  where, "use the strata that wrote it");
    }
    t.step = runtime::checkpoint::need_uint(j, "step", kMaxU64, damaged);
    t.applied_steps = runtime::checkpoint::need_uint(j, "applied_steps", kMaxU64, damaged);
    t.world = need_int(j, "world");
    t.shards = need_int(j, "shards");
    t.stage = need_int(j, "stage");
    t.dtype = j.at("dtype").get<std::string>();
    t.seq_len = need_int(j, "seq_len");
    t.seed = runtime::checkpoint::need_uint(j, "seed", kMaxU64, damaged);
    t.shuffle = j.at("shuffle").get<bool>();
    t.model = models::model_from_json(j.at("model").dump(), where);
    t.engine.adam_steps = static_cast<std::int64_t>(runtime::checkpoint::need_uint(
        j.at("engine"), "adam_steps", static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), damaged));
    t.engine.loss_scaler = j.at("engine").at("loss_scaler").dump();
    t.loader = models::LoaderState::from_json(j.at("loader").dump(), where);
    t.config_json = j.at("config").dump();
  } catch (const json::exception& e) {
    throw Error(where + " is damaged: " + e.what(), where, "resume from an earlier checkpoint");
  }
  return t;
}

}  // namespace strata::train

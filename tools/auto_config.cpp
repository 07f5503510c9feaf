#include "tools/auto_config.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "runtime/launch/launch.h"
#include "tools/estimate/recommend.h"
#include "tools/estimate_flags.h"

namespace strata::tools {
namespace {

using Json = nlohmann::json;

bool is_auto(const Json& j) { return j.is_string() && j.get<std::string>() == "auto"; }

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the config file", path, "check the path");
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error("the config is not a JSON object", path, "fix its syntax");
  return j;
}

// The placement keys a config leaves to strata, removed; true when there was one.
bool strip_auto_placement(Json& config) {
  if (!config.contains("zero_optimization")) return false;
  Json& z = config["zero_optimization"];
  if (is_auto(z)) {
    config.erase("zero_optimization");
    return true;
  }
  if (!z.is_object()) return false;
  bool found = false;
  if (z.contains("stage") && is_auto(z["stage"])) {
    z.erase("stage");
    found = true;
  }
  for (const char* section : {"offload_param", "offload_optimizer"}) {
    if (z.contains(section) && z[section].is_object() && z[section].contains("device") &&
        is_auto(z[section]["device"])) {
      z[section].erase("device");
      found = true;
    }
  }
  return found;
}

}  // namespace

bool wants_auto_placement(const std::string& config_path) {
  if (config_path == "auto") return true;
  if (config_path.empty()) return false;
  Json j = read_json(config_path);
  return strip_auto_placement(j);
}

std::string auto_config(const train::TrainOptions& o, const DeviceFlags& device, const std::string& profile_path) {
  const models::ModelSpecPtr model = models::model_from_flags(o.model_path, o.preset);
  Json base = Json::object();
  if (o.config_path != "auto") {
    base = read_json(o.config_path);
    strip_auto_placement(base);
  }
  if (!base.contains("optimizer")) base["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}};
  EstimateFlags flags;
  flags.model_path = o.model_path;
  flags.preset = o.preset;
  flags.device = device;
  flags.device.config_path.clear();
  flags.config_json = base.dump();
  flags.world = runtime::launch::detect_launch().world;
  flags.seq_len = o.seq_len;
  flags.activation_checkpointing = o.activation_checkpointing;
  flags.profile_path = profile_path;
  EstimateInputs in = estimate_inputs(flags, *model);
  // NVMe only where the config names a folder for it.
  const runtime::config::ZeroConfig& z = in.config.zero_optimization;
  const bool nvme = !z.offload_param.nvme_path.empty() || !z.offload_optimizer.nvme_path.empty();
  if (nvme) in.nvme_path = !z.offload_optimizer.nvme_path.empty() ? z.offload_optimizer.nvme_path.front()
                                                                   : z.offload_param.nvme_path.front();
  const Recommendation r = recommend(in, nvme);
  if (runtime::launch::detect_launch().rank == 0) {
    std::fprintf(stderr, "strata train --config auto: %s\n", r.why.c_str());
  }
  return runtime::config::config_to_json(r.config);
}

}  // namespace strata::tools

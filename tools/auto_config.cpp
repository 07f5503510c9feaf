#include "tools/auto_config.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/registry.h"
#include "runtime/config/config.h"
#include "runtime/estimate/recommend.h"
#include "runtime/launch/launch.h"
#include "tools/estimate_flags.h"

namespace strata::tools {
namespace {

using Json = nlohmann::json;

bool is_auto(const Json& j) { return j.is_string() && j.get<std::string>() == "auto"; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// An override that leaves a placement key to strata: zero_optimization=auto,
// zero_optimization.stage=auto, zero_optimization.offload_{param,optimizer}.device=auto.
bool asks_auto_placement(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) return false;
  const std::string_view key = trim(text.substr(0, eq));
  const std::string_view value = trim(text.substr(eq + 1));
  if (value != "auto" && value != "\"auto\"") return false;
  return key == "zero_optimization" || key == "zero_optimization.stage" ||
         key == "zero_optimization.offload_param.device" || key == "zero_optimization.offload_optimizer.device";
}

Json read_json(const std::string& path) {
  if (path == "auto") return Json::object();
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

bool wants_auto_placement(const std::string& config_path, const std::vector<std::string>& overrides) {
  if (config_path == "auto") return true;
  for (const std::string& o : overrides) {
    if (asks_auto_placement(o)) return true;
  }
  if (config_path.empty()) return false;
  Json j = read_json(config_path);
  return strip_auto_placement(j);
}

void auto_config(train::TrainOptions& o, const DeviceFlags& device, const std::string& profile_path) {
  const models::ModelSpecPtr model = models::model_from_flags(o.model_path, o.preset);
  // The file without its "auto" placement keys, then the overrides that do not ask for one,
  // parsed with every check a file gets (an override naming an unknown key is an error).
  Json file = read_json(o.config_path);
  strip_auto_placement(file);
  std::vector<std::string> overrides;
  for (const std::string& text : o.overrides) {
    if (!asks_auto_placement(text)) overrides.push_back(text);
  }
  runtime::config::Config base =
      runtime::config::parse_config(file.dump(), o.config_path == "auto" ? "--config auto" : o.config_path, overrides)
          .config;
  // The batch flags replace the config's values, as in any run; the global batch they and the
  // config fix is what the pick keeps.
  if (o.flags.micro_batch) base.train_micro_batch_size_per_gpu = *o.flags.micro_batch;
  if (o.flags.grad_accum) base.gradient_accumulation_steps = *o.flags.grad_accum;
  o.flags.micro_batch.reset();
  o.flags.grad_accum.reset();

  EstimateFlags flags;
  flags.model_path = o.model_path;
  flags.preset = o.preset;
  flags.device = device;
  flags.device.config_path.clear();
  flags.config_json = runtime::config::config_to_json(base);
  const runtime::launch::LaunchInfo launch = runtime::launch::detect_launch();
  flags.world = launch.world;
  // The node's pinned memory and NVMe are shared by the ranks the launcher started on it (when it
  // does not say: the GPUs found, else 8).
  if (launch.local_world > 0) flags.ranks_per_node = launch.local_world;
  flags.seq_len = o.seq_len;
  flags.activation_checkpointing = o.activation_checkpointing;
  flags.profile_path = profile_path;
  const runtime::estimate::AutoPlan plan = runtime::estimate::auto_plan(estimate_inputs(flags, *model), base);
  if (launch.rank == 0) {
    std::fprintf(stderr, "strata train --config auto: %s\nstrata train --config auto: %s\n",
                 plan.recommendation.why.c_str(), plan.recommendation.batch_why.c_str());
  }
  o.config_json = runtime::config::config_to_json(plan.config);
}

}  // namespace strata::tools

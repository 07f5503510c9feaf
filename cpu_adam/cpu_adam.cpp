// CpuAdam: parameter groups (hyper-parameters and step counters), and their checkpoint state
// as JSON. The step itself is adam_step (adam.cpp).
//
// State format (version 1):
//   {"format": "strata.cpu_adam", "version": 1,
//    "groups": [{"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-08,
//                "weight_decay": 0.01, "mode": "adamw", "bias_correction": true,
//                "step": 10}, ...]}
// Floats are written as the double equal to the fp32 value (nlohmann_json prints the shortest
// text that reads back to the same double), so a round trip is exact. load_state accepts
// exactly these keys, each with its type and range; anything else is a strata::Error naming
// the field.
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cpu_adam/adam.h"

namespace strata::cpu_adam {
namespace {

using Json = nlohmann::json;

constexpr const char* kFormat = "strata.cpu_adam";
constexpr int kVersion = 1;
constexpr const char* kWhere = "optimizer state (CpuAdam::load_state)";

[[noreturn]] void bad_state(const std::string& field, const std::string& problem) {
  throw Error(fmt::format("optimizer state: {} {}", field, problem),
              fmt::format("{}, field '{}'", kWhere, field),
              "the checkpoint's optimizer state is malformed or from another optimizer; "
              "restore it from an intact checkpoint");
}

const Json& member(const Json& object, const std::string& path, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) bad_state(path + "." + key, "is missing");
  return *it;
}

// The keys of `object` must be exactly `keys`.
void check_keys(const Json& object, const std::string& path,
                std::initializer_list<const char*> keys) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* k : keys) known = known || key == k;
    if (!known) bad_state(path + "." + key, "is not a known field");
  }
}

float get_float(const Json& object, const std::string& path, const char* key) {
  const Json& v = member(object, path, key);
  if (!v.is_number()) bad_state(path + "." + key, "must be a number");
  const double d = v.get<double>();
  const auto f = static_cast<float>(d);
  // Values we wrote are fp32 values exactly; anything else was edited or corrupted.
  if (!std::isfinite(d) || static_cast<double>(f) != d)
    bad_state(path + "." + key, fmt::format("= {} is not a finite fp32 value", d));
  return f;
}

AdamHyper parse_hyper(const Json& g, const std::string& path) {
  AdamHyper h;
  h.lr = get_float(g, path, "lr");
  h.beta1 = get_float(g, path, "beta1");
  h.beta2 = get_float(g, path, "beta2");
  h.eps = get_float(g, path, "eps");
  h.weight_decay = get_float(g, path, "weight_decay");
  const Json& mode = member(g, path, "mode");
  if (mode == "adam") h.mode = AdamMode::adam;
  else if (mode == "adamw") h.mode = AdamMode::adamw;
  else bad_state(path + ".mode", "must be \"adam\" or \"adamw\"");
  const Json& bias = member(g, path, "bias_correction");
  if (!bias.is_boolean()) bad_state(path + ".bias_correction", "must be true or false");
  h.bias_correction = bias.get<bool>();
  try {
    check_hyper(h);
  } catch (const Error& e) {
    bad_state(path, e.what_happened());
  }
  return h;
}

std::int64_t parse_step(const Json& g, const std::string& path) {
  const Json& step = member(g, path, "step");
  if (step.is_number_unsigned()) {
    const auto u = step.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(u);
  } else if (step.is_number_integer() && step.get<std::int64_t>() >= 0) {
    return step.get<std::int64_t>();
  }
  bad_state(path + ".step", "must be an integer >= 0");
}

}  // namespace

CpuAdam::CpuAdam(CpuAdamOptions options) {
  if (options.threads < 0)
    throw Error(fmt::format("CpuAdam thread count {} is negative", options.threads),
                "CpuAdamOptions::threads", "use 0 for the CPUs of the affinity mask");
  simd_ = options.simd.value_or(active_simd());
  if (simd_ > detected_simd())
    throw Error(fmt::format("CpuAdam asked for SIMD level {} but this CPU supports up to {}",
                            simd_name(simd_), simd_name(detected_simd())),
                "CpuAdamOptions::simd", "leave it unset to use the best level");
  threads_ = options.threads;
  if (threads_ == 0) {
    threads_ = cpu_info().logical_cores_in_affinity_mask;
    if (threads_ <= 0) threads_ = 1;
  }
}

int CpuAdam::add_group(const AdamHyper& hyper) {
  check_hyper(hyper);
  groups_.push_back(ParamGroup{hyper, 0});
  return group_count() - 1;
}

ParamGroup& CpuAdam::group(int index) {
  STRATA_ASSERT(index >= 0 && index < group_count(), "no such parameter group");
  return groups_[static_cast<std::size_t>(index)];
}

const ParamGroup& CpuAdam::group(int index) const {
  STRATA_ASSERT(index >= 0 && index < group_count(), "no such parameter group");
  return groups_[static_cast<std::size_t>(index)];
}

void CpuAdam::begin_step(int index) { ++group(index).step; }

void CpuAdam::update(int index, const AdamShard& shard, float grad_scale) const {
  const ParamGroup& g = group(index);
  STRATA_ASSERT(g.step >= 1, "CpuAdam::update before begin_step for this group");
  adam_step(simd_, threads_, g.hyper, g.step, shard, grad_scale);
}

std::string CpuAdam::save_state() const {
  Json groups = Json::array();
  for (const ParamGroup& g : groups_) {
    groups.push_back({{"lr", g.hyper.lr},
                      {"beta1", g.hyper.beta1},
                      {"beta2", g.hyper.beta2},
                      {"eps", g.hyper.eps},
                      {"weight_decay", g.hyper.weight_decay},
                      {"mode", g.hyper.mode == AdamMode::adam ? "adam" : "adamw"},
                      {"bias_correction", g.hyper.bias_correction},
                      {"step", g.step}});
  }
  const Json state = {{"format", kFormat}, {"version", kVersion}, {"groups", std::move(groups)}};
  return state.dump();
}

void CpuAdam::load_state(const std::string& text) {
  Json state;
  try {
    state = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(fmt::format("optimizer state is not valid JSON: {}", e.what()), kWhere,
                "restore the optimizer state from an intact checkpoint");
  }
  if (!state.is_object()) bad_state("(top level)", "must be a JSON object");
  check_keys(state, "state", {"format", "version", "groups"});
  const Json& format = member(state, "state", "format");
  if (format != kFormat) bad_state("state.format", fmt::format("must be \"{}\"", kFormat));
  const Json& version = member(state, "state", "version");
  if (!version.is_number_integer() || version.get<std::int64_t>() != kVersion)
    bad_state("state.version", fmt::format("must be {} (this build reads version {})", kVersion,
                                           kVersion));
  const Json& groups = member(state, "state", "groups");
  if (!groups.is_array()) bad_state("state.groups", "must be an array");
  if (group_count() != 0 && groups.size() != groups_.size())
    bad_state("state.groups", fmt::format("has {} groups but this optimizer has {}",
                                          groups.size(), groups_.size()));
  std::vector<ParamGroup> loaded;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string path = fmt::format("state.groups[{}]", i);
    const Json& g = groups[i];
    if (!g.is_object()) bad_state(path, "must be a JSON object");
    check_keys(g, path,
               {"lr", "beta1", "beta2", "eps", "weight_decay", "mode", "bias_correction", "step"});
    const AdamHyper hyper = parse_hyper(g, path);
    loaded.push_back(ParamGroup{hyper, parse_step(g, path)});
  }
  groups_ = std::move(loaded);  // only once everything parsed: a failed load changes nothing
}

}  // namespace strata::cpu_adam

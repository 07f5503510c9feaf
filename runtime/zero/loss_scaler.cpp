// LossScaler: DeepSpeed's static and dynamic fp16 loss scaling (see loss_scaler.h), and its
// checkpoint state as JSON.
#include "runtime/zero/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::runtime::zero {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFixHint =
    "fix this key in the config file (or its --set override); see docs/config.md";
constexpr std::string_view kStateFormat = "strata.loss_scaler";
constexpr int kStateVersion = 1;
constexpr std::string_view kStateWhere = "loss scaler state";
constexpr std::string_view kStateHint =
    "the checkpoint is damaged or was not written by this version of strata";

[[noreturn]] void throw_fp16(std::string_view key, std::string_view expected,
                             const std::string& got) {
  throw Error(fmt::format("invalid config value: expected {}, got {}", expected, got),
              fmt::format("fp16.{}", key), std::string(kFixHint));
}

[[noreturn]] void throw_state(std::string_view field, const std::string& what) {
  throw Error(fmt::format("malformed loss scaler state: {}", what),
              field.empty() ? std::string(kStateWhere) : fmt::format("{}: {}", kStateWhere, field),
              std::string(kStateHint));
}

constexpr std::string_view kStateFields[] = {"format",   "version",            "mode",
                                             "scale",    "cur_iter", "last_overflow_iter",
                                             "cur_hysteresis"};

const Json& field_of(const Json& state, std::string_view name) {
  const auto it = state.find(std::string(name));
  if (it == state.end()) throw_state(name, "the field is missing");
  return *it;
}

std::uint64_t unsigned_field(const Json& state, std::string_view name) {
  const Json& v = field_of(state, name);
  if (!v.is_number_unsigned()) {
    throw_state(name, fmt::format("expected an integer >= 0, got {}", v.dump()));
  }
  return v.get<std::uint64_t>();
}

}  // namespace

LossScaler::LossScaler(const config::Fp16Config& fp16, bool fp16_enabled) {
  if (!fp16_enabled) return;  // off: scale 1, no skipping

  if (!std::isfinite(fp16.loss_scale) || fp16.loss_scale < 0) {
    throw_fp16("loss_scale", "a finite number >= 0 (0 = dynamic)",
               fmt::format("{}", fp16.loss_scale));
  }
  if (fp16.loss_scale > 0) {
    mode_ = Mode::kStatic;
    scale_ = fp16.loss_scale;
    return;
  }

  mode_ = Mode::kDynamic;
  if (fp16.initial_scale_power < 0 || fp16.initial_scale_power > 127) {
    throw_fp16("initial_scale_power", "an integer in [0, 127]",
               std::to_string(fp16.initial_scale_power));
  }
  if (fp16.loss_scale_window == 0) throw_fp16("loss_scale_window", "an integer >= 1", "0");
  if (fp16.hysteresis == 0) throw_fp16("hysteresis", "an integer >= 1", "0");
  if (!std::isfinite(fp16.min_loss_scale) || !(fp16.min_loss_scale > 0)) {
    throw_fp16("min_loss_scale", "a finite number > 0", fmt::format("{}", fp16.min_loss_scale));
  }
  scale_ = std::ldexp(1.0, fp16.initial_scale_power);  // 2**initial_scale_power
  scale_window_ = fp16.loss_scale_window;
  delayed_shift_ = fp16.hysteresis;
  cur_hysteresis_ = fp16.hysteresis;
  consecutive_hysteresis_ = fp16.consecutive_hysteresis;
  min_scale_ = fp16.min_loss_scale;
}

std::string_view LossScaler::mode_name() const {
  switch (mode_) {
    case Mode::kOff: return "off";
    case Mode::kStatic: return "static";
    case Mode::kDynamic: return "dynamic";
  }
  return "off";
}

float LossScaler::scale() const {
  constexpr double kMax = std::numeric_limits<float>::max();
  return static_cast<float>(scale_ < kMax ? scale_ : kMax);
}

bool LossScaler::update(bool overflow) {
  switch (mode_) {
    case Mode::kOff: return false;
    case Mode::kStatic: return overflow;
    case Mode::kDynamic: break;
  }

  if (overflow) {
    if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
      if (scale_ == min_scale_) {
        // DeepSpeed's raise_error_at_min_scale (true in its ZeRO optimizers).
        throw Error(fmt::format("fp16 gradients overflowed at the minimum loss scale {}: the "
                                "loss scale cannot decrease any more",
                                scale_),
                    "fp16.min_loss_scale",
                    "the run has diverged or its gradients are not representable in fp16: "
                    "lower the learning rate, clip gradients, lower fp16.min_loss_scale, or "
                    "train in bf16");
      }
      scale_ = std::max(scale_ / 2.0, min_scale_);  // max(cur_scale / scale_factor, min_scale)
    } else {
      cur_hysteresis_ -= 1;
    }
    last_overflow_iter_ = static_cast<std::int64_t>(cur_iter_);
  } else {
    if (consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
    // stable_interval = (cur_iter - last_overflow_iter) - 1; last_overflow_iter < cur_iter.
    const std::uint64_t stable = cur_iter_ - static_cast<std::uint64_t>(last_overflow_iter_ + 1);
    if (stable > 0 && stable % scale_window_ == 0) {
      if (!consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
      scale_ *= 2.0;  // cur_scale *= scale_factor
    }
  }
  cur_iter_ += 1;
  return overflow;
}

std::string LossScaler::save_state() const {
  Json state = Json::object();
  state["format"] = std::string(kStateFormat);
  state["version"] = kStateVersion;
  state["mode"] = std::string(mode_name());
  state["scale"] = scale_;  // nlohmann prints doubles with 17 digits: exact round trip
  state["cur_iter"] = cur_iter_;
  state["last_overflow_iter"] = last_overflow_iter_;
  state["cur_hysteresis"] = cur_hysteresis_;
  return state.dump();
}

void LossScaler::load_state(const std::string& json) {
  Json state;
  try {
    state = Json::parse(json);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_state("", fmt::format("not valid JSON ({})", e.what()));
  }
  if (!state.is_object()) throw_state("", "expected a JSON object");
  for (const auto& [key, value] : state.items()) {
    bool known = false;
    for (std::string_view k : kStateFields) known = known || key == k;
    if (!known) throw_state(key, "unknown field");
  }

  const Json& format = field_of(state, "format");
  if (!format.is_string() || format.get<std::string>() != kStateFormat) {
    throw_state("format", fmt::format("expected \"{}\", got {}", kStateFormat, format.dump()));
  }
  const Json& version = field_of(state, "version");
  if (!version.is_number_integer() || version.get<std::int64_t>() != kStateVersion) {
    throw_state("version", fmt::format("expected {}, got {}", kStateVersion, version.dump()));
  }

  const Json& mode = field_of(state, "mode");
  if (!mode.is_string()) throw_state("mode", fmt::format("expected a string, got {}", mode.dump()));
  const std::string saved_mode = mode.get<std::string>();
  if (saved_mode != "off" && saved_mode != "static" && saved_mode != "dynamic") {
    throw_state("mode", fmt::format("expected \"off\", \"static\" or \"dynamic\", got {}",
                                    mode.dump()));
  }

  const Json& scale_json = field_of(state, "scale");
  if (!scale_json.is_number()) {
    throw_state("scale", fmt::format("expected a number, got {}", scale_json.dump()));
  }
  const double scale = scale_json.get<double>();
  if (!std::isfinite(scale) || !(scale > 0)) {
    throw_state("scale", fmt::format("expected a finite number > 0, got {}", scale));
  }
  if (saved_mode == "off" && scale != 1.0) {
    throw_state("scale", fmt::format("expected 1 with mode \"off\", got {}", scale));
  }

  const std::uint64_t cur_iter = unsigned_field(state, "cur_iter");

  const Json& last_json = field_of(state, "last_overflow_iter");
  if (!last_json.is_number_integer() ||
      (last_json.is_number_unsigned() &&
       last_json.get<std::uint64_t>() >
           static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
    throw_state("last_overflow_iter", fmt::format("expected an integer >= -1, got {}",
                                                  last_json.dump()));
  }
  const auto last_overflow_iter = last_json.get<std::int64_t>();
  if (last_overflow_iter < -1) {
    throw_state("last_overflow_iter",
                fmt::format("expected an integer >= -1, got {}", last_overflow_iter));
  }
  // An overflow is recorded at cur_iter before cur_iter advances: last < cur_iter.
  if (static_cast<std::uint64_t>(last_overflow_iter + 1) > cur_iter) {
    throw_state("last_overflow_iter",
                fmt::format("{} is not before cur_iter {}", last_overflow_iter, cur_iter));
  }

  const std::uint64_t cur_hysteresis = unsigned_field(state, "cur_hysteresis");
  if (cur_hysteresis == 0 || cur_hysteresis > std::numeric_limits<std::uint32_t>::max()) {
    throw_state("cur_hysteresis",
                fmt::format("expected an integer in [1, 2^32 - 1], got {}", cur_hysteresis));
  }

  const std::string_view my_mode = mode_name();
  if (saved_mode != my_mode) {
    throw Error(fmt::format("the checkpoint's loss scaling is \"{}\" but the config's is \"{}\"",
                            saved_mode, my_mode),
                std::string(kStateWhere),
                "resume with the fp16 settings of the run that wrote the checkpoint "
                "(fp16.enabled, fp16.loss_scale)");
  }

  // Everything checked: commit.
  if (mode_ != Mode::kDynamic) return;  // the scale is the config's
  scale_ = scale;
  cur_iter_ = cur_iter;
  last_overflow_iter_ = last_overflow_iter;
  cur_hysteresis_ = static_cast<std::uint32_t>(
      cur_hysteresis < delayed_shift_ ? cur_hysteresis : delayed_shift_);
}

}  // namespace strata::runtime::zero

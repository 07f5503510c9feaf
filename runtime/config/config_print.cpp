// Config -> JSON with every key of the field lists (config_fields.h), in their order, which is
// the order docs/config.md lists them. What this prints,
// parse_config() reads back to the same Config ("auto" stays "auto", absent stays null).
#include <type_traits>

#include "core/log.h"
#include "runtime/config/config_fields.h"
#include "runtime/config/json_reader.h"

namespace strata::runtime::config {

std::string_view to_string(OffloadDevice value) {
  switch (value) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  STRATA_ASSERT(false, "unknown OffloadDevice");
}

std::string_view to_string(OptimizerType value) {
  switch (value) {
    case OptimizerType::kAdam: return "Adam";
    case OptimizerType::kAdamW: return "AdamW";
  }
  STRATA_ASSERT(false, "unknown OptimizerType");
}

std::string_view to_string(SchedulerType value) {
  switch (value) {
    case SchedulerType::kWarmupLR: return "WarmupLR";
    case SchedulerType::kWarmupDecayLR: return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR: return "WarmupCosineLR";
  }
  STRATA_ASSERT(false, "unknown SchedulerType");
}

std::string_view to_string(WarmupType value) {
  switch (value) {
    case WarmupType::kLog: return "log";
    case WarmupType::kLinear: return "linear";
  }
  STRATA_ASSERT(false, "unknown WarmupType");
}

std::string_view to_string(DeviceKind value) {
  switch (value) {
    case DeviceKind::kAuto: return "auto";
    case DeviceKind::kHost: return "host";
    case DeviceKind::kCuda: return "cuda";
  }
  STRATA_ASSERT(false, "unknown DeviceKind");
}

std::string_view to_string(IoBackend value) {
  switch (value) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kIoUring: return "io_uring";
    case IoBackend::kThreads: return "threads";
  }
  STRATA_ASSERT(false, "unknown IoBackend");
}

std::string_view to_string(DirectIoMode value) {
  switch (value) {
    case DirectIoMode::kAuto: return "auto";
    case DirectIoMode::kRequire: return "require";
    case DirectIoMode::kOff: return "off";
  }
  STRATA_ASSERT(false, "unknown DirectIoMode");
}

std::string_view to_string(CheckpointOnError value) {
  switch (value) {
    case CheckpointOnError::kContinue: return "continue";
    case CheckpointOnError::kStop: return "stop";
  }
  STRATA_ASSERT(false, "unknown CheckpointOnError");
}

std::string_view to_string(GradAccumDtype value) {
  switch (value) {
    case GradAccumDtype::kFp32: return "fp32";
    case GradAccumDtype::kBf16: return "bf16";
    case GradAccumDtype::kFp16: return "fp16";
  }
  STRATA_ASSERT(false, "unknown GradAccumDtype");
}

namespace detail {
namespace {

template <Section S>
Json section_json(const S& s);

template <typename T>
Json value_json(const T& value) {
  if constexpr (Section<T>) {
    return section_json(value);
  } else if constexpr (std::is_enum_v<T>) {
    return std::string(to_string(value));
  } else {
    return Json(value);
  }
}

template <typename T>
Json value_json(const AutoOr<T>& value) {
  if (value.is_auto()) return std::string(kAuto);
  return value_json(value.value());
}

template <typename T>
Json value_json(const std::optional<T>& value) {
  if (!value) return nullptr;
  return value_json(*value);
}

// A folder list (nvme_path). An unset path prints as null, which reads back as unset.
// DeepSpeed's form where it fits: null for none, a string for one folder, a list for more.
Json value_json(const std::vector<std::string>& paths) {
  if (paths.empty()) return nullptr;
  if (paths.size() == 1) return paths.front();
  return Json(paths);
}

// The keys of S's field list that apply to `s`, in the list's order. Bytes print as integers
// so the output reads back exactly; docs/config.md explains 0.
template <Section S>
Json section_json(const S& s) {
  Json j = Json::object();
  for_each_field(fields_of(std::type_identity<S>{}), [&](const auto& f) {
    if (f.applies_to(s)) j[std::string(f.key)] = value_json(s.*f.member);
  });
  return j;
}

// optimizer and scheduler: {"type": ..., "params": {the field list}}.
template <typename S>
Json typed_json(const S& s) {
  Json j = Json::object();
  j["type"] = value_json(s.type);
  j["params"] = section_json(s);
  return j;
}

}  // namespace

Json config_to_json_value(const Config& c) {
  Json j = section_json(c);  // the batch keys and clipping (kTopFields)
  j["fp16"] = section_json(c.fp16);
  j["bf16"] = section_json(c.bf16);
  j["optimizer"] = c.optimizer ? typed_json(*c.optimizer) : Json(nullptr);
  j["scheduler"] = c.scheduler ? typed_json(*c.scheduler) : Json(nullptr);
  j["zero_optimization"] = section_json(c.zero_optimization);
  j["aio"] = section_json(c.aio);
  j["data_types"] = section_json(c.data_types);
  j["strata"] = section_json(c.strata);
  return j;
}

}  // namespace detail

std::string config_to_json(const Config& config) {
  return detail::config_to_json_value(config).dump(2) + "\n";
}

void log_config(const Config& config) {
  log::info("config (resolved):\n{}", config_to_json(config));
}

}  // namespace strata::runtime::config

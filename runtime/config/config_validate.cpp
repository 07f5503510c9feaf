// validate_config(): value ranges and the rules that tie keys together. A Config built in
// code goes through the same checks as one read from a file, so the rules live here and not
// in the JSON reader. Values still "auto" are checked once resolved. The simple ranges are the
// field lists' (config_fields.h); the rules that tie keys together are written out here.
#include <array>
#include <cmath>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "runtime/config/config_fields.h"

namespace strata::runtime::config {
namespace {

constexpr std::string_view kFixHint =
    "fix this key in the config file (or its --set override); see docs/config.md";

[[noreturn]] void throw_range(std::string_view path, std::string_view expected,
                              const std::string& got) {
  throw Error(fmt::format("invalid config value: expected {}, got {}", expected, got),
              std::string(path), std::string(kFixHint));
}

// fmt renders doubles in their shortest round-trip form, as the printed config does.
std::string show(double v) { return fmt::format("{}", v); }

void check_positive(std::string_view path, std::uint64_t v) {
  if (v == 0) throw_range(path, "a positive integer", "0");
}

void check_non_negative(std::string_view path, double v) {
  if (!(v >= 0) || !std::isfinite(v)) throw_range(path, "a finite number >= 0", show(v));
}

void check_unit_interval(std::string_view path, double v) {
  if (!(v >= 0 && v <= 1)) throw_range(path, "a number in [0, 1]", show(v));
}

// Calls fn(value) when `value` is concrete: not "auto", not absent.
template <typename T, typename Fn>
void with_concrete(const T& value, Fn&& fn) {
  fn(value);
}
template <typename T, typename Fn>
void with_concrete(const AutoOr<T>& value, Fn&& fn) {
  if (!value.is_auto()) with_concrete(value.value(), fn);
}
template <typename T, typename Fn>
void with_concrete(const std::optional<T>& value, Fn&& fn) {
  if (value) with_concrete(*value, fn);
}

// A field's Range (config_fields.h) on its concrete value.
template <typename T>
void check_range(const std::string& path, const detail::Range& range, const T& v) {
  using Kind = detail::Range::Kind;
  if constexpr (std::is_same_v<T, std::array<double, 2>>) {
    STRATA_ASSERT(range.kind == Kind::kBetas, "a pair of numbers takes the betas rule");
    for (std::size_t i = 0; i < 2; ++i) {
      if (!(v[i] >= 0 && v[i] < 1))
        throw_range(fmt::format("{}[{}]", path, i), "a number in [0, 1)", show(v[i]));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (range.kind == Kind::kNonNegative) check_non_negative(path, v);
    if (range.kind == Kind::kPositiveFinite && (!(v > 0) || !std::isfinite(v)))
      throw_range(path, "a finite number > 0", show(v));
    if (range.kind == Kind::kUnitInterval) check_unit_interval(path, v);
  } else if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
    STRATA_ASSERT(range.kind == Kind::kPositive, "a count takes the positive rule");
    check_positive(path, v);
    if (range.hi > 0 && v > static_cast<std::uint64_t>(range.hi))
      throw_range(path, range.expected, std::to_string(v));
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    STRATA_ASSERT(range.kind == Kind::kInteger, "a signed integer takes an interval");
    if (v < range.lo || v > range.hi) throw_range(path, range.expected, std::to_string(v));
  } else {
    STRATA_ASSERT(range.kind == Kind::kAny, "a range rule on a value that has no order");
  }
}

// The range rules of S's field list (those that apply to `s`), in the list's order. Sections
// inside S (the offload sections of zero_optimization) are checked with their own lists.
template <detail::Section S>
void check_fields(std::string_view section, const S& s) {
  detail::for_each_field(detail::fields_of(std::type_identity<S>{}), [&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Value;
    if (!f.applies_to(s)) return;
    const std::string path = section.empty() ? std::string(f.key)
                                             : fmt::format("{}.{}", section, f.key);
    if constexpr (detail::Section<T>) {
      check_fields(path, s.*f.member);
    } else if (f.range.kind != detail::Range::Kind::kAny) {
      with_concrete(s.*f.member, [&](const auto& v) { check_range(path, f.range, v); });
    }
  });
}

void validate_precision(const Config& c) {
  const Fp16Config& f = c.fp16;
  check_fields("fp16", f);
  bool fp16_on = !f.enabled.is_auto() && f.enabled.value();
  bool bf16_on = !c.bf16.enabled.is_auto() && c.bf16.enabled.value();
  if (fp16_on && bf16_on) {
    throw Error("fp16 and bf16 are both enabled", "bf16.enabled",
                "enable one of them: bf16 where the device supports it (no loss scaling needed), "
                "else fp16");
  }
}

// DeepSpeed's data_types.grad_accum_dtype. fp32 and bf16 go with any training dtype. An fp16
// accumulator goes only with fp16 training: there the loss scaler checks the accumulated
// gradients for overflow and skips the step; with bf16 or fp32 nothing would, and a gradient past
// fp16's 65504 (or under its 6e-8) would reach the optimizer as Inf (or 0) unnoticed.
void validate_data_types(const Config& config) {
  const DataTypesConfig& d = config.data_types;
  // An "auto" fp16.enabled is checked again once resolved (resolve_config validates).
  if (d.grad_accum_dtype != GradAccumDtype::kFp16 || config.fp16.enabled.value_or(true)) return;
  throw Error("data_types.grad_accum_dtype \"fp16\" needs fp16 training (fp16.enabled)",
              "data_types.grad_accum_dtype",
              "use \"bf16\" (2 bytes an element too, with fp32's range) or \"fp32\"; an fp16 accumulator "
              "is only safe where fp16's loss scaler checks it for overflow");
}

void validate_optimizer(const OptimizerConfig& o) {
  check_fields("optimizer.params", o);
  if (o.type == OptimizerType::kAdamW && !o.adam_w_mode) {
    throw Error("optimizer type AdamW always decouples weight decay, but adam_w_mode is false",
                "optimizer.params.adam_w_mode", "use type \"Adam\" with adam_w_mode false for L2");
  }
}

void validate_scheduler(const SchedulerConfig& s, std::vector<ConfigWarning>* warnings) {
  check_fields("scheduler.params", s);  // the keys of s.type only
  if (s.type == SchedulerType::kWarmupLR) {
    if (s.total_num_steps) {
      throw Error("WarmupLR takes no total_num_steps", "scheduler.params.total_num_steps",
                  "remove it, or use WarmupDecayLR / WarmupCosineLR");
    }
    return;
  }
  if (!s.total_num_steps) {
    throw Error(fmt::format("scheduler {} needs total_num_steps", to_string(s.type)),
                "scheduler.params.total_num_steps",
                "set it to the number of optimizer steps of the run (or \"auto\")");
  }
  if (!s.total_num_steps->is_auto()) {
    if (!s.warmup_num_steps.is_auto() && s.total_num_steps->value() < s.warmup_num_steps.value()) {
      // DeepSpeed warns about this too: the run ends while still warming up.
      warnings->push_back({ConfigWarning::Kind::kOther, "scheduler.params.total_num_steps",
                           fmt::format("scheduler.params.total_num_steps ({}) is less than "
                                       "warmup_num_steps ({}): the run ends during warmup",
                                       s.total_num_steps->value(), s.warmup_num_steps.value()),
                           {}});
    }
  }
}

void validate_offload_nvme(std::string_view section, OffloadDevice device,
                           const std::vector<std::string>& nvme_path) {
  if (device == OffloadDevice::kNvme && nvme_path.empty()) {
    throw Error("offload device is \"nvme\" but no nvme_path is given",
                fmt::format("{}.nvme_path", section),
                "set nvme_path to a directory on a fast local NVMe drive");
  }
}

void validate_zero(const ZeroConfig& z) {
  check_fields("zero_optimization", z);  // stage, ratio, sub-group and bucket sizes

  const OffloadParamConfig& p = z.offload_param;
  validate_offload_nvme("zero_optimization.offload_param", p.device, p.nvme_path);
  if (p.device != OffloadDevice::kNone && z.stage != 3) {
    throw Error(fmt::format("offloading parameters needs ZeRO stage 3 (stage is {})", z.stage),
                "zero_optimization.offload_param.device",
                "set zero_optimization.stage to 3, or offload_param.device to \"none\"");
  }
  if (p.device == OffloadDevice::kNvme) {
    check_positive("zero_optimization.offload_param.buffer_count", p.buffer_count);
    check_positive("zero_optimization.offload_param.buffer_size", p.buffer_size);
  }

  const OffloadOptimizerConfig& o = z.offload_optimizer;
  validate_offload_nvme("zero_optimization.offload_optimizer", o.device, o.nvme_path);
  if (o.device != OffloadDevice::kNone && z.stage == 0) {
    throw Error("offloading the optimizer needs ZeRO stage 1, 2 or 3 (stage is 0)",
                "zero_optimization.offload_optimizer.device",
                "set zero_optimization.stage to 1, 2 or 3, or offload_optimizer.device to \"none\"");
  }
  if (o.device == OffloadDevice::kNvme)
    check_positive("zero_optimization.offload_optimizer.buffer_count", o.buffer_count);
  if (o.ratio < 1 && z.stage != 3) {
    throw Error(fmt::format("partial optimizer offload (ratio {}) needs ZeRO stage 3 (stage is {})",
                            show(o.ratio), z.stage),
                "zero_optimization.offload_optimizer.ratio",
                "set ratio to 1, or zero_optimization.stage to 3");
  }
}

void validate_aio(const AioConfig& a) {
  // The engine's limits (offload/aio_engine.h): O_DIRECT needs 4 KiB-aligned pieces; one ring
  // per worker thread, each with queue_depth entries (at most 4096, and at most 64 workers:
  // the field list's ranges).
  check_fields("aio", a);
  constexpr std::uint64_t kDirectIoAlignment = offload::kDirectIoAlignment;
  if (a.block_size % kDirectIoAlignment != 0) {
    throw Error(fmt::format("aio.block_size ({}) is not a multiple of {} bytes, which direct I/O "
                            "needs",
                            a.block_size, kDirectIoAlignment),
                "aio.block_size",
                fmt::format("use a power of two from 128K up, e.g. {} (the default)", offload::kDefaultBlockBytes));
  }
}

}  // namespace

std::vector<ConfigWarning> validate_config(const Config& config) {
  std::vector<ConfigWarning> warnings;
  check_fields("", config);  // the batch keys and clipping
  validate_precision(config);
  if (config.optimizer) validate_optimizer(*config.optimizer);
  if (config.scheduler) validate_scheduler(*config.scheduler, &warnings);
  validate_zero(config.zero_optimization);
  validate_aio(config.aio);
  validate_data_types(config);
  return warnings;
}

}  // namespace strata::runtime::config

// LrSchedule: DeepSpeed's warmup schedules. The formulas and their order of operations
// follow deepspeed/runtime/lr_schedules.py (see lr_schedule.h); comments name the DeepSpeed
// expression each line stands for.
#include "runtime/zero/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata::runtime::zero {
namespace {

constexpr std::string_view kFixHint =
    "fix this key in the config file (or its --set override); see docs/config.md";

template <typename T>
T concrete(const config::AutoOr<T>& value, std::string_view path) {
  if (value.is_auto()) {
    throw Error("scheduler value is still \"auto\" when the schedule is built", std::string(path),
                fmt::format("set {} to a value in the config (or with --set {}=...)", path, path));
  }
  return value.value();
}

void check_finite_non_negative(double v, std::string_view path) {
  if (!std::isfinite(v) || v < 0) {
    throw Error(fmt::format("invalid config value: expected a finite number >= 0, got {}", v),
                std::string(path), std::string(kFixHint));
  }
}

void check_unit_interval(double v, std::string_view path) {
  if (!(v >= 0 && v <= 1)) {
    throw Error(fmt::format("invalid config value: expected a number in [0, 1], got {}", v),
                std::string(path), std::string(kFixHint));
  }
}

}  // namespace

LrSchedule::LrSchedule(const std::optional<config::SchedulerConfig>& sched, double base_lr)
    : base_lr_(base_lr) {
  check_finite_non_negative(base_lr, "optimizer.params.lr");
  if (!sched) return;  // constant lr
  const config::SchedulerConfig& s = *sched;

  switch (s.type) {
    case config::SchedulerType::kWarmupLR: kind_ = Kind::kWarmupLR; break;
    case config::SchedulerType::kWarmupDecayLR: kind_ = Kind::kWarmupDecayLR; break;
    case config::SchedulerType::kWarmupCosineLR: kind_ = Kind::kWarmupCosineLR; break;
  }
  warmup_type_ = s.warmup_type;

  const std::uint64_t warmup_num_steps =
      concrete(s.warmup_num_steps, "scheduler.params.warmup_num_steps");
  if (warmup_num_steps == 0) {
    // DeepSpeed: ValueError "warmup_num_steps must be a positive integer".
    throw Error("invalid config value: expected a positive integer, got 0",
                "scheduler.params.warmup_num_steps", std::string(kFixHint));
  }
  // self.warmup_num_steps = max(2, warmup_num_steps); 1 / log(1) would divide by zero.
  warmup_steps_ = std::max<std::uint64_t>(2, warmup_num_steps);
  inverse_log_warmup_ = 1.0 / std::log(static_cast<double>(warmup_steps_));

  if (s.last_batch_iteration < -1) {
    throw Error(fmt::format("invalid config value: expected -1 (start) or a step index >= 0, "
                            "got {}",
                            s.last_batch_iteration),
                "scheduler.params.last_batch_iteration", std::string(kFixHint));
  }
  last_batch_iteration_ = s.last_batch_iteration;

  if (kind_ == Kind::kWarmupLR || kind_ == Kind::kWarmupDecayLR) {
    const double min_lr = concrete(s.warmup_min_lr, "scheduler.params.warmup_min_lr");
    const double max_lr = concrete(s.warmup_max_lr, "scheduler.params.warmup_max_lr");
    check_finite_non_negative(min_lr, "scheduler.params.warmup_min_lr");
    check_finite_non_negative(max_lr, "scheduler.params.warmup_max_lr");
    min_lr_ = min_lr;
    delta_lr_ = max_lr - min_lr;  // self.delta_lrs = [big - small ...]
  } else {
    check_unit_interval(s.warmup_min_ratio, "scheduler.params.warmup_min_ratio");
    check_unit_interval(s.cos_min_ratio, "scheduler.params.cos_min_ratio");
    warmup_min_ratio_ = s.warmup_min_ratio;
    cos_min_ratio_ = s.cos_min_ratio;
  }

  if (kind_ == Kind::kWarmupDecayLR || kind_ == Kind::kWarmupCosineLR) {
    if (!s.total_num_steps) {
      throw Error(fmt::format("scheduler {} needs total_num_steps", config::to_string(s.type)),
                  "scheduler.params.total_num_steps",
                  "set it to the number of optimizer steps of the run");
    }
    total_steps_ = concrete(*s.total_num_steps, "scheduler.params.total_num_steps");
    if (total_steps_ == 0) {
      throw Error("invalid config value: expected a positive integer, got 0",
                  "scheduler.params.total_num_steps", std::string(kFixHint));
    }
  }
}

double LrSchedule::lr(std::uint64_t step) const {
  if (kind_ == Kind::kConstant) return base_lr_;
  if (step == 0) {
    if (last_batch_iteration_ >= 0) return base_lr_;  // DeepSpeed leaves the optimizer's lr
    // get_lr() before the schedule starts: self.min_lrs, or [0.0] for WarmupCosineLR.
    return kind_ == Kind::kWarmupCosineLR ? 0.0 : min_lr_;
  }
  // After `step` applied steps the scheduler has been stepped `step` times from L.
  const auto start = static_cast<std::uint64_t>(last_batch_iteration_ + 1);  // L + 1 >= 0
  STRATA_ASSERT(step <= std::numeric_limits<std::uint64_t>::max() - start, "step out of range");
  return schedule_at(start + step - 1);
}

double LrSchedule::warmup_progress(std::uint64_t iteration) const {
  if (warmup_type_ == config::WarmupType::kLog) {
    // self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
    return inverse_log_warmup_ * std::log(static_cast<double>(iteration + 1));
  }
  // self.last_batch_iteration / self.warmup_num_steps (true division)
  return static_cast<double>(iteration) / static_cast<double>(warmup_steps_);
}

double LrSchedule::schedule_at(std::uint64_t iteration) const {
  // Step counts stay far below 2^53, so every integer below converts to double exactly, and
  // Python's int / int true division is then the same correctly rounded double division.
  const auto i = static_cast<double>(iteration);
  const auto w = static_cast<double>(warmup_steps_);
  const auto t = static_cast<double>(total_steps_);
  const bool warming_up = iteration < warmup_steps_;

  switch (kind_) {
    case Kind::kConstant:
      break;
    case Kind::kWarmupLR: {
      const double gamma = warming_up ? warmup_progress(iteration) : 1.0;
      return min_lr_ + (delta_lr_ * gamma);
    }
    case Kind::kWarmupDecayLR: {
      double gamma;
      if (warming_up) {
        gamma = warmup_progress(iteration);
      } else {
        // max(0.0, float(T - i) / float(max(1.0, T - W)))
        gamma = std::max(0.0, (t - i) / std::max(1.0, t - w));
      }
      return min_lr_ + (delta_lr_ * gamma);
    }
    case Kind::kWarmupCosineLR: {
      double ratio;
      if (warming_up) {
        // ratio = warmup_min_ratio + ratio * (1 - warmup_min_ratio)
        const double ratio_delta = 1.0 - warmup_min_ratio_;
        ratio = warmup_min_ratio_ + warmup_progress(iteration) * ratio_delta;
      } else {
        // real_last_step = i - W + 1; real_total_steps = max(1, T - W);
        // cosine_progress = min(1.0, real_last_step / real_total_steps)
        const double real_last_step = i - w + 1.0;
        const double real_total_steps = std::max(1.0, t - w);
        const double progress = std::min(1.0, real_last_step / real_total_steps);
        const double ratio_delta = 1.0 - cos_min_ratio_;
        ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
        ratio = std::max(0.0, cos_min_ratio_ + ratio_delta * ratio);
      }
      return base_lr_ * ratio;  // org_lr * lr_ratio
    }
  }
  return base_lr_;
}

}  // namespace strata::runtime::zero

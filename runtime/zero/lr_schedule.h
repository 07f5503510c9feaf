#pragma once
// The learning rate of each optimizer step: DeepSpeed's WarmupLR, WarmupDecayLR and
// WarmupCosineLR (deepspeed/runtime/lr_schedules.py), reproduced formula for formula, or a
// constant lr when the config has no scheduler section.
//
// Which lr the k-th step uses (k = 0 is the first optimizer step of the run)
// ---------------------------------------------------------------------------
// DeepSpeed keeps `last_batch_iteration` (L, from scheduler.params, -1 = a fresh start):
//   - constructing the scheduler with L == -1 writes get_lr() at iteration -1 into the
//     optimizer: warmup_min_lr for WarmupLR/WarmupDecayLR, 0 for WarmupCosineLR (its get_lr
//     returns 0 before the schedule starts). With L >= 0 it leaves the optimizer's lr alone,
//     so the optimizer keeps optimizer.params.lr;
//   - the engine calls scheduler.step() after every optimizer step that is applied, which
//     sets L = L + 1 and writes f(L) into the optimizer. Steps skipped for fp16 overflow do
//     not advance the scheduler.
// So, counting k over *applied* steps:
//   lr(0) = warmup_min_lr (WarmupLR, WarmupDecayLR) or 0 (WarmupCosineLR)   when L == -1
//   lr(0) = base_lr (optimizer.params.lr, untouched by DeepSpeed)           when L >= 0
//   lr(k) = f(L + k)                                                        for k >= 1
// e.g. with L == -1 the first two steps both run at warmup_min_lr, then f(1), f(2), ...
// The engine passes k = the number of optimizer steps applied before this one (a resumed
// run continues the count), never counting skipped steps.
//
// f(i) with W = max(2, warmup_num_steps) (DeepSpeed's guard against log(1) = 0), T =
// total_num_steps, and warmup progress g(i) = log(i + 1) / log(W) ("log") or i / W
// ("linear") for i < W:
//   WarmupLR        min + (max - min) * (i < W ? g(i) : 1)
//   WarmupDecayLR   min + (max - min) * (i < W ? g(i) : max(0, (T - i) / max(1, T - W)))
//   WarmupCosineLR  base_lr * (i < W ? wmin + (1 - wmin) * g(i)
//                                    : max(0, cmin + (1 - cmin) * (1 + cos(pi * p)) / 2)),
//                   p = min(1, (i - W + 1) / max(1, T - W))
// where min/max are warmup_min_lr/warmup_max_lr and wmin/cmin are warmup_min_ratio and
// cos_min_ratio (fractions of the optimizer's lr). The arithmetic follows DeepSpeed's order
// of operations in double precision, so the values are DeepSpeed's bit for bit wherever the
// C library's log and cos agree with Python's (they are the same functions on Linux).
#include <cstdint>
#include <optional>

#include "runtime/config/config.h"

namespace strata::runtime::zero {

class LrSchedule {
 public:
  // sched: nullopt = constant lr (= base_lr). base_lr: optimizer.params.lr (resolved, not
  // auto). Throws strata::Error naming the key path when a value the schedule type uses is
  // still "auto" (e.g. "scheduler.params.warmup_num_steps") or out of range (warmup_num_steps
  // 0, which DeepSpeed rejects too; last_batch_iteration < -1; a missing total_num_steps).
  LrSchedule(const std::optional<config::SchedulerConfig>& sched, double base_lr);

  // The learning rate used by the optimizer step with 0-based index `step` (the first
  // optimizer step of a run is step 0; see the top of this file).
  double lr(std::uint64_t step) const;

 private:
  enum class Kind { kConstant, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };

  double schedule_at(std::uint64_t iteration) const;  // f(iteration), iteration >= 0
  double warmup_progress(std::uint64_t iteration) const;  // g(iteration), iteration < W

  Kind kind_ = Kind::kConstant;
  config::WarmupType warmup_type_ = config::WarmupType::kLog;
  double base_lr_ = 0.0;
  double min_lr_ = 0.0;    // WarmupLR, WarmupDecayLR
  double delta_lr_ = 0.0;  // warmup_max_lr - warmup_min_lr
  std::uint64_t warmup_steps_ = 2;  // W = max(2, warmup_num_steps)
  double inverse_log_warmup_ = 0.0;  // 1 / log(W)
  std::uint64_t total_steps_ = 0;   // T (WarmupDecayLR, WarmupCosineLR)
  std::int64_t last_batch_iteration_ = -1;
  double warmup_min_ratio_ = 0.0;  // WarmupCosineLR
  double cos_min_ratio_ = 0.0;     // WarmupCosineLR
};

}  // namespace strata::runtime::zero

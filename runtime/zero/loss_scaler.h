#pragma once
// fp16 loss scaling, as DeepSpeed's ZeRO optimizers do it (deepspeed/runtime/fp16/
// loss_scaler.py: LossScaler for a static scale, DynamicLossScaler for a dynamic one).
//
// Three modes, picked from the config:
//   off      fp16 disabled (fp32 or bf16): the scale is 1 and no step is ever skipped;
//   static   fp16 with loss_scale > 0: that scale, forever; a step whose gradients
//            overflowed is still skipped (DeepSpeed's ZeRO checks for overflow either way);
//   dynamic  fp16 with loss_scale == 0: starts at 2^initial_scale_power and moves as below.
//
// Dynamic scaling, per optimizer step (update() is called once per step, skipped or not,
// with whether any gradient on any rank was Inf/NaN). The state is DeepSpeed's: the scale,
// the step counter `cur_iter` (starts at 0), the step of the last overflow
// `last_overflow_iter` (starts at -1) and the hysteresis left `cur_hysteresis` (starts at
// fp16.hysteresis, DeepSpeed's delayed_shift):
//   overflow:
//     - hysteresis == 1 or cur_hysteresis == 1: the scale halves, but never below
//       min_loss_scale (max(scale / 2, min_loss_scale)). If the scale already *is*
//       min_loss_scale, DeepSpeed raises "Current loss scale already at minimum - cannot
//       decrease scale anymore. Exiting run." (raise_error_at_min_scale defaults to true and
//       the ZeRO optimizers never change it); update() throws strata::Error then, changing
//       nothing;
//     - otherwise cur_hysteresis drops by one and the scale stays;
//     - last_overflow_iter = cur_iter. The step is skipped (update() returns true).
//   no overflow:
//     - consecutive_hysteresis: cur_hysteresis refills to fp16.hysteresis;
//     - with stable = cur_iter - last_overflow_iter - 1 (the clean steps before this one
//       since the last overflow, or since the start): when stable > 0 and
//       stable % loss_scale_window == 0 the scale doubles, and (without
//       consecutive_hysteresis) cur_hysteresis refills to fp16.hysteresis.
//   then cur_iter += 1.
// This is the current DeepSpeed rule ("stable_interval"): the scale first doubles on the
// (window + 1)-th consecutive clean step (the update of step index `window` of a fresh run),
// then every `window` steps, as long as no overflow intervenes; an overflow restarts the
// count. (DeepSpeed before that change tested (cur_iter - last_overflow_iter) % window == 0
// and doubled one step earlier.) The hysteresis is not refilled when the scale halves: once
// spent, every overflow halves the scale until the next doubling (or, with
// consecutive_hysteresis, the next clean step) refills it.
//
// The scale is held in double, as Python's float is, so non-power-of-two floors
// (min_loss_scale 0.3, 3, ...) give DeepSpeed's exact values; scale() rounds it to float
// (saturating at the largest finite float, which only endless growth on all-zero gradients
// could reach).
//
// Not thread-safe; the engine owns one per run and calls it from the step.
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/config/config.h"

namespace strata::runtime::zero {

class LossScaler {
 public:
  // fp16 off: scale 1, never skips. fp16 with loss_scale > 0: static scale. loss_scale == 0:
  // dynamic, first scale 2^initial_scale_power. Throws strata::Error naming the fp16 key of a
  // value out of range (negative or non-finite loss_scale, initial_scale_power outside
  // [0, 127], loss_scale_window or hysteresis 0, min_loss_scale not > 0); with fp16 off the
  // fp16 section is not looked at.
  LossScaler(const config::Fp16Config& fp16, bool fp16_enabled);

  // The scale to multiply the loss by in the next backward pass.
  float scale() const;
  bool dynamic() const { return mode_ == Mode::kDynamic; }

  // Called once per optimizer step with whether any gradient (on any rank) was Inf/NaN.
  // Returns true when the step must be skipped (overflow; never with fp16 off). Dynamic: moves
  // the scale as described above (throws strata::Error, changing nothing, on an overflow at
  // the minimum scale with no hysteresis left). Static: never changes the scale.
  bool update(bool overflow);

  // State for checkpoints, as JSON text:
  //   {"format": "strata.loss_scaler", "version": 1, "mode": "off" | "static" | "dynamic",
  //    "scale": <number>, "cur_iter": <int>, "last_overflow_iter": <int>,
  //    "cur_hysteresis": <int>}
  // load_state() validates everything first and throws strata::Error on malformed input
  // (bad JSON, a missing, unknown or mistyped field, a value out of range) and on a mode
  // other than this scaler's (the config changed between save and resume), changing nothing
  // on failure. The settings (window, hysteresis, floor) come from the config, not the
  // checkpoint; a saved cur_hysteresis above the configured hysteresis is lowered to it.
  // For static and off scalers the state is checked but the scale stays the config's.
  std::string save_state() const;
  void load_state(const std::string& json);

 private:
  enum class Mode { kOff, kStatic, kDynamic };
  std::string_view mode_name() const;  // "off" | "static" | "dynamic", as in the state

  Mode mode_ = Mode::kOff;
  double scale_ = 1.0;  // DeepSpeed's cur_scale (a Python float)
  // Dynamic settings (from fp16).
  std::uint64_t scale_window_ = 1000;
  std::uint32_t delayed_shift_ = 2;  // fp16.hysteresis
  bool consecutive_hysteresis_ = false;
  double min_scale_ = 1.0;
  // Dynamic state.
  std::uint64_t cur_iter_ = 0;
  std::int64_t last_overflow_iter_ = -1;
  std::uint32_t cur_hysteresis_ = 2;
};

}  // namespace strata::runtime::zero

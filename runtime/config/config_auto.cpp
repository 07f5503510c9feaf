// The "auto" values Hugging Face's Trainer fills in a DeepSpeed config, filled the way it fills
// them: from the training command's flags when given (TrainingFlags), else from HF
// TrainingArguments' defaults (config.h, kHf*), each noted with its source for the table
// resolution_table() prints at start. The batch sizes and bucket sizes are config_resolve.cpp's.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/config/config_fields.h"
#include "runtime/config/resolve_impl.h"

namespace strata::runtime::config::detail {

std::string show_value(double v) { return fmt::format("{}", v); }
std::string show_value(std::uint64_t v) { return fmt::format("{}", v); }
std::string show_value(bool v) { return v ? "true" : "false"; }
std::string show_value(const std::array<double, 2>& v) { return fmt::format("[{}, {}]", v[0], v[1]); }

namespace {

constexpr std::string_view kHfDefault = "default (HF Trainer)";

// A flag's value into a key. Precedence (docs/config.md): the flag wins over "auto" and over a
// number of the file alike; a different number of the file is named in a note, so that nobody
// wonders which one ran.
template <typename T>
void set_from_flag(AutoOr<T>& field, const T& value, std::string_view key, std::string_view flag,
                   ResolveLog& log) {
  if (field.is_auto()) {
    log.resolved(std::string(key), show_value(value), fmt::format("flag {}", flag));
  } else if (field.value() != value) {
    log.note(fmt::format("{} {} replaces {} = {} of the config", flag, show_value(value), key,
                         show_value(field.value())));
  }
  field = value;
}

// A batch key, which may be absent (then the flag just gives it).
void set_from_flag(std::optional<AutoOr<std::uint64_t>>& field, std::uint64_t value, std::string_view key,
                   std::string_view flag, ResolveLog& log) {
  if (!field) {
    field = AutoOr<std::uint64_t>(value);
    return;
  }
  set_from_flag(*field, value, key, flag, log);
}

template <typename T>
void fill_default(AutoOr<T>& field, const T& value, std::string_view key, std::string_view source,
                  ResolveLog& log) {
  if (!field.is_auto()) return;
  field = value;
  log.resolved(std::string(key), show_value(value), std::string(source));
}

// WarmupLR and WarmupDecayLR peak at warmup_max_lr, WarmupCosineLR at the optimizer's lr.
bool has_max_lr(const SchedulerConfig& s) { return not_cosine(s); }

}  // namespace

void apply_training_flags(Config& c, const TrainingFlags& f, ResolveLog& log) {
  if (f.lr) {
    if (!c.optimizer) {
      c.optimizer = OptimizerConfig{};
      log.note("the config has no optimizer section: --lr runs AdamW with DeepSpeed's other defaults");
    }
    set_from_flag(c.optimizer->lr, *f.lr, "optimizer.params.lr", "--lr", log);
    // HF fills both from its learning_rate: under these schedulers the lr a step runs with is
    // the schedule's, so --lr would do nothing without it.
    if (c.scheduler && has_max_lr(*c.scheduler)) {
      set_from_flag(c.scheduler->warmup_max_lr, *f.lr, "scheduler.params.warmup_max_lr", "--lr", log);
    }
  }
  if (f.micro_batch) {
    set_from_flag(c.train_micro_batch_size_per_gpu, *f.micro_batch, "train_micro_batch_size_per_gpu",
                  "--micro-batch", log);
  }
  if (f.grad_accum) {
    set_from_flag(c.gradient_accumulation_steps, *f.grad_accum, "gradient_accumulation_steps", "--grad-accum", log);
  }
  if (f.clip) set_from_flag(c.gradient_clipping, *f.clip, "gradient_clipping", "--clip", log);
  if (f.warmup_steps) {
    if (!c.scheduler) {
      throw Error("--warmup-steps " + show_value(*f.warmup_steps) + " is given but the config has no scheduler",
                  "--warmup-steps",
                  "add a scheduler section (e.g. --set scheduler.type=WarmupLR) or drop --warmup-steps");
    }
    // HF's 0 (no warmup): DeepSpeed's schedulers warm up over max(2, n) steps, so 0 runs as 1.
    const std::uint64_t steps = std::max(*f.warmup_steps, kHfWarmupSteps);
    if (steps != *f.warmup_steps) {
      log.note(fmt::format("--warmup-steps {} runs as {}: DeepSpeed's schedulers warm up over at least 2 steps, so "
                           "0 and 1 are the same schedule, and warmup_num_steps must be >= 1",
                           *f.warmup_steps, steps));
    }
    set_from_flag(c.scheduler->warmup_num_steps, steps, "scheduler.params.warmup_num_steps", "--warmup-steps",
                  log);
  }
  // --steps is the run's length. It fills an "auto" total_num_steps (what HF does with its
  // max_steps); a number in the file is the schedule's own length and is kept (a run may be
  // resumed, or stopped early on purpose).
  if (f.steps && c.scheduler && c.scheduler->total_num_steps && c.scheduler->total_num_steps->is_auto()) {
    *c.scheduler->total_num_steps = *f.steps;
    log.resolved("scheduler.params.total_num_steps", show_value(*f.steps), "--steps");
  }
}

void fill_training_defaults(Config& c, ResolveLog& log) {
  fill_default(c.gradient_clipping, kHfMaxGradNorm, "gradient_clipping", kHfDefault, log);
  // HF's fp16 / bf16 flags are off unless given.
  fill_default(c.fp16.enabled, false, "fp16.enabled", kHfDefault, log);
  fill_default(c.bf16.enabled, false, "bf16.enabled", kHfDefault, log);
  if (c.optimizer) {
    OptimizerConfig& o = *c.optimizer;
    fill_default(o.lr, kHfLearningRate, "optimizer.params.lr", kHfDefault, log);
    fill_default(o.betas, std::array<double, 2>{kHfAdamBeta1, kHfAdamBeta2}, "optimizer.params.betas", kHfDefault,
                 log);
    fill_default(o.eps, kHfAdamEpsilon, "optimizer.params.eps", kHfDefault, log);
    fill_default(o.weight_decay, kHfWeightDecay, "optimizer.params.weight_decay", kHfDefault, log);
  }
  if (c.scheduler) {
    SchedulerConfig& s = *c.scheduler;
    if (has_max_lr(s)) {
      fill_default(s.warmup_min_lr, 0.0, "scheduler.params.warmup_min_lr", kHfDefault, log);
      // HF's learning_rate, which is the optimizer's here (a flag, the file or HF's default).
      const double lr = c.optimizer ? c.optimizer->lr.value() : kHfLearningRate;
      fill_default(s.warmup_max_lr, lr, "scheduler.params.warmup_max_lr", "= optimizer.params.lr", log);
    }
    fill_default(s.warmup_num_steps, kHfWarmupSteps, "scheduler.params.warmup_num_steps",
                 "default (HF Trainer: no warmup, run as 1)", log);
  }
}

}  // namespace strata::runtime::config::detail

namespace strata::runtime::config {

std::string resolution_table(const std::vector<ResolvedKey>& autos) {
  if (autos.empty()) return {};
  std::size_t key_width = 3, value_width = 5;
  for (const ResolvedKey& r : autos) {
    key_width = std::max(key_width, r.key.size());
    value_width = std::max(value_width, r.value.size());
  }
  std::string out = "\"auto\" values resolved:\n";
  out += fmt::format("  {:<{}}  {:<{}}  {}\n", "key", key_width, "value", value_width, "source");
  for (const ResolvedKey& r : autos) {
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", r.key, key_width, r.value, value_width, r.source);
  }
  return out;
}

}  // namespace strata::runtime::config

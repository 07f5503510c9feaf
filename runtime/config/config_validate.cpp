// validate_config(): value ranges and the rules that tie keys together. A Config built in
// code goes through the same checks as one read from a file, so the rules live here and not
// in the JSON reader. Values still "auto" are checked once resolved.
#include <cmath>

#include <fmt/format.h>

#include "runtime/config/config.h"

namespace strata::runtime {
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

void validate_batch(const Config& c) {
  auto check = [](std::string_view path, const std::optional<AutoOr<std::uint64_t>>& v) {
    if (v && !v->is_auto()) check_positive(path, v->value());
  };
  check("train_batch_size", c.train_batch_size);
  check("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu);
  check("gradient_accumulation_steps", c.gradient_accumulation_steps);
  if (!c.gradient_clipping.is_auto())
    check_non_negative("gradient_clipping", c.gradient_clipping.value());
}

void validate_precision(const Config& c) {
  const Fp16Config& f = c.fp16;
  check_non_negative("fp16.loss_scale", f.loss_scale);
  // The scale is kept in fp32, whose largest power of two is 2^127.
  if (f.initial_scale_power < 0 || f.initial_scale_power > 127)
    throw_range("fp16.initial_scale_power", "an integer in [0, 127]",
                std::to_string(f.initial_scale_power));
  check_positive("fp16.loss_scale_window", f.loss_scale_window);
  check_positive("fp16.hysteresis", f.hysteresis);
  if (!(f.min_loss_scale > 0) || !std::isfinite(f.min_loss_scale))
    throw_range("fp16.min_loss_scale", "a finite number > 0", show(f.min_loss_scale));

  bool fp16_on = !f.enabled.is_auto() && f.enabled.value();
  bool bf16_on = !c.bf16.enabled.is_auto() && c.bf16.enabled.value();
  if (fp16_on && bf16_on) {
    throw Error("fp16 and bf16 are both enabled", "bf16.enabled",
                "enable one of them: bf16 where the device supports it (no loss scaling needed), "
                "else fp16");
  }
}

void validate_optimizer(const OptimizerConfig& o) {
  if (!o.lr.is_auto()) check_non_negative("optimizer.params.lr", o.lr.value());
  if (!o.betas.is_auto()) {
    for (std::size_t i = 0; i < 2; ++i) {
      double beta = o.betas.value()[i];
      if (!(beta >= 0 && beta < 1))
        throw_range(fmt::format("optimizer.params.betas[{}]", i), "a number in [0, 1)", show(beta));
    }
  }
  if (!o.eps.is_auto() && (!(o.eps.value() > 0) || !std::isfinite(o.eps.value())))
    throw_range("optimizer.params.eps", "a finite number > 0", show(o.eps.value()));
  if (!o.weight_decay.is_auto())
    check_non_negative("optimizer.params.weight_decay", o.weight_decay.value());
  if (o.type == OptimizerType::kAdamW && !o.adam_w_mode) {
    throw Error("optimizer type AdamW always decouples weight decay, but adam_w_mode is false",
                "optimizer.params.adam_w_mode", "use type \"Adam\" with adam_w_mode false for L2");
  }
}

void validate_scheduler(const SchedulerConfig& s, std::vector<ConfigWarning>* warnings) {
  if (s.type == SchedulerType::kWarmupCosineLR) {
    check_unit_interval("scheduler.params.warmup_min_ratio", s.warmup_min_ratio);
    check_unit_interval("scheduler.params.cos_min_ratio", s.cos_min_ratio);
  } else {
    if (!s.warmup_min_lr.is_auto())
      check_non_negative("scheduler.params.warmup_min_lr", s.warmup_min_lr.value());
    if (!s.warmup_max_lr.is_auto())
      check_non_negative("scheduler.params.warmup_max_lr", s.warmup_max_lr.value());
  }
  if (!s.warmup_num_steps.is_auto())
    check_positive("scheduler.params.warmup_num_steps", s.warmup_num_steps.value());
  if (s.last_batch_iteration < -1)
    throw_range("scheduler.params.last_batch_iteration", "-1 (start) or a step index >= 0",
                std::to_string(s.last_batch_iteration));

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
    check_positive("scheduler.params.total_num_steps", s.total_num_steps->value());
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
  if (z.stage < 0 || z.stage > 3)
    throw_range("zero_optimization.stage", "0, 1, 2 or 3", std::to_string(z.stage));

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
  check_unit_interval("zero_optimization.offload_optimizer.ratio", o.ratio);
  if (o.ratio < 1 && z.stage != 3) {
    throw Error(fmt::format("partial optimizer offload (ratio {}) needs ZeRO stage 3 (stage is {})",
                            show(o.ratio), z.stage),
                "zero_optimization.offload_optimizer.ratio",
                "set ratio to 1, or zero_optimization.stage to 3");
  }

  // Zero-sized buckets or sub-groups would never make progress.
  check_positive("zero_optimization.sub_group_size", z.sub_group_size);
  if (!z.reduce_bucket_size.is_auto())
    check_positive("zero_optimization.reduce_bucket_size", z.reduce_bucket_size.value());
  check_positive("zero_optimization.allgather_bucket_size", z.allgather_bucket_size);
}

void validate_aio(const AioConfig& a) {
  check_positive("aio.block_size", a.block_size);
  check_positive("aio.queue_depth", a.queue_depth);
  check_positive("aio.intra_op_parallelism", a.intra_op_parallelism);
  // The engine's limits (offload/aio_engine.h): O_DIRECT needs 4 KiB-aligned pieces; one ring
  // per worker thread, each with queue_depth entries.
  constexpr std::uint64_t kDirectIoAlignment = 4096;
  if (a.block_size % kDirectIoAlignment != 0) {
    throw Error(fmt::format("aio.block_size ({}) is not a multiple of {} bytes, which direct I/O "
                            "needs",
                            a.block_size, kDirectIoAlignment),
                "aio.block_size", "use a power of two from 128K up, e.g. 1048576 (the default)");
  }
  if (a.queue_depth > 4096)
    throw_range("aio.queue_depth", "1 to 4096", std::to_string(a.queue_depth));
  if (a.intra_op_parallelism > 64)
    throw_range("aio.intra_op_parallelism", "1 to 64", std::to_string(a.intra_op_parallelism));
}

}  // namespace

std::vector<ConfigWarning> validate_config(const Config& config) {
  std::vector<ConfigWarning> warnings;
  validate_batch(config);
  validate_precision(config);
  if (config.optimizer) validate_optimizer(*config.optimizer);
  if (config.scheduler) validate_scheduler(*config.scheduler, &warnings);
  validate_zero(config.zero_optimization);
  validate_aio(config.aio);
  return warnings;
}

}  // namespace strata::runtime

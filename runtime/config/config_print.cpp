// Config -> JSON with every key, in the order docs/config.md lists them. What this prints,
// parse_config() reads back to the same Config ("auto" stays "auto", absent stays null).
#include <type_traits>

#include "core/log.h"
#include "runtime/config/json_reader.h"

namespace strata::runtime {

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

namespace detail {
namespace {

template <typename T>
Json value_json(const T& value) {
  if constexpr (std::is_enum_v<T>) {
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

// An unset path prints as null, which reads back as unset.
// DeepSpeed's form where it fits: null for none, a string for one folder, a list for more.
Json path_json(const std::vector<std::string>& paths) {
  if (paths.empty()) return nullptr;
  if (paths.size() == 1) return paths.front();
  return Json(paths);
}

Json fp16_json(const Fp16Config& f) {
  Json j = Json::object();
  j["enabled"] = value_json(f.enabled);
  j["loss_scale"] = f.loss_scale;
  j["initial_scale_power"] = f.initial_scale_power;
  j["loss_scale_window"] = f.loss_scale_window;
  j["hysteresis"] = f.hysteresis;
  j["consecutive_hysteresis"] = f.consecutive_hysteresis;
  j["min_loss_scale"] = f.min_loss_scale;
  return j;
}

Json optimizer_json(const OptimizerConfig& o) {
  Json params = Json::object();
  params["lr"] = value_json(o.lr);
  params["betas"] = value_json(o.betas);
  params["eps"] = value_json(o.eps);
  params["weight_decay"] = value_json(o.weight_decay);
  params["adam_w_mode"] = o.adam_w_mode;
  params["bias_correction"] = o.bias_correction;
  Json j = Json::object();
  j["type"] = value_json(o.type);
  j["params"] = std::move(params);
  return j;
}

Json scheduler_json(const SchedulerConfig& s) {
  Json params = Json::object();
  if (s.type == SchedulerType::kWarmupCosineLR) {
    params["total_num_steps"] = value_json(s.total_num_steps);
    params["warmup_min_ratio"] = s.warmup_min_ratio;
    params["warmup_num_steps"] = value_json(s.warmup_num_steps);
    params["cos_min_ratio"] = s.cos_min_ratio;
  } else {
    if (s.type == SchedulerType::kWarmupDecayLR)
      params["total_num_steps"] = value_json(s.total_num_steps);
    params["warmup_min_lr"] = value_json(s.warmup_min_lr);
    params["warmup_max_lr"] = value_json(s.warmup_max_lr);
    params["warmup_num_steps"] = value_json(s.warmup_num_steps);
  }
  params["warmup_type"] = value_json(s.warmup_type);
  params["last_batch_iteration"] = s.last_batch_iteration;
  Json j = Json::object();
  j["type"] = value_json(s.type);
  j["params"] = std::move(params);
  return j;
}

Json zero_json(const ZeroConfig& z) {
  const OffloadParamConfig& p = z.offload_param;
  Json param = Json::object();
  param["device"] = value_json(p.device);
  param["nvme_path"] = path_json(p.nvme_path);
  param["buffer_count"] = p.buffer_count;
  param["buffer_size"] = p.buffer_size;
  param["max_in_cpu"] = p.max_in_cpu;
  param["pin_memory"] = p.pin_memory;

  const OffloadOptimizerConfig& o = z.offload_optimizer;
  Json optimizer = Json::object();
  optimizer["device"] = value_json(o.device);
  optimizer["nvme_path"] = path_json(o.nvme_path);
  optimizer["buffer_count"] = o.buffer_count;
  optimizer["pin_memory"] = o.pin_memory;
  optimizer["pipeline_read"] = o.pipeline_read;
  optimizer["pipeline_write"] = o.pipeline_write;
  optimizer["ratio"] = o.ratio;

  Json j = Json::object();
  j["stage"] = z.stage;
  j["offload_param"] = std::move(param);
  j["offload_optimizer"] = std::move(optimizer);
  j["sub_group_size"] = z.sub_group_size;
  j["stage3_prefetch_bucket_size"] = value_json(z.stage3_prefetch_bucket_size);
  j["stage3_max_live_parameters"] = z.stage3_max_live_parameters;
  j["stage3_max_reuse_distance"] = z.stage3_max_reuse_distance;
  j["stage3_param_persistence_threshold"] = value_json(z.stage3_param_persistence_threshold);
  j["reduce_bucket_size"] = value_json(z.reduce_bucket_size);
  j["allgather_bucket_size"] = z.allgather_bucket_size;
  j["overlap_comm"] = z.overlap_comm;
  j["contiguous_gradients"] = z.contiguous_gradients;
  return j;
}

Json aio_json(const AioConfig& a) {
  Json j = Json::object();
  j["block_size"] = a.block_size;
  j["queue_depth"] = a.queue_depth;
  j["intra_op_parallelism"] = a.intra_op_parallelism;
  j["single_submit"] = a.single_submit;
  j["overlap_events"] = a.overlap_events;
  return j;
}

Json strata_json(const StrataConfig& s) {
  Json j = Json::object();
  j["device"] = value_json(s.device);
  // Bytes print as integers so the output reads back exactly; docs/config.md explains 0.
  j["device_memory"] = s.device_memory_bytes;
  j["pinned_memory"] = s.pinned_memory_bytes;
  j["cpu_threads"] = s.cpu_threads;
  j["trace"] = s.trace;
  j["checksum"] = s.checksum;
  j["io_backend"] = value_json(s.io_backend);
  j["direct_io"] = value_json(s.direct_io);
  j["io_uring_sqpoll"] = s.io_uring_sqpoll;
  j["checkpoint_keep"] = s.checkpoint_keep;
  return j;
}

}  // namespace

Json config_to_json_value(const Config& c) {
  Json j = Json::object();
  j["train_batch_size"] = value_json(c.train_batch_size);
  j["train_micro_batch_size_per_gpu"] = value_json(c.train_micro_batch_size_per_gpu);
  j["gradient_accumulation_steps"] = value_json(c.gradient_accumulation_steps);
  j["gradient_clipping"] = value_json(c.gradient_clipping);
  j["fp16"] = fp16_json(c.fp16);
  j["bf16"] = Json{{"enabled", value_json(c.bf16.enabled)}};
  j["optimizer"] = c.optimizer ? optimizer_json(*c.optimizer) : Json(nullptr);
  j["scheduler"] = c.scheduler ? scheduler_json(*c.scheduler) : Json(nullptr);
  j["zero_optimization"] = zero_json(c.zero_optimization);
  j["aio"] = aio_json(c.aio);
  j["strata"] = strata_json(c.strata);
  return j;
}

}  // namespace detail

std::string config_to_json(const Config& config) {
  return detail::config_to_json_value(config).dump(2) + "\n";
}

void log_config(const Config& config) {
  log::info("config (resolved):\n{}", config_to_json(config));
}

}  // namespace strata::runtime

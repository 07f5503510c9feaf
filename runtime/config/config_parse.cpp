// JSON -> Config: one function per section, DeepSpeed's key names and defaults.
//
// This file checks types, enum names and required keys. Value ranges and the rules that
// tie keys together live in config_validate.cpp, so that a Config built in code is checked
// by the same rules as one read from a file.
#include <fmt/format.h>

#include "runtime/config/json_reader.h"

namespace strata::runtime::detail {
namespace {

// DeepSpeed accepts some keys under two names (pydantic field name and alias). Reads
// whichever is given; both at once is an Error, since they could disagree.
template <typename T>
void read_either(ObjectReader& r, std::string_view key, std::string_view alias, T& field) {
  const Json* primary = r.find(key);
  const Json* secondary = r.find(alias);
  if (primary != nullptr && secondary != nullptr) {
    throw Error(fmt::format("config gives both '{}' and its other name '{}'", r.path_of(key),
                            r.path_of(alias)),
                r.path_of(alias), fmt::format("keep only '{}'", r.path_of(key)));
  }
  if (primary != nullptr) convert(*primary, r.path_of(key), field);
  if (secondary != nullptr) convert(*secondary, r.path_of(alias), field);
}

void parse_fp16(ObjectReader r, Fp16Config& out) {
  r.read("enabled", out.enabled);
  r.read("loss_scale", out.loss_scale);
  r.read("initial_scale_power", out.initial_scale_power);
  r.read("loss_scale_window", out.loss_scale_window);
  r.read("hysteresis", out.hysteresis);
  r.read("consecutive_hysteresis", out.consecutive_hysteresis);
  r.read("min_loss_scale", out.min_loss_scale);
  r.ignore({"auto_cast", "fp16_master_weights_and_grads"});
  r.finish();
}

void parse_bf16(ObjectReader r, Bf16Config& out) {
  r.read("enabled", out.enabled);
  r.ignore({"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
            "bf16_optimizer_states"});
  r.finish();
}

OptimizerConfig parse_optimizer(ObjectReader r, std::vector<ConfigWarning>* warnings) {
  OptimizerConfig out;
  const Json* type = r.find("type");
  if (type == nullptr) {
    throw Error("the optimizer section has no type", r.path_of("type"),
                "set optimizer.type to \"Adam\" or \"AdamW\", or remove the optimizer section");
  }
  out.type = to_enum(*type, r.path_of("type"), kOptimizerTypes);

  ObjectReader params = r.object("params");
  params.read("lr", out.lr);
  params.read("betas", out.betas);
  params.read("eps", out.eps);
  params.read("weight_decay", out.weight_decay);
  params.read("bias_correction", out.bias_correction);
  params.read("adam_w_mode", out.adam_w_mode);
  if (out.type == OptimizerType::kAdamW && !out.adam_w_mode) {
    // DeepSpeed: type AdamW forces decoupled weight decay whatever adam_w_mode says.
    std::string path = params.path_of("adam_w_mode");
    warnings->push_back({ConfigWarning::Kind::kOther, path,
                         fmt::format("'{}' is false but optimizer.type is AdamW, which always "
                                     "decouples weight decay; using adam_w_mode = true (use type "
                                     "\"Adam\" for L2-style weight decay)",
                                     path),
                         {}});
    out.adam_w_mode = true;
  }
  bool amsgrad = false;
  params.read("amsgrad", amsgrad);
  if (amsgrad) {
    throw Error("AMSGrad is not supported", params.path_of("amsgrad"),
                "remove amsgrad or set it to false");
  }
  params.ignore({"torch_adam", "fused"});
  params.finish();

  r.finish();
  return out;
}

SchedulerConfig parse_scheduler(ObjectReader r, const std::optional<OptimizerConfig>& optimizer) {
  SchedulerConfig out;
  const Json* type = r.find("type");
  if (type == nullptr) {
    throw Error("the scheduler section has no type", r.path_of("type"),
                "set scheduler.type to \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\", or "
                "remove the scheduler section");
  }
  out.type = to_enum(*type, r.path_of("type"), kSchedulerTypes);

  ObjectReader params = r.object("params");
  if (out.type == SchedulerType::kWarmupLR) {
    // DeepSpeed's WarmupLR warms up to the optimizer's lr when warmup_max_lr is not given.
    if (optimizer) out.warmup_max_lr = optimizer->lr;
  }
  if (out.type != SchedulerType::kWarmupCosineLR) {
    params.read("warmup_min_lr", out.warmup_min_lr);
    params.read("warmup_max_lr", out.warmup_max_lr);
  } else {
    params.read("warmup_min_ratio", out.warmup_min_ratio);
    params.read("cos_min_ratio", out.cos_min_ratio);
  }
  params.read("warmup_num_steps", out.warmup_num_steps);
  params.read_enum("warmup_type", out.warmup_type, kWarmupTypes);
  params.read("last_batch_iteration", out.last_batch_iteration);
  if (out.type != SchedulerType::kWarmupLR) {
    params.read("total_num_steps", out.total_num_steps);
    if (!out.total_num_steps) {
      throw Error(fmt::format("scheduler {} needs total_num_steps", to_string(out.type)),
                  params.path_of("total_num_steps"),
                  "set it to the number of optimizer steps of the run (or \"auto\")");
    }
  }
  params.finish();

  r.finish();
  return out;
}

void parse_offload_param(ObjectReader r, OffloadParamConfig& out) {
  r.read_enum("device", out.device, kOffloadDevices);
  r.read("nvme_path", out.nvme_path);
  r.read("buffer_count", out.buffer_count);
  r.read("buffer_size", out.buffer_size);
  r.read("max_in_cpu", out.max_in_cpu);
  r.read("pin_memory", out.pin_memory);
  r.finish();
}

void parse_offload_optimizer(ObjectReader r, OffloadOptimizerConfig& out) {
  r.read_enum("device", out.device, kOffloadDevices);
  r.read("nvme_path", out.nvme_path);
  r.read("buffer_count", out.buffer_count);
  r.read("pin_memory", out.pin_memory);
  r.read("pipeline_read", out.pipeline_read);
  r.read("pipeline_write", out.pipeline_write);
  r.read("ratio", out.ratio);
  r.ignore({"fast_init", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"});
  r.finish();
}

void parse_zero(ObjectReader r, ZeroConfig& out) {
  r.read("stage", out.stage);
  parse_offload_param(r.object("offload_param"), out.offload_param);
  parse_offload_optimizer(r.object("offload_optimizer"), out.offload_optimizer);
  r.read("sub_group_size", out.sub_group_size);
  read_either(r, "stage3_prefetch_bucket_size", "prefetch_bucket_size",
              out.stage3_prefetch_bucket_size);
  read_either(r, "stage3_max_live_parameters", "max_live_parameters",
              out.stage3_max_live_parameters);
  read_either(r, "stage3_max_reuse_distance", "max_reuse_distance", out.stage3_max_reuse_distance);
  read_either(r, "stage3_param_persistence_threshold", "param_persistence_threshold",
              out.stage3_param_persistence_threshold);
  r.read("reduce_bucket_size", out.reduce_bucket_size);
  r.read("allgather_bucket_size", out.allgather_bucket_size);
  // DeepSpeed's default for overlap_comm depends on the stage: on at stage 3 only.
  out.overlap_comm = out.stage == 3;
  r.read("overlap_comm", out.overlap_comm);
  r.read("contiguous_gradients", out.contiguous_gradients);

  // The deprecated booleans change where states live; dropping them silently would run a
  // different placement than the user asked for.
  r.reject("cpu_offload", "it is DeepSpeed's deprecated spelling of offload_optimizer",
           "use \"offload_optimizer\": {\"device\": \"cpu\"}");
  r.reject("cpu_offload_param", "it is DeepSpeed's deprecated spelling of offload_param",
           "use \"offload_param\": {\"device\": \"cpu\"}");
  r.reject("cpu_offload_use_pin_memory", "it is DeepSpeed's deprecated spelling of pin_memory",
           "use \"pin_memory\" inside offload_param / offload_optimizer");
  r.ignore({"reduce_scatter", "allgather_partitions", "load_from_fp32_weights",
            "elastic_checkpoint", "stage3_gather_16bit_weights_on_model_save",
            "gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
            "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
            "use_multi_rank_bucket_allreduce", "stage3_model_persistence_threshold",
            "model_persistence_threshold", "stage3_module_granularity_threshold",
            "stage3_use_all_reduce_for_fetch_params", "stage3_allgather_sequential",
            "zero_hpz_partition_size", "zero_quantized_weights",
            "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param",
            "mics_shard_size", "mics_hierarchical_params_gather", "memory_efficient_linear",
            "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
            "enable_sanity_checks", "leaf_module"});
  r.finish();
}

void parse_aio(ObjectReader r, AioConfig& out, std::vector<ConfigWarning>* warnings) {
  r.read("block_size", out.block_size);
  r.read("queue_depth", out.queue_depth);
  if (r.find("thread_count") != nullptr) {
    // Older DeepSpeed releases called intra_op_parallelism thread_count.
    std::string path = r.path_of("thread_count");
    warnings->push_back({ConfigWarning::Kind::kOther, path,
                         fmt::format("'{}' is DeepSpeed's old name for '{}'; read as that", path,
                                     r.path_of("intra_op_parallelism")),
                         {}});
  }
  read_either(r, "intra_op_parallelism", "thread_count", out.intra_op_parallelism);
  r.read("single_submit", out.single_submit);
  r.read("overlap_events", out.overlap_events);
  r.ignore({"use_gds"});
  r.finish();
}

void parse_strata(ObjectReader r, StrataConfig& out) {
  r.read_enum("device", out.device, kDeviceKinds);
  r.read_bytes("device_memory", out.device_memory_bytes);
  r.read_bytes("pinned_memory", out.pinned_memory_bytes);
  r.read("cpu_threads", out.cpu_threads);
  r.read("trace", out.trace);
  r.read("checksum", out.checksum);
  r.read_enum("io_backend", out.io_backend, kIoBackends);
  r.read_enum("direct_io", out.direct_io, kDirectIoModes);
  r.read("io_uring_sqpoll", out.io_uring_sqpoll);
  r.read("checkpoint_keep", out.checkpoint_keep);
  r.finish();
}

}  // namespace

Config config_from_json(const Json& root, std::vector<ConfigWarning>* warnings) {
  Config config;
  ObjectReader r(&root, "", warnings);

  r.read("train_batch_size", config.train_batch_size);
  r.read("train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu);
  r.read("gradient_accumulation_steps", config.gradient_accumulation_steps);
  r.read("gradient_clipping", config.gradient_clipping);

  parse_fp16(r.object("fp16"), config.fp16);
  // DeepSpeed reads the bf16 section under either name.
  if (r.find("bf16") != nullptr && r.find("bfloat16") != nullptr) {
    throw Error("config has both 'bf16' and its other name 'bfloat16'", "bfloat16",
                "keep only 'bf16'");
  }
  parse_bf16(r.object(r.find("bfloat16") != nullptr ? "bfloat16" : "bf16"), config.bf16);

  if (ObjectReader section = r.object("optimizer"); section.present())
    config.optimizer = parse_optimizer(std::move(section), warnings);
  if (ObjectReader section = r.object("scheduler"); section.present())
    config.scheduler = parse_scheduler(std::move(section), config.optimizer);

  if (const Json* zero = r.find("zero_optimization"); zero != nullptr && zero->is_boolean()) {
    throw Error("\"zero_optimization\": true/false is DeepSpeed's deprecated form",
                "zero_optimization", "write \"zero_optimization\": {\"stage\": 1} (or another stage)");
  }
  parse_zero(r.object("zero_optimization"), config.zero_optimization);
  parse_aio(r.object("aio"), config.aio, warnings);
  parse_strata(r.object("strata"), config.strata);

  r.ignore({"steps_per_print", "wall_clock_breakdown", "dump_state", "memory_breakdown",
            "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
            "communication_data_type", "seq_parallel_communication_data_type",
            "activation_checkpointing", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
            "comet", "comms_logger", "amp", "checkpoint", "data_types", "elasticity",
            "autotuning", "compression_training", "data_efficiency", "curriculum_learning",
            "pipeline", "sparse_attention", "timers", "nebula", "eigenvalue",
            "progressive_layer_drop", "quantize_training", "dataloader_drop_last",
            "disable_allgather", "graph_harvesting", "torch_autocast"});
  r.finish();
  return config;
}

}  // namespace strata::runtime::detail

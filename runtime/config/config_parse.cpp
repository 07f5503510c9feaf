// JSON -> Config: every section's keys come from its field list (config_fields.h); this file
// adds what a list does not say: optimizer and scheduler types, required keys, DeepSpeed's
// keys that strata ignores or refuses, and the defaults that depend on another key.
//
// This file checks types, enum names and required keys. Value ranges and the rules that
// tie keys together live in config_validate.cpp, so that a Config built in code is checked
// by the same rules as one read from a file.
#include <fmt/format.h>

#include "runtime/config/config_fields.h"
#include "runtime/config/json_reader.h"

namespace strata::runtime::config::detail {
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

// Every value of a config enum, for to_enum.
constexpr const auto& enum_values(OffloadDevice) { return kOffloadDevices; }
constexpr const auto& enum_values(WarmupType) { return kWarmupTypes; }
constexpr const auto& enum_values(DeviceKind) { return kDeviceKinds; }
constexpr const auto& enum_values(IoBackend) { return kIoBackends; }
constexpr const auto& enum_values(DirectIoMode) { return kDirectIoModes; }
constexpr const auto& enum_values(CheckpointOnError) { return kCheckpointOnErrors; }
constexpr const auto& enum_values(GradAccumDtype) { return kGradAccumDtypes; }

// DeepSpeed keys of a section that strata accepts without using (a warning each).
constexpr std::string_view kFp16Ignored[] = {"auto_cast", "fp16_master_weights_and_grads"};
constexpr std::string_view kBf16Ignored[] = {"immediate_grad_update", "check_grad_overflow",
                                             "bf16_master_weights_and_grads",
                                             "bf16_optimizer_states"};
constexpr std::string_view kOffloadOptimizerIgnored[] = {"fast_init", "super_offload",
                                                         "convert_grad_on_cpu",
                                                         "cpuadam_cores_perc"};

template <typename S>
std::span<const std::string_view> ignored_keys(std::type_identity<S>) {
  return {};
}
std::span<const std::string_view> ignored_keys(std::type_identity<Fp16Config>) {
  return kFp16Ignored;
}
std::span<const std::string_view> ignored_keys(std::type_identity<Bf16Config>) {
  return kBf16Ignored;
}
std::span<const std::string_view> ignored_keys(std::type_identity<OffloadOptimizerConfig>) {
  return kOffloadOptimizerIgnored;
}

template <Section S>
void parse_section(ObjectReader r, S& out);

// Reads one field when its key is present; the member keeps its default otherwise.
template <typename F>
void read_field(ObjectReader& r, const F& f, typename F::Value& value) {
  using T = typename F::Value;
  if constexpr (Section<T>) {
    parse_section(r.object(f.key), value);
  } else if constexpr (std::is_enum_v<T>) {
    r.read_enum(f.key, value, enum_values(T{}));
  } else {
    if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (f.bytes) return r.read_bytes(f.key, value);
    }
    if (!f.alias.empty()) return read_either(r, f.key, f.alias, value);
    r.read(f.key, value);
  }
}

// Reads every field of S's list that applies to `out` (as far as it is read already).
template <Section S>
void read_fields(ObjectReader& r, S& out) {
  for_each_field(fields_of(std::type_identity<S>{}),
                 [&](const auto& f) {
                   if (f.applies_to(out)) read_field(r, f, out.*f.member);
                 });
}

// A section that is its field list and nothing more (plus its ignored DeepSpeed keys).
template <Section S>
void parse_section(ObjectReader r, S& out) {
  read_fields(r, out);
  r.ignore(ignored_keys(std::type_identity<S>{}));
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
  read_fields(params, out);
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
  // The keys of this type only: another type's keys are unknown-key warnings.
  read_fields(params, out);
  if (out.type != SchedulerType::kWarmupLR) {
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

void parse_zero(ObjectReader r, ZeroConfig& out) {
  read_fields(r, out);
  // DeepSpeed's default for overlap_comm depends on the stage: on at stage 3 only.
  if (r.find("overlap_comm") == nullptr) out.overlap_comm = out.stage == 3;

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
  if (r.find("thread_count") != nullptr) {
    // Older DeepSpeed releases called intra_op_parallelism thread_count.
    std::string path = r.path_of("thread_count");
    warnings->push_back({ConfigWarning::Kind::kOther, path,
                         fmt::format("'{}' is DeepSpeed's old name for '{}'; read as that", path,
                                     r.path_of("intra_op_parallelism")),
                         {}});
  }
  read_fields(r, out);  // intra_op_parallelism is also read as thread_count
  r.ignore({"use_gds"});
  r.finish();
}

}  // namespace

Config config_from_json(const Json& root, std::vector<ConfigWarning>* warnings) {
  Config config;
  ObjectReader r(&root, "", warnings);

  read_fields(r, config);  // the batch keys and clipping (kTopFields)

  parse_section(r.object("fp16"), config.fp16);
  // DeepSpeed reads the bf16 section under either name.
  if (r.find("bf16") != nullptr && r.find("bfloat16") != nullptr) {
    throw Error("config has both 'bf16' and its other name 'bfloat16'", "bfloat16",
                "keep only 'bf16'");
  }
  parse_section(r.object(r.find("bfloat16") != nullptr ? "bfloat16" : "bf16"), config.bf16);

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
  parse_section(r.object("data_types"), config.data_types);
  parse_section(r.object("strata"), config.strata);

  r.ignore({"steps_per_print", "wall_clock_breakdown", "dump_state", "memory_breakdown",
            "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
            "communication_data_type", "seq_parallel_communication_data_type",
            "activation_checkpointing", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
            "comet", "comms_logger", "amp", "checkpoint", "elasticity",
            "autotuning", "compression_training", "data_efficiency", "curriculum_learning",
            "pipeline", "sparse_attention", "timers", "nebula", "eigenvalue",
            "progressive_layer_drop", "quantize_training", "dataloader_drop_last",
            "disable_allgather", "graph_harvesting", "torch_autocast"});
  r.finish();
  return config;
}

}  // namespace strata::runtime::config::detail

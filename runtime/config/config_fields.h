#pragma once
// Internal to runtime/config: the one definition of every config key.
//
// Each config struct has a field list: for every key, its JSON name, the member it is read
// into, and (where it is a simple range) the rule validate_config() checks. Parse
// (config_parse.cpp), print (config_print.cpp), validate (config_validate.cpp), the "auto"
// report (config_resolve.cpp) and the check of docs/config.md's tables (config_reference.cpp,
// tests/runtime/config) all walk these lists, so a new key is one line here plus its doc row.
// The default is the struct's member initializer (config.h). What does not fit a list (the
// `type` of optimizer and scheduler, rules that tie keys together, ignored and rejected
// DeepSpeed keys) stays in those files, said there.
//
// The order of a list is the order the printed config shows, and docs/config.md lists.
#include <cstdint>
#include <limits>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "runtime/config/config.h"

namespace strata::runtime::config::detail {

// A range rule, checked once the value is concrete (not "auto", not absent).
struct Range {
  enum class Kind : std::uint8_t {
    kAny,            // no rule
    kPositive,       // integer >= 1 ("a positive integer"), and <= hi when hi > 0 (`expected`)
    kNonNegative,    // finite number >= 0
    kPositiveFinite,  // finite number > 0
    kUnitInterval,   // number in [0, 1]
    kBetas,          // each of a pair in [0, 1)
    kInteger,        // integer in [lo, hi] (`expected`)
  };
  Kind kind = Kind::kAny;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::string_view expected = {};  // kInteger, kPositive with hi: the rule in words
};

inline constexpr Range kPositive{.kind = Range::Kind::kPositive};
inline constexpr Range kNonNegative{.kind = Range::Kind::kNonNegative};
inline constexpr Range kPositiveFinite{.kind = Range::Kind::kPositiveFinite};
inline constexpr Range kUnitInterval{.kind = Range::Kind::kUnitInterval};
inline constexpr Range kBetas{.kind = Range::Kind::kBetas};
constexpr Range positive_up_to(std::int64_t hi, std::string_view expected) {
  return {.kind = Range::Kind::kPositive, .lo = 1, .hi = hi, .expected = expected};
}
constexpr Range integer_in(std::int64_t lo, std::int64_t hi, std::string_view expected) {
  return {.kind = Range::Kind::kInteger, .lo = lo, .hi = hi, .expected = expected};
}

// One key of section S, read into S::*member (of type T).
template <typename S, typename T>
struct Field {
  using Section = S;
  using Value = T;

  std::string_view key;
  T S::*member;
  Range range{};
  std::string_view alias{};  // DeepSpeed's other name, read too (both at once is an error)
  bool bytes = false;        // a byte count: an integer or a string such as "512MiB"
  bool (*applies)(const S&) = nullptr;  // nullptr = always; else the key exists only when true

  constexpr Field also_named(std::string_view other) const {
    Field f = *this;
    f.alias = other;
    return f;
  }
  constexpr Field in_bytes() const {
    Field f = *this;
    f.bytes = true;
    return f;
  }
  constexpr Field only_when(bool (*predicate)(const S&)) const {
    Field f = *this;
    f.applies = predicate;
    return f;
  }
  bool applies_to(const S& s) const { return applies == nullptr || applies(s); }
};

template <typename S, typename T>
constexpr Field<S, T> field(std::string_view key, T S::*member, Range range = {}) {
  return Field<S, T>{.key = key, .member = member, .range = range};
}

// Calls fn(field) for every field of a list (a std::tuple of Fields), in order.
template <typename Fields, typename Fn>
void for_each_field(const Fields& fields, Fn&& fn) {
  std::apply([&](const auto&... f) { (fn(f), ...); }, fields);
}

// ---- the lists ------------------------------------------------------------------------------

// Top level: the batch keys and clipping (the sections are read by config_parse.cpp).
inline constexpr auto kTopFields = std::tuple{
    field("train_batch_size", &Config::train_batch_size, kPositive),
    field("train_micro_batch_size_per_gpu", &Config::train_micro_batch_size_per_gpu, kPositive),
    field("gradient_accumulation_steps", &Config::gradient_accumulation_steps, kPositive),
    field("gradient_clipping", &Config::gradient_clipping, kNonNegative),
};

inline constexpr auto kFp16Fields = std::tuple{
    field("enabled", &Fp16Config::enabled),
    field("loss_scale", &Fp16Config::loss_scale, kNonNegative),
    // The scale is kept in fp32, whose largest power of two is 2^127.
    field("initial_scale_power", &Fp16Config::initial_scale_power,
          integer_in(0, 127, "an integer in [0, 127]")),
    field("loss_scale_window", &Fp16Config::loss_scale_window, kPositive),
    field("hysteresis", &Fp16Config::hysteresis, kPositive),
    field("consecutive_hysteresis", &Fp16Config::consecutive_hysteresis),
    field("min_loss_scale", &Fp16Config::min_loss_scale, kPositiveFinite),
};

inline constexpr auto kBf16Fields = std::tuple{
    field("enabled", &Bf16Config::enabled),
};

// optimizer.params (optimizer.type is read by config_parse.cpp).
inline constexpr auto kOptimizerParamFields = std::tuple{
    field("lr", &OptimizerConfig::lr, kNonNegative),
    field("betas", &OptimizerConfig::betas, kBetas),
    field("eps", &OptimizerConfig::eps, kPositiveFinite),
    field("weight_decay", &OptimizerConfig::weight_decay, kNonNegative),
    field("adam_w_mode", &OptimizerConfig::adam_w_mode),
    field("bias_correction", &OptimizerConfig::bias_correction),
};

// Which scheduler types have a key (scheduler.type is read by config_parse.cpp).
constexpr bool decays(const SchedulerConfig& s) { return s.type != SchedulerType::kWarmupLR; }
constexpr bool is_cosine(const SchedulerConfig& s) {
  return s.type == SchedulerType::kWarmupCosineLR;
}
constexpr bool not_cosine(const SchedulerConfig& s) { return !is_cosine(s); }

// scheduler.params.
inline constexpr auto kSchedulerParamFields = std::tuple{
    field("total_num_steps", &SchedulerConfig::total_num_steps, kPositive).only_when(decays),
    field("warmup_min_lr", &SchedulerConfig::warmup_min_lr, kNonNegative).only_when(not_cosine),
    field("warmup_max_lr", &SchedulerConfig::warmup_max_lr, kNonNegative).only_when(not_cosine),
    field("warmup_min_ratio", &SchedulerConfig::warmup_min_ratio, kUnitInterval)
        .only_when(is_cosine),
    field("warmup_num_steps", &SchedulerConfig::warmup_num_steps, kPositive),
    field("cos_min_ratio", &SchedulerConfig::cos_min_ratio, kUnitInterval).only_when(is_cosine),
    field("warmup_type", &SchedulerConfig::warmup_type),
    field("last_batch_iteration", &SchedulerConfig::last_batch_iteration,
          integer_in(-1, std::numeric_limits<std::int64_t>::max(),
                     "-1 (start) or a step index >= 0")),
};

// buffer_count and buffer_size must be >= 1 with NVMe only: config_validate.cpp.
inline constexpr auto kOffloadParamFields = std::tuple{
    field("device", &OffloadParamConfig::device),
    field("nvme_path", &OffloadParamConfig::nvme_path),
    field("buffer_count", &OffloadParamConfig::buffer_count),
    field("buffer_size", &OffloadParamConfig::buffer_size),
    field("max_in_cpu", &OffloadParamConfig::max_in_cpu),
    field("pin_memory", &OffloadParamConfig::pin_memory),
};

inline constexpr auto kOffloadOptimizerFields = std::tuple{
    field("device", &OffloadOptimizerConfig::device),
    field("nvme_path", &OffloadOptimizerConfig::nvme_path),
    field("buffer_count", &OffloadOptimizerConfig::buffer_count),
    field("pin_memory", &OffloadOptimizerConfig::pin_memory),
    field("pipeline_read", &OffloadOptimizerConfig::pipeline_read),
    field("pipeline_write", &OffloadOptimizerConfig::pipeline_write),
    field("ratio", &OffloadOptimizerConfig::ratio, kUnitInterval),
};

// The two offload sections are fields too: a section-typed field is read, printed and
// checked through its own list.
inline constexpr auto kZeroFields = std::tuple{
    field("stage", &ZeroConfig::stage, integer_in(0, 3, "0, 1, 2 or 3")),
    field("offload_param", &ZeroConfig::offload_param),
    field("offload_optimizer", &ZeroConfig::offload_optimizer),
    field("sub_group_size", &ZeroConfig::sub_group_size, kPositive),
    field("stage3_prefetch_bucket_size", &ZeroConfig::stage3_prefetch_bucket_size)
        .also_named("prefetch_bucket_size"),
    field("stage3_max_live_parameters", &ZeroConfig::stage3_max_live_parameters)
        .also_named("max_live_parameters"),
    field("stage3_max_reuse_distance", &ZeroConfig::stage3_max_reuse_distance)
        .also_named("max_reuse_distance"),
    field("stage3_param_persistence_threshold", &ZeroConfig::stage3_param_persistence_threshold)
        .also_named("param_persistence_threshold"),
    field("reduce_bucket_size", &ZeroConfig::reduce_bucket_size, kPositive),
    field("allgather_bucket_size", &ZeroConfig::allgather_bucket_size, kPositive),
    // Absent: true at stage 3, false below (DeepSpeed's rule; config_parse.cpp).
    field("overlap_comm", &ZeroConfig::overlap_comm),
    field("contiguous_gradients", &ZeroConfig::contiguous_gradients),
};

// block_size must also be a multiple of offload::kDirectIoAlignment (direct I/O):
// config_validate.cpp. Its default and its upper limit are the I/O engine's (offload/aio_limits.h).
inline constexpr auto kAioFields = std::tuple{
    field("block_size", &AioConfig::block_size,
          positive_up_to(static_cast<std::int64_t>(offload::kMaxBlockBytes), "1 to 1 GiB (1073741824)")),
    field("queue_depth", &AioConfig::queue_depth, positive_up_to(4096, "1 to 4096")),
    // Older DeepSpeed's name, read with a warning (config_parse.cpp).
    field("intra_op_parallelism", &AioConfig::intra_op_parallelism, positive_up_to(64, "1 to 64"))
        .also_named("thread_count"),
    field("single_submit", &AioConfig::single_submit),
    field("overlap_events", &AioConfig::overlap_events),
};

// data_types: only fp32 is accepted by validate_config (config_validate.cpp says why).
inline constexpr auto kDataTypesFields = std::tuple{
    field("grad_accum_dtype", &DataTypesConfig::grad_accum_dtype),
};

inline constexpr auto kStrataFields = std::tuple{
    field("device", &StrataConfig::device),
    field("device_memory", &StrataConfig::device_memory_bytes).in_bytes(),
    field("pinned_memory", &StrataConfig::pinned_memory_bytes).in_bytes(),
    field("cpu_threads", &StrataConfig::cpu_threads),
    field("trace", &StrataConfig::trace),
    field("checksum", &StrataConfig::checksum),
    field("io_backend", &StrataConfig::io_backend),
    field("direct_io", &StrataConfig::direct_io),
    field("io_uring_sqpoll", &StrataConfig::io_uring_sqpoll),
    field("checkpoint_keep", &StrataConfig::checkpoint_keep),
    field("checkpoint_on_error", &StrataConfig::checkpoint_on_error),
    field("speculative_updates", &StrataConfig::speculative_updates),
    field("speculative_update_memory", &StrataConfig::speculative_update_memory_bytes).in_bytes(),
};

// The list of a section struct, for the generic walkers. Config's own list is its top-level
// values (its sections are read and printed one by one, in config_parse / config_print).
constexpr const auto& fields_of(std::type_identity<Config>) { return kTopFields; }
constexpr const auto& fields_of(std::type_identity<Fp16Config>) { return kFp16Fields; }
constexpr const auto& fields_of(std::type_identity<Bf16Config>) { return kBf16Fields; }
constexpr const auto& fields_of(std::type_identity<OptimizerConfig>) {
  return kOptimizerParamFields;
}
constexpr const auto& fields_of(std::type_identity<SchedulerConfig>) {
  return kSchedulerParamFields;
}
constexpr const auto& fields_of(std::type_identity<OffloadParamConfig>) {
  return kOffloadParamFields;
}
constexpr const auto& fields_of(std::type_identity<OffloadOptimizerConfig>) {
  return kOffloadOptimizerFields;
}
constexpr const auto& fields_of(std::type_identity<ZeroConfig>) { return kZeroFields; }
constexpr const auto& fields_of(std::type_identity<AioConfig>) { return kAioFields; }
constexpr const auto& fields_of(std::type_identity<DataTypesConfig>) { return kDataTypesFields; }
constexpr const auto& fields_of(std::type_identity<StrataConfig>) { return kStrataFields; }

// A struct with a field list (read and printed as a JSON object of its own).
template <typename T>
concept Section = requires { fields_of(std::type_identity<T>{}); };

}  // namespace strata::runtime::config::detail

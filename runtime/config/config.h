#pragma once
// The run's configuration: a DeepSpeed-style JSON file (DeepSpeed's key names and defaults
// wherever DeepSpeed has the knob) plus a "strata" section for this runtime's own settings.
// docs/config.md lists every key with its type, default and meaning.
//
// Life of a config:
//   load_config_file(path, overrides)  read the file, apply "key.path=value" overrides, parse,
//                                      validate -> ParsedConfig (config + warnings)
//   resolve_config(config, inputs)     fill what depends on the run: batch sizes from the world
//                                      size, "auto" bucket sizes from the model, machine defaults,
//                                      and (training) the other "auto"s from the flags or HF's
//                                      defaults; resolve_config_explained() also says where
//                                      each "auto" came from
//   config_to_json(config)             pretty JSON with every key; log_config() prints it at start
//
// Every failure is a strata::Error whose where() is the JSON key path
// ("zero_optimization.offload_optimizer.ratio") and whose message gives the expected form.
// Unknown keys are warnings, never errors, so configs written for DeepSpeed still load.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "offload/aio_limits.h"

namespace strata::runtime::config {

// A value the file may leave to the runtime by writing "auto", as Hugging Face's DeepSpeed
// integration does. Default-constructed is "auto"; assigning a T makes it concrete.
template <typename T>
class AutoOr {
 public:
  AutoOr() = default;
  AutoOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor): `= 1e-3`
  static AutoOr automatic() { return AutoOr(); }

  bool is_auto() const { return !value_.has_value(); }
  const T& value() const {
    STRATA_ASSERT(value_.has_value(), "value() of a setting that is still \"auto\"");
    return *value_;
  }
  T value_or(T fallback) const { return value_.value_or(std::move(fallback)); }

  bool operator==(const AutoOr&) const = default;

 private:
  std::optional<T> value_;  // nullopt = "auto"
};

enum class OffloadDevice { kNone, kCpu, kNvme };                     // "none" | "cpu" | "nvme"
enum class OptimizerType { kAdam, kAdamW };                          // "Adam" | "AdamW"
enum class SchedulerType { kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };                             // "log" | "linear"
enum class DeviceKind { kAuto, kHost, kCuda };                       // "auto" | "host" | "cuda"
enum class IoBackend { kAuto, kIoUring, kThreads };          // "auto" | "io_uring" | "threads"
enum class DirectIoMode { kAuto, kRequire, kOff };           // "auto" | "require" | "off"
enum class CheckpointOnError { kContinue, kStop };           // "continue" | "stop"
enum class GradAccumDtype { kFp32, kBf16, kFp16 };           // "fp32" | "bf16" | "fp16"

// The spelling used in config files and in the printed config.
std::string_view to_string(OffloadDevice value);
std::string_view to_string(OptimizerType value);
std::string_view to_string(SchedulerType value);
std::string_view to_string(WarmupType value);
std::string_view to_string(DeviceKind value);
std::string_view to_string(IoBackend value);
std::string_view to_string(DirectIoMode value);
std::string_view to_string(CheckpointOnError value);
std::string_view to_string(GradAccumDtype value);

// ---- DeepSpeed sections ------------------------------------------------------------------

struct Fp16Config {
  AutoOr<bool> enabled = false;
  double loss_scale = 0.0;               // 0 = dynamic loss scaling; > 0 = this static scale
  std::int32_t initial_scale_power = 16;  // dynamic: the first scale is 2^power
  std::uint32_t loss_scale_window = 1000;  // steps without overflow before the scale doubles
  std::uint32_t hysteresis = 2;            // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;     // refill hysteresis after a step without overflow
  double min_loss_scale = 1.0;
  bool operator==(const Fp16Config&) const = default;
};

struct Bf16Config {
  AutoOr<bool> enabled = false;
  bool operator==(const Bf16Config&) const = default;
};

// optimizer {type, params}. DeepSpeed's Adam and AdamW; "Adam" decouples weight decay (AdamW)
// unless params.adam_w_mode is false, exactly as in DeepSpeed.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  AutoOr<double> lr = 1e-3;
  AutoOr<std::array<double, 2>> betas = std::array<double, 2>{0.9, 0.999};
  AutoOr<double> eps = 1e-8;
  AutoOr<double> weight_decay = 0.0;
  bool adam_w_mode = true;      // always true for AdamW
  bool bias_correction = true;
  bool operator==(const OptimizerConfig&) const = default;
};

// scheduler {type, params}: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR. Fields that
// a type does not use keep their defaults and are not printed.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kWarmupLR;
  AutoOr<double> warmup_min_lr = 0.0;     // WarmupLR, WarmupDecayLR
  AutoOr<double> warmup_max_lr = 1e-3;    // WarmupLR (default: optimizer lr), WarmupDecayLR
  AutoOr<std::uint64_t> warmup_num_steps = std::uint64_t{1000};
  WarmupType warmup_type = WarmupType::kLog;
  std::int64_t last_batch_iteration = -1;  // -1 = start from the beginning
  // WarmupDecayLR and WarmupCosineLR: required there, nullopt for WarmupLR.
  std::optional<AutoOr<std::uint64_t>> total_num_steps;
  double warmup_min_ratio = 0.0;  // WarmupCosineLR: first lr = ratio * optimizer lr
  double cos_min_ratio = 1e-4;    // WarmupCosineLR: final lr = ratio * optimizer lr
  bool operator==(const SchedulerConfig&) const = default;
};

// Sizes below are element counts, as in DeepSpeed, except where a name says bytes.
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  // Folders for the swap files: DeepSpeed's single string, or a list to stripe over several
  // drives. Empty = not set.
  std::vector<std::string> nvme_path;
  std::uint64_t buffer_count = 5;              // NVMe staging buffers
  std::uint64_t buffer_size = 100'000'000;     // elements per staging buffer
  std::uint64_t max_in_cpu = 1'000'000'000;    // elements kept in host memory with NVMe offload
  bool pin_memory = false;
  bool operator==(const OffloadParamConfig&) const = default;
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::vector<std::string> nvme_path;  // as OffloadParamConfig::nvme_path
  std::uint64_t buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = false;   // overlap the read of the next sub-group with this step
  bool pipeline_write = false;  // overlap the write of the previous sub-group with this step
  double ratio = 1.0;           // fraction of optimizer states offloaded (stage 3 only if < 1)
  bool operator==(const OffloadOptimizerConfig&) const = default;
};

struct ZeroConfig {
  std::int32_t stage = 0;
  OffloadParamConfig offload_param;          // device kNone (the default) = not offloaded
  OffloadOptimizerConfig offload_optimizer;  // device kNone (the default) = not offloaded
  std::uint64_t sub_group_size = 1'000'000'000;
  AutoOr<std::uint64_t> stage3_prefetch_bucket_size = std::uint64_t{50'000'000};
  std::uint64_t stage3_max_live_parameters = 1'000'000'000;
  std::uint64_t stage3_max_reuse_distance = 1'000'000'000;
  AutoOr<std::uint64_t> stage3_param_persistence_threshold = std::uint64_t{100'000};
  AutoOr<std::uint64_t> reduce_bucket_size = std::uint64_t{500'000'000};
  std::uint64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;  // when absent: true at stage 3, false below (DeepSpeed's rule)
  bool contiguous_gradients = true;
  bool operator==(const ZeroConfig&) const = default;
};

struct AioConfig {
  std::uint64_t block_size = offload::kDefaultBlockBytes;  // bytes per I/O request
  std::uint32_t queue_depth = 8;
  std::uint32_t intra_op_parallelism = 1;  // I/O workers per request (old name: thread_count)
  bool single_submit = false;
  bool overlap_events = true;
  bool operator==(const AioConfig&) const = default;
};

// data_types: DeepSpeed's grad_accum_dtype, the dtype of each rank's gradient accumulator (the
// shard the micro-batches of a step are summed into and the optimizer reads): fp32 (4 bytes an
// element, strata's default) or bf16 / fp16 (2: the ZeRO paper's 16 bytes of model states a
// parameter in mixed precision). fp16 needs fp16 training (validate_config says why).
struct DataTypesConfig {
  GradAccumDtype grad_accum_dtype = GradAccumDtype::kFp32;
  bool operator==(const DataTypesConfig&) const = default;
};

// What an engine part reads of an "auto"-able key: its value, or, when it is still "auto" (a
// resolution without what its rule needs, e.g. no model hidden size for the bucket sizes), the
// key's default: the member initializer of a default-constructed section. So a default is
// written once, in the struct, and never again as a literal where it is read.
template <typename S, typename T>
T value_or_default(const S& section, AutoOr<T> S::*member) {
  const AutoOr<T>& v = section.*member;
  return v.is_auto() ? (S{}.*member).value() : v.value();
}

inline DType to_dtype(GradAccumDtype value) {
  switch (value) {
    case GradAccumDtype::kFp32: return DType::f32;
    case GradAccumDtype::kBf16: return DType::bf16;
    case GradAccumDtype::kFp16: return DType::f16;
  }
  return DType::f32;
}

// ---- strata's own section ----------------------------------------------------------------

// The host backend's device arena when strata.device_memory is 0: small on purpose, to act
// like a GPU that is too small for the model.
inline constexpr std::uint64_t kHostDeviceDefaultMemoryBytes = 512 * kMiB;
// strata.pinned_memory 0 resolves to physical memory / this: pinned pages cannot be swapped
// or reclaimed, so half is left to the OS, the page cache and pageable host buffers.
inline constexpr std::uint64_t kPinnedMemoryDefaultDivisor = 2;

struct StrataConfig {
  DeviceKind device = DeviceKind::kAuto;  // auto = cuda when a GPU is usable, else host
  std::uint64_t device_memory_bytes = 0;  // device arena budget; 0 = backend default
  std::uint64_t pinned_memory_bytes = 0;  // pinned host pool budget; 0 = default (see above)
  std::uint32_t cpu_threads = 0;          // 0 = the CPUs in this process's affinity mask
  std::string trace;                      // trace output path; empty = tracing off
  bool checksum = false;                  // checksum every offloaded block on write and read
  IoBackend io_backend = IoBackend::kAuto;  // NVMe I/O: io_uring, or the pread/pwrite threads
  DirectIoMode direct_io = DirectIoMode::kAuto;  // O_DIRECT swap files: where possible / or fail
  bool io_uring_sqpoll = false;           // ask for a kernel submission-polling thread
  std::uint32_t checkpoint_keep = 2;      // strata train: complete checkpoints kept (0 = all)
  // strata train: a checkpoint that cannot be written (ENOSPC, EIO) is reported and training
  // goes on, the next save trying again; or the run stops with that error.
  CheckpointOnError checkpoint_on_error = CheckpointOnError::kContinue;
  // With gradient clipping (and no fp16): update pinned-tier modules as their gradients land,
  // out of place, and keep or redo each once the norm is known (Note [Speculative updates] in
  // runtime/zero/speculation.h). The second set of optimizer states it needs (12 bytes a parameter,
  // pageable) stays under speculative_update_memory; 0 = a quarter of physical memory.
  bool speculative_updates = true;
  std::uint64_t speculative_update_memory_bytes = 0;
  bool operator==(const StrataConfig&) const = default;
};

// ---- the whole config ----------------------------------------------------------------------

struct Config {
  // nullopt = absent. resolve_config() derives the missing ones (DeepSpeed's rule
  // train_batch_size = micro * gradient_accumulation_steps * world size) and leaves all three
  // concrete.
  std::optional<AutoOr<std::uint64_t>> train_batch_size;
  std::optional<AutoOr<std::uint64_t>> train_micro_batch_size_per_gpu;
  std::optional<AutoOr<std::uint64_t>> gradient_accumulation_steps;
  AutoOr<double> gradient_clipping = 0.0;  // max global grad norm; 0 = no clipping
  Fp16Config fp16;
  Bf16Config bf16;
  std::optional<OptimizerConfig> optimizer;  // nullopt = section absent
  std::optional<SchedulerConfig> scheduler;  // nullopt = constant learning rate
  ZeroConfig zero_optimization;
  AioConfig aio;
  DataTypesConfig data_types;
  StrataConfig strata;
  bool operator==(const Config&) const = default;
};

// The dtype a run computes in: bf16.enabled -> bf16, fp16.enabled -> fp16, else fp32 (a run's
// session and `strata estimate` both read it here).
inline DType compute_dtype(const Config& config) {
  if (config.bf16.enabled.value_or(false)) return DType::bf16;
  if (config.fp16.enabled.value_or(false)) return DType::f16;
  return DType::f32;
}

// A finding that does not stop the run: an unknown key (with the closest known one), a
// DeepSpeed key strata does not use, a deprecated name, a suspicious combination.
struct ConfigWarning {
  enum class Kind { kUnknownKey, kIgnoredKey, kOther };
  Kind kind = Kind::kOther;
  std::string path;     // JSON key path, e.g. "zero_optimization.stage3_prefetch_bucket"
  std::string message;  // the whole sentence, path included
  std::string suggestion;  // kUnknownKey: the closest known key path, if one is close
  bool operator==(const ConfigWarning&) const = default;
};

struct ParsedConfig {
  Config config;
  std::vector<ConfigWarning> warnings;  // also logged through strata::log::warn
};

// Parses DeepSpeed-style JSON text. `source` names the text in messages (a file path).
// Each override "key.path=value" is applied to the JSON first (value parsed as JSON, else
// taken as a string; "a.b.0" indexes an array); an override that names an unknown key or
// gives a bad value is an Error that quotes the override. Then validate_config() runs.
// Throws strata::Error: malformed JSON (where = "source:line:column"), wrong type or bad value
// (where = key path).
ParsedConfig parse_config(std::string_view json_text, std::string_view source = "<config>",
                          std::span<const std::string> overrides = {});

// Reads `path` and parses it as parse_config() does. An unreadable file is an Error naming
// the path and the errno text.
ParsedConfig load_config_file(const std::string& path, std::span<const std::string> overrides = {});

// Checks value ranges and the rules that tie keys together (fp16 with bf16, offload needs a
// ZeRO stage, NVMe needs nvme_path, ...). Throws strata::Error naming the key path; returns
// the findings that are only warnings (not logged here).
std::vector<ConfigWarning> validate_config(const Config& config);

// The values a training command's flags give for config keys (`strata train`, `strata config`);
// nullopt = the flag was not given. Hugging Face's Trainer fills a DeepSpeed config's "auto"
// values from its TrainingArguments the same way (docs/config.md, "Resolution").
struct TrainingFlags {
  std::optional<double> lr;                     // --lr: optimizer.params.lr (and warmup_max_lr)
  std::optional<std::uint64_t> micro_batch;     // --micro-batch: train_micro_batch_size_per_gpu
  std::optional<std::uint64_t> grad_accum;      // --grad-accum: gradient_accumulation_steps
  std::optional<double> clip;                   // --clip: gradient_clipping
  std::optional<std::uint64_t> warmup_steps;    // --warmup-steps: scheduler.params.warmup_num_steps
  std::optional<std::uint64_t> steps;           // --steps: an "auto" scheduler.params.total_num_steps
};

// HF TrainingArguments' defaults, which an "auto" takes when no flag gives it (training runs).
inline constexpr double kHfLearningRate = 5e-5;
inline constexpr double kHfAdamBeta1 = 0.9;
inline constexpr double kHfAdamBeta2 = 0.999;
inline constexpr double kHfAdamEpsilon = 1e-8;
inline constexpr double kHfWeightDecay = 0.0;
inline constexpr double kHfMaxGradNorm = 1.0;
inline constexpr std::uint64_t kHfMicroBatch = 8;  // per_device_train_batch_size
inline constexpr std::uint64_t kHfGradAccum = 1;
// HF's warmup_steps is 0; DeepSpeed's schedulers warm up over max(2, warmup_num_steps) steps, so
// 0 and 1 run alike, and strata (like current DeepSpeed) refuses 0: an "auto" takes 1.
inline constexpr std::uint64_t kHfWarmupSteps = 1;

struct ResolveInputs {
  std::uint32_t world_size = 1;                    // data-parallel ranks
  std::optional<std::uint64_t> hidden_size;        // model width: resolves "auto" bucket sizes
  std::optional<std::uint64_t> host_memory_bytes;  // default: this machine's physical memory
  std::optional<std::uint32_t> cpu_count;          // default: CPUs in this process's affinity mask
  // Resolve as a training run does (strata train, strata config): every "auto" the Trainer fills
  // takes `flags` or else HF's default (above), and a config without an optimizer section gets
  // AdamW with DeepSpeed's defaults. false (the estimate, inference, tests): those stay "auto".
  bool training = false;
  TrainingFlags flags;  // applied whenever given, training or not
};

// One key that was "auto" and what it became: {"optimizer.params.lr", "5e-05",
// "default (HF Trainer)"}. Sources: "flag --lr", "default (HF Trainer)", "model hidden size 768",
// "--steps", "= optimizer.params.lr", "train_batch_size 32 / (accumulation 2 x world 4)".
struct ResolvedKey {
  std::string key;
  std::string value;
  std::string source;
  bool operator==(const ResolvedKey&) const = default;
};

struct Resolution {
  Config config;
  std::vector<ResolvedKey> autos;  // every key that was "auto" and now has a value, in key order
  // A flag that replaced a different value of the config, a section added: one sentence each.
  std::vector<std::string> notes;
};

// Returns `config` with what depends on the run filled in, then validated:
//  - flags (inputs.flags) replace their keys' values, "auto" or not (a different concrete value
//    is named in a note); --lr also sets a WarmupLR / WarmupDecayLR warmup_max_lr; --steps fills
//    only an "auto" total_num_steps;
//  - batch sizes: "auto" counts as absent; the missing ones follow from
//    train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world
//    (Error when they disagree, do not divide evenly, or neither batch size is given; a training
//    resolution with one of them "auto" takes the micro-batch kHfMicroBatch instead);
//  - with hidden_size h, "auto" reduce_bucket_size = h*h, stage3_prefetch_bucket_size =
//    0.9*h*h and stage3_param_persistence_threshold = 10*h (the Hugging Face rule);
//  - inputs.training: the other "auto"s (clipping, lr, betas, eps, weight decay, scheduler
//    values, fp16/bf16 enabled) take HF TrainingArguments' defaults; total_num_steps without
//    --steps and bucket sizes without hidden_size stay "auto";
//  - strata.device_memory 0 with device "host" -> kHostDeviceDefaultMemoryBytes (for "cuda"
//    and "auto" it stays 0: the backend decides once the device is known);
//  - strata.pinned_memory 0 -> host memory / kPinnedMemoryDefaultDivisor;
//  - strata.cpu_threads 0 -> cpu count.
// What is left "auto": see unresolved_auto_keys().
Resolution resolve_config_explained(const Config& config, const ResolveInputs& inputs);

// resolve_config_explained(config, inputs).config.
Config resolve_config(const Config& config, const ResolveInputs& inputs);

// The resolved "auto" values as one table (key, value, source), a header line first; "" when
// there are none. strata train logs it at start, strata config prints it on stderr.
std::string resolution_table(const std::vector<ResolvedKey>& autos);

// JSON text with "key.path=value" overrides applied as parse_config() applies them (nothing is
// parsed or validated beyond that), for a caller that edits the JSON before parsing it (the
// automatic placement). Throws strata::Error for malformed JSON or a malformed override.
std::string apply_config_overrides(std::string_view json_text, std::string_view source,
                                   std::span<const std::string> overrides);

// The key paths whose value is still "auto", e.g. {"optimizer.params.lr"}.
std::vector<std::string> unresolved_auto_keys(const Config& config);

// Pretty JSON with every key and its value ("auto" where still auto, null where absent).
// parse_config(config_to_json(c)).config == c for every valid config.
std::string config_to_json(const Config& config);

// Logs config_to_json(config) at info level: the engine calls it at start.
void log_config(const Config& config);

}  // namespace strata::runtime::config

// resolve_config(): fills what depends on the run (world size, model, machine, the training
// flags) and lists the "auto" values nobody could fill. The training "auto"s (flags, HF's
// defaults) are config_auto.cpp's.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/config/config_fields.h"
#include "runtime/config/resolve_impl.h"

namespace strata::runtime::config {
namespace {

using Batch = std::optional<AutoOr<std::uint64_t>>;

// "auto" batch sizes come from the run; strata's runs have no other source, so an "auto"
// one is derived by DeepSpeed's rule like an absent one.
std::optional<std::uint64_t> given(const Batch& b) {
  if (!b || b->is_auto()) return std::nullopt;
  return b->value();
}

std::uint64_t checked_product(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t ab = 0;
  std::uint64_t abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) {
    throw Error(fmt::format("batch size {} * {} * {} does not fit in 64 bits", a, b, c),
                "train_batch_size", "use smaller batch sizes");
  }
  return abc;
}

bool is_auto_key(const Batch& b) { return b && b->is_auto(); }

// DeepSpeed's _set_batch_related_parameters, with exact division: where DeepSpeed would
// round down and then fail its consistency assertion, this says which numbers disagree.
// `training`: with neither batch size given but one of the keys "auto", the micro-batch is HF's
// default (kHfMicroBatch) instead of an error. The derived keys are logged with their rule.
void resolve_batch(Config& c, std::uint64_t world, bool training, detail::ResolveLog& log) {
  std::optional<std::uint64_t> train = given(c.train_batch_size);
  std::optional<std::uint64_t> micro = given(c.train_micro_batch_size_per_gpu);
  std::optional<std::uint64_t> accum = given(c.gradient_accumulation_steps);
  const bool any_auto = is_auto_key(c.train_batch_size) || is_auto_key(c.train_micro_batch_size_per_gpu) ||
                        is_auto_key(c.gradient_accumulation_steps);

  auto divide = [&](std::uint64_t total, std::uint64_t by, std::string_view derived) {
    if (by == 0 || total % by != 0) {
      throw Error(fmt::format("train_batch_size {} is not divisible by {} (the product of the "
                              "other batch settings and world size {}), so {} cannot be derived",
                              total, by, world, derived),
                  "train_batch_size",
                  "make train_batch_size = train_micro_batch_size_per_gpu * "
                  "gradient_accumulation_steps * world size");
    }
    return total / by;
  };
  auto product_source = [&] { return fmt::format("micro {} x accumulation {} x world {}", *micro, *accum, world); };

  if (train && micro && accum) {
    // checked below
  } else if (train && micro) {
    accum = divide(*train, checked_product(*micro, world, 1), "gradient_accumulation_steps");
    log.resolved("gradient_accumulation_steps", detail::show_value(*accum),
                 fmt::format("train_batch_size {} / (micro {} x world {})", *train, *micro, world));
  } else if (train && accum) {
    micro = divide(*train, checked_product(*accum, world, 1), "train_micro_batch_size_per_gpu");
    log.resolved("train_micro_batch_size_per_gpu", detail::show_value(*micro),
                 fmt::format("train_batch_size {} / (accumulation {} x world {})", *train, *accum, world));
  } else if (micro && accum) {
    train = checked_product(*micro, *accum, world);
    log.resolved("train_batch_size", detail::show_value(*train), product_source());
  } else if (train) {
    accum = 1;
    micro = divide(*train, world, "train_micro_batch_size_per_gpu");
    log.resolved("gradient_accumulation_steps", "1", "DeepSpeed's rule (only train_batch_size is given)");
    log.resolved("train_micro_batch_size_per_gpu", detail::show_value(*micro),
                 fmt::format("train_batch_size {} / world {}", *train, world));
  } else if (micro) {
    accum = kHfGradAccum;  // DeepSpeed's rule and HF's default agree: 1
    log.resolved("gradient_accumulation_steps", "1", training ? "default (HF Trainer)" : "DeepSpeed's rule");
    train = checked_product(*micro, 1, world);
    log.resolved("train_batch_size", detail::show_value(*train), product_source());
  } else if (training && any_auto) {
    micro = kHfMicroBatch;
    log.resolved("train_micro_batch_size_per_gpu", detail::show_value(*micro), "default (HF Trainer)");
    if (!accum) {
      accum = kHfGradAccum;
      log.resolved("gradient_accumulation_steps", detail::show_value(*accum), "default (HF Trainer)");
    }
    train = checked_product(*micro, *accum, world);
    log.resolved("train_batch_size", detail::show_value(*train), product_source());
  } else {
    throw Error("neither train_batch_size nor train_micro_batch_size_per_gpu is given",
                "train_micro_batch_size_per_gpu",
                "set train_micro_batch_size_per_gpu (and gradient_accumulation_steps), or "
                "train_batch_size, as DeepSpeed requires (strata train: or --micro-batch)");
  }
  if (*train != checked_product(*micro, *accum, world)) {
    throw Error(fmt::format("train_batch_size ({}) != train_micro_batch_size_per_gpu ({}) * "
                            "gradient_accumulation_steps ({}) * world size ({})",
                            *train, *micro, *accum, world),
                "train_batch_size",
                "change one of them so that the product holds, or leave one out (a --micro-batch or "
                "--grad-accum flag replaces the config's value: give the other flag too, or --set "
                "train_batch_size=auto)");
  }
  if (*micro == 0 || *accum == 0) {
    throw Error("batch sizes resolve to 0", "train_micro_batch_size_per_gpu",
                "give positive batch sizes");
  }
  c.train_batch_size = AutoOr<std::uint64_t>(*train);
  c.train_micro_batch_size_per_gpu = AutoOr<std::uint64_t>(*micro);
  c.gradient_accumulation_steps = AutoOr<std::uint64_t>(*accum);
}

// Hugging Face's rule for its "auto" bucket sizes, from the model's hidden size.
void resolve_buckets(ZeroConfig& z, std::uint64_t hidden, detail::ResolveLog& log) {
  std::uint64_t square = 0;
  if (__builtin_mul_overflow(hidden, hidden, &square)) {
    throw Error(fmt::format("hidden size {} is too large", hidden), "zero_optimization",
                "give the bucket sizes explicitly instead of \"auto\"");
  }
  const std::string source = fmt::format("model hidden size {}", hidden);
  auto fill = [&](AutoOr<std::uint64_t>& field, std::uint64_t value, const char* key) {
    if (!field.is_auto()) return;
    field = value;
    log.resolved(fmt::format("zero_optimization.{}", key), detail::show_value(value), source);
  };
  fill(z.reduce_bucket_size, square, "reduce_bucket_size");
  fill(z.stage3_prefetch_bucket_size, static_cast<std::uint64_t>(0.9 * static_cast<double>(square)),
       "stage3_prefetch_bucket_size");
  fill(z.stage3_param_persistence_threshold, 10 * hidden, "stage3_param_persistence_threshold");
}

std::uint64_t physical_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) {
    throw Error("cannot tell this machine's physical memory (sysconf failed)",
                "strata.pinned_memory", "set strata.pinned_memory explicitly, e.g. \"8GiB\"");
  }
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

std::uint32_t affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return static_cast<std::uint32_t>(count);
  }
  // More CPUs than a cpu_set_t holds, or no affinity support: every online CPU.
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<std::uint32_t>(online) : 1;
}

template <typename T>
bool still_auto(const T&) {
  return false;
}
template <typename T>
bool still_auto(const AutoOr<T>& v) {
  return v.is_auto();
}
template <typename T>
bool still_auto(const std::optional<T>& v) {
  return v && still_auto(*v);
}

// Appends the key path of every field of S's list (that applies to `s`) whose value is "auto".
template <detail::Section S>
void note_auto_fields(std::string_view section, const S& s, std::vector<std::string>* keys) {
  detail::for_each_field(detail::fields_of(std::type_identity<S>{}), [&](const auto& f) {
    if (!f.applies_to(s)) return;
    const std::string path = section.empty() ? std::string(f.key)
                                             : fmt::format("{}.{}", section, f.key);
    using T = typename std::remove_cvref_t<decltype(f)>::Value;
    if constexpr (detail::Section<T>) {
      note_auto_fields(path, s.*f.member, keys);
    } else if (still_auto(s.*f.member)) {
      keys->push_back(path);
    }
  });
}

}  // namespace

Resolution resolve_config_explained(const Config& config, const ResolveInputs& inputs) {
  if (inputs.world_size == 0) {
    throw Error("world size is 0", "world_size", "run with at least one rank");
  }
  Resolution out;
  detail::ResolveLog log(&out);
  out.config = config;
  Config& c = out.config;
  if (inputs.training && !c.optimizer) {
    c.optimizer = OptimizerConfig{};
    log.note("the config has no optimizer section: AdamW with DeepSpeed's defaults (lr 0.001 unless --lr)");
  }
  detail::apply_training_flags(c, inputs.flags, log);
  resolve_batch(c, inputs.world_size, inputs.training, log);
  if (inputs.hidden_size) resolve_buckets(c.zero_optimization, *inputs.hidden_size, log);
  if (inputs.training) detail::fill_training_defaults(c, log);

  StrataConfig& s = c.strata;
  if (s.device_memory_bytes == 0 && s.device == DeviceKind::kHost)
    s.device_memory_bytes = kHostDeviceDefaultMemoryBytes;
  if (s.speculative_update_memory_bytes == 0) {
    const std::uint64_t host = inputs.host_memory_bytes ? *inputs.host_memory_bytes : physical_memory_bytes();
    s.speculative_update_memory_bytes = host / 4;
  }
  if (s.pinned_memory_bytes == 0) {
    std::uint64_t host = inputs.host_memory_bytes ? *inputs.host_memory_bytes : physical_memory_bytes();
    s.pinned_memory_bytes = host / kPinnedMemoryDefaultDivisor;
  }
  if (s.cpu_threads == 0) s.cpu_threads = inputs.cpu_count ? *inputs.cpu_count : affinity_cpu_count();

  validate_config(c);

  // Only the keys that were "auto" in `config`, in the printed config's order.
  const std::vector<std::string> was_auto = unresolved_auto_keys(config);
  const auto rank = [&](const ResolvedKey& r) {
    return std::find(was_auto.begin(), was_auto.end(), r.key) - was_auto.begin();
  };
  std::erase_if(out.autos, [&](const ResolvedKey& r) { return rank(r) == std::ssize(was_auto); });
  std::stable_sort(out.autos.begin(), out.autos.end(),
                   [&](const ResolvedKey& a, const ResolvedKey& b) { return rank(a) < rank(b); });
  return out;
}

Config resolve_config(const Config& config, const ResolveInputs& inputs) {
  return resolve_config_explained(config, inputs).config;
}

std::vector<std::string> unresolved_auto_keys(const Config& c) {
  std::vector<std::string> keys;
  auto note = [&](std::string_view section, const auto& s) { note_auto_fields(section, s, &keys); };
  note("", c);  // the batch keys and clipping
  note("fp16", c.fp16);
  note("bf16", c.bf16);
  if (c.optimizer) note("optimizer.params", *c.optimizer);
  if (c.scheduler) note("scheduler.params", *c.scheduler);
  note("zero_optimization", c.zero_optimization);
  return keys;
}

}  // namespace strata::runtime::config

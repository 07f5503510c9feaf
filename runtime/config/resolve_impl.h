#pragma once
// Internal to runtime/config: what the parts of resolve_config_explained() share
// (config_resolve.cpp: batch sizes, bucket sizes, machine defaults; config_auto.cpp: the
// training flags and Hugging Face's defaults for the other "auto"s).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/config/config.h"

namespace strata::runtime::config::detail {

// Where a resolution writes what it did. Borrowed: `out` outlives it.
class ResolveLog {
 public:
  explicit ResolveLog(Resolution* out) : out_(out) {}
  // `key` was "auto" (or is derived from keys that were) and now holds `value`, from `source`.
  // resolve_config_explained() keeps only the keys that were "auto" in the config it was given.
  void resolved(std::string key, std::string value, std::string source) {
    out_->autos.push_back({std::move(key), std::move(value), std::move(source)});
  }
  void note(std::string text) { out_->notes.push_back(std::move(text)); }

 private:
  Resolution* out_;
};

// A value as the printed config shows it: 5e-05, [0.9, 0.999], 8, false.
std::string show_value(double v);
std::string show_value(std::uint64_t v);
std::string show_value(bool v);
std::string show_value(const std::array<double, 2>& v);

// The flags' values into their keys (inputs.flags; before the batch sizes are derived). Throws
// strata::Error naming the flag when the config has nothing for it to set (--warmup-steps
// without a scheduler section).
void apply_training_flags(Config& c, const TrainingFlags& flags, ResolveLog& log);

// The "auto"s a training run fills with HF TrainingArguments' defaults (after the flags and the
// batch sizes): clipping, fp16/bf16 enabled, the optimizer's and the scheduler's values.
void fill_training_defaults(Config& c, ResolveLog& log);

}  // namespace strata::runtime::config::detail

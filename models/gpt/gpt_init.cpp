#include "models/gpt/gpt_init.h"

#include <cmath>
#include <string_view>

#include "models/param_init.h"

namespace strata::models {

void init_module(const GptConfig& config, const ModuleLayout& module, std::uint64_t seed,
                 float* out) {
  zero_gaps(module, out);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (const TensorSlot& t : module.tensors) {
    float* p = out + t.offset;
    const std::string_view name = t.name;
    if (ends_with(name, ".bias")) {
      fill_value(p, t.numel, 0.0f);
    } else if (name.find("ln_") != std::string_view::npos) {
      fill_value(p, t.numel, 1.0f);
    } else {
      fill_normal(p, t.numel, seed, name, ends_with(name, "c_proj.weight") ? residual_std : 0.02);
    }
  }
}

}  // namespace strata::models

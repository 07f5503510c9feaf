#include "models/gpt/gpt_layout.h"

#include <fmt/format.h>

namespace strata::models {

ModelLayout gpt_layout(const GptConfig& config) {
  config.validate();
  const std::int64_t V = config.vocab_size, P = config.n_positions, C = config.n_embd;
  ModelLayout layout;

  ModuleLayout emb{"embedding", ModuleKind::embedding, -1, {}, 0};
  emb.add("wte.weight", {V, C});
  emb.add("wpe.weight", {P, C});
  layout.modules.push_back(std::move(emb));

  for (int l = 0; l < config.n_layer; ++l) {
    ModuleLayout b{fmt::format("h.{}", l), ModuleKind::block, l, {}, 0};
    const std::string p = b.name + ".";
    b.add(p + "ln_1.weight", {C});
    b.add(p + "ln_1.bias", {C});
    b.add(p + "attn.c_attn.weight", {3 * C, C}, true);
    b.add(p + "attn.c_attn.bias", {3 * C});
    b.add(p + "attn.c_proj.weight", {C, C}, true);
    b.add(p + "attn.c_proj.bias", {C});
    b.add(p + "ln_2.weight", {C});
    b.add(p + "ln_2.bias", {C});
    b.add(p + "mlp.c_fc.weight", {4 * C, C}, true);
    b.add(p + "mlp.c_fc.bias", {4 * C});
    b.add(p + "mlp.c_proj.weight", {C, 4 * C}, true);
    b.add(p + "mlp.c_proj.bias", {C});
    layout.modules.push_back(std::move(b));
  }

  ModuleLayout lnf{"ln_f", ModuleKind::head, -1, {}, 0};
  lnf.add("ln_f.weight", {C});
  lnf.add("ln_f.bias", {C});
  layout.modules.push_back(std::move(lnf));
  for (ModuleLayout& m : layout.modules) m.close();
  return layout;
}

}  // namespace strata::models

#include "models/gpt/gpt_layout.h"

#include <fmt/format.h>

namespace strata::models {
namespace {

std::size_t align_up(std::size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

// Appends a tensor at the next aligned offset of `m`.
void add(ModuleLayout& m, std::string name, std::vector<std::int64_t> shape, bool hf_transposed) {
  TensorSlot t;
  t.name = std::move(name);
  t.numel = 1;
  for (std::int64_t d : shape) t.numel *= static_cast<std::size_t>(d);
  t.shape = std::move(shape);
  t.offset = align_up(m.numel);
  t.hf_transposed = hf_transposed;
  m.numel = t.offset + t.numel;
  m.tensors.push_back(std::move(t));
}

}  // namespace

GptLayout GptLayout::build(const GptConfig& config) {
  config.validate();
  const std::int64_t V = config.vocab_size, P = config.n_positions, C = config.n_embd;
  GptLayout layout;

  ModuleLayout emb{"embedding", ModuleKind::embedding, -1, {}, 0};
  add(emb, "wte.weight", {V, C}, false);
  add(emb, "wpe.weight", {P, C}, false);
  layout.modules.push_back(std::move(emb));

  for (int l = 0; l < config.n_layer; ++l) {
    ModuleLayout b{fmt::format("h.{}", l), ModuleKind::block, l, {}, 0};
    const std::string p = b.name + ".";
    add(b, p + "ln_1.weight", {C}, false);
    add(b, p + "ln_1.bias", {C}, false);
    add(b, p + "attn.c_attn.weight", {3 * C, C}, true);
    add(b, p + "attn.c_attn.bias", {3 * C}, false);
    add(b, p + "attn.c_proj.weight", {C, C}, true);
    add(b, p + "attn.c_proj.bias", {C}, false);
    add(b, p + "ln_2.weight", {C}, false);
    add(b, p + "ln_2.bias", {C}, false);
    add(b, p + "mlp.c_fc.weight", {4 * C, C}, true);
    add(b, p + "mlp.c_fc.bias", {4 * C}, false);
    add(b, p + "mlp.c_proj.weight", {C, 4 * C}, true);
    add(b, p + "mlp.c_proj.bias", {C}, false);
    b.numel = align_up(b.numel);
    layout.modules.push_back(std::move(b));
  }

  ModuleLayout lnf{"ln_f", ModuleKind::final_norm, -1, {}, 0};
  add(lnf, "ln_f.weight", {C}, false);
  add(lnf, "ln_f.bias", {C}, false);
  layout.modules.push_back(std::move(lnf));
  for (ModuleLayout& m : layout.modules) m.numel = align_up(m.numel);
  return layout;
}

std::size_t GptLayout::total_numel() const {
  std::size_t n = 0;
  for (const ModuleLayout& m : modules) n += m.numel;
  return n;
}

std::vector<std::size_t> GptLayout::module_numels() const {
  std::vector<std::size_t> n;
  for (const ModuleLayout& m : modules) n.push_back(m.numel);
  return n;
}

std::vector<std::string> GptLayout::module_names() const {
  std::vector<std::string> n;
  for (const ModuleLayout& m : modules) n.push_back(m.name);
  return n;
}

bool GptLayout::find(const std::string& name, int* module, int* tensor) const {
  for (std::size_t m = 0; m < modules.size(); ++m) {
    for (std::size_t t = 0; t < modules[m].tensors.size(); ++t) {
      if (modules[m].tensors[t].name == name) {
        *module = static_cast<int>(m);
        *tensor = static_cast<int>(t);
        return true;
      }
    }
  }
  return false;
}

}  // namespace strata::models

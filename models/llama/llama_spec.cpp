#include "models/llama/llama_spec.h"

#include <fmt/format.h>

#include "models/param_init.h"

namespace strata::models {
namespace {

HfNaming llama_naming(const LlamaConfig& c) {
  HfNaming n;
  n.embedding = "model.embed_tokens.weight";
  n.tied_head = c.tie_word_embeddings ? "lm_head.weight" : "";
  // Older checkpoints carry the rotary frequencies as a buffer.
  n.ignored_suffixes = {".rotary_emb.inv_freq"};
  return n;
}

// Validates first: the facts of an unusable shape would mean nothing.
StackSpec::Facts llama_facts(const LlamaConfig& c) {
  c.validate();
  return {"llama", c.vocab_size, c.hidden_size, c.max_position_embeddings, "max_position_embeddings",
          c.num_params()};
}

}  // namespace

LlamaSpec::LlamaSpec(const LlamaConfig& config)
    : StackSpec(llama_facts(config), llama_naming(config)), config_(config) {}

std::string LlamaSpec::describe() const {
  const LlamaConfig& c = config_;
  const std::string mlp =
      c.moe() ? fmt::format("{} experts of {}, {} per token", c.num_experts, c.moe_intermediate_size,
                            c.num_experts_per_tok)
              : fmt::format("MLP {}", c.intermediate_size);
  const std::string active =
      c.moe() ? fmt::format(" ({:.3f} B active)", static_cast<double>(c.active_params()) / 1e9) : "";
  return fmt::format("{}: {} layers, {} channels, {} heads ({} key/value) of {}, {}, vocabulary {}{}, "
                     "{:.3f} B parameters{}",
                     c.architecture, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                     c.num_key_value_heads, c.head_dim, mlp, c.vocab_size, c.tie_word_embeddings ? " (tied)" : "",
                     static_cast<double>(c.num_params()) / 1e9, active);
}

ExpertRouting LlamaSpec::expert_routing() const {
  const LlamaConfig& c = config_;
  ExpertRouting r;
  r.active_params = c.active_params();
  if (!c.moe()) return r;
  r.experts = c.num_experts;
  r.per_token = c.num_experts_per_tok;
  for (int l = 0; l < c.num_hidden_layers; ++l) r.sparse_layers += c.sparse_layer(l) ? 1 : 0;
  return r;
}

void LlamaSpec::init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const {
  zero_gaps(module, out);
  for (const TensorSlot& t : module.tensors) {
    float* p = out + t.offset;
    if (ends_with(t.name, ".bias")) {
      fill_value(p, t.numel, 0.0f);
    } else if (ends_with(t.name, "norm.weight")) {
      fill_value(p, t.numel, 1.0f);
    } else {
      fill_normal(p, t.numel, seed, t.name, 0.02);
    }
  }
}

const Family& llama_family() {
  static const Family kFamily =
      stack_family<LlamaSpec>("llama",
                              {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                               "MixtralForCausalLM", "Qwen3MoeForCausalLM"},
                              {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe"});
  return kFamily;
}

}  // namespace strata::models

#include "models/llama/llama_layout.h"

#include <fmt/format.h>

#include "models/llama/llama_config_impl.h"

namespace strata::models {

LlamaBlockSlots LlamaBlockSlots::of(const LlamaConfig& config, bool sparse) {
  LlamaBlockSlots s;
  int i = 0;
  s.attn_norm = i++;
  s.qkv = i;
  i += 3;
  if (config.attention_bias) {
    s.qkv_bias = i;
    i += 3;
  }
  s.o_proj = i++;
  if (config.qk_norm()) {
    s.q_norm = i++;
    s.k_norm = i++;
  }
  s.mlp_norm = i++;
  if (sparse) {
    s.router = i;
  } else {
    s.gate_up = i;
    i += 2;
    s.down = i;
  }
  return s;
}

ModelLayout llama_layout(const LlamaConfig& config) {
  config.validate();
  const std::int64_t V = config.vocab_size, C = config.hidden_size, F = config.intermediate_size;
  const std::int64_t Q = static_cast<std::int64_t>(config.num_attention_heads) * config.head_dim;
  const std::int64_t KV = static_cast<std::int64_t>(config.num_key_value_heads) * config.head_dim;
  ModelLayout layout;

  ModuleLayout emb{"embedding", ModuleKind::embedding, -1, {}, 0};
  emb.add("model.embed_tokens.weight", {V, C});
  layout.modules.push_back(std::move(emb));

  constexpr bool kPacked = true;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    ModuleLayout b{fmt::format("layers.{}", l), ModuleKind::block, l, {}, 0};
    const std::string p = fmt::format("model.layers.{}.", l);
    b.add(p + "input_layernorm.weight", {C});
    b.add(p + "self_attn.q_proj.weight", {Q, C});
    b.add(p + "self_attn.k_proj.weight", {KV, C}, false, kPacked);
    b.add(p + "self_attn.v_proj.weight", {KV, C}, false, kPacked);
    if (config.attention_bias) {
      b.add(p + "self_attn.q_proj.bias", {Q});
      b.add(p + "self_attn.k_proj.bias", {KV}, false, kPacked);
      b.add(p + "self_attn.v_proj.bias", {KV}, false, kPacked);
    }
    b.add(p + "self_attn.o_proj.weight", {C, Q});
    if (config.qk_norm()) {
      b.add(p + "self_attn.q_norm.weight", {config.head_dim});
      b.add(p + "self_attn.k_norm.weight", {config.head_dim});
    }
    b.add(p + "post_attention_layernorm.weight", {C});
    if (!config.sparse_layer(l)) {
      b.add(p + "mlp.gate_proj.weight", {F, C});
      b.add(p + "mlp.up_proj.weight", {F, C}, false, kPacked);
      b.add(p + "mlp.down_proj.weight", {C, F});
      layout.modules.push_back(std::move(b));
      continue;
    }
    // Mixtral's names, or Qwen3-MoE's.
    const bool mixtral = config.architecture == llama_detail::kMixtral;
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    b.add(moe + "gate.weight", {config.num_experts, C});
    layout.modules.push_back(std::move(b));
    const std::int64_t Fe = config.moe_intermediate_size;
    for (int e = 0; e < config.num_experts; ++e) {
      ModuleLayout x{fmt::format("layers.{}.experts.{}", l, e), ModuleKind::expert, l, {}, 0};
      x.expert = e;
      const std::string q = fmt::format("{}experts.{}.", moe, e);
      x.add(q + (mixtral ? "w1.weight" : "gate_proj.weight"), {Fe, C});
      x.add(q + (mixtral ? "w3.weight" : "up_proj.weight"), {Fe, C}, false, kPacked);
      x.add(q + (mixtral ? "w2.weight" : "down_proj.weight"), {C, Fe});
      layout.modules.push_back(std::move(x));
    }
  }

  ModuleLayout head{"head", ModuleKind::head, -1, {}, 0};
  head.add("model.norm.weight", {C});
  if (!config.tie_word_embeddings) head.add("lm_head.weight", {V, C});
  layout.modules.push_back(std::move(head));
  for (ModuleLayout& m : layout.modules) m.close();
  layout.index_blocks();
  return layout;
}

}  // namespace strata::models

#pragma once
// The LLaMA family's shape (Llama 3 / 3.1 / 3.2, Mistral, Qwen2 / 2.5, Qwen3, and the
// mixtures of experts built on them: Mixtral, Qwen3-MoE), with the names of Hugging Face's
// config.json.
//
// One block: x += o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))),
// n1 = RMSNorm(x); x += mlp(n2), n2 = RMSNorm(x), with mlp(n) = down_proj(silu(gate_proj(n)) *
// up_proj(n)). Grouped-query attention (num_key_value_heads divides num_attention_heads),
// rotary embeddings in HF's rotate_half convention (kernels/host/rope.h), no biases except
// q/k/v's when attention_bias (Qwen2 always has them), the LM head tied to the embedding or not.
// Qwen3 and Qwen3-MoE normalise each head of q and k (RMSNorm over head_dim, q_norm / k_norm)
// before the rotary embedding.
//
// Mixture of experts (Note [Mixture of experts] in models/moe/moe_mlp.h): in a sparse layer
// mlp(n) = sum over the k experts the router picks of w_j expert_j(n), each expert an MLP of
// width moe_intermediate_size, the router a (num_experts, C) matrix whose softmax's top k give
// the weights (renormalised to sum 1 when norm_topk_prob). Mixtral: every layer sparse,
// renormalised. Qwen3-MoE: layer l is sparse unless l is in mlp_only_layers or (l + 1) %
// decoder_sparse_step != 0 (HF's condition); the others have the dense MLP (intermediate_size).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/host/rope.h"

namespace strata::models {

struct LlamaConfig {
  // HF's architecture: "LlamaForCausalLM", "MistralForCausalLM" or "Qwen2ForCausalLM". It
  // decides the defaults of absent keys and to_json's model_type ("llama", "mistral", "qwen2").
  std::string architecture = "LlamaForCausalLM";
  int vocab_size = 32000;
  int hidden_size = 4096;                // C
  int intermediate_size = 11008;         // F, the MLP's width
  int num_hidden_layers = 32;            // L
  int num_attention_heads = 32;          // NH
  int num_key_value_heads = 32;          // NKV (absent: NH); NH % NKV == 0
  int head_dim = 128;                    // hs (absent or null: hidden_size / NH)
  int max_position_embeddings = 2048;    // the longest sequence strata accepts
  double rope_theta = 10000.0;
  std::optional<kernels::host::RopeLlama3Scaling> rope_scaling;  // "rope_type": "llama3" only
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;      // the LM head is embed_tokens (no lm_head.weight)
  bool attention_bias = false;           // q/k/v biases (Qwen2: always true)
  int sliding_window = 0;                // Mistral's window; 0 = none. Longer sequences are refused.
  std::vector<int> eos_token_ids;        // "eos_token_id" (int or list; empty when absent)
  std::optional<int> bos_token_id;
  // Mixture of experts (MixtralForCausalLM, Qwen3MoeForCausalLM; 0 experts in the others).
  int num_experts = 0;                   // E: "num_local_experts" (Mixtral), "num_experts" (Qwen3-MoE)
  int num_experts_per_tok = 0;           // k, 1 <= k <= E
  int moe_intermediate_size = 0;         // an expert's MLP width (Mixtral: intermediate_size)
  bool norm_topk_prob = false;           // renormalise the k weights (Mixtral: always)
  int decoder_sparse_step = 1;           // Qwen3-MoE
  std::vector<int> mlp_only_layers;      // Qwen3-MoE: layers with the dense MLP
  float router_aux_loss_coef = 0.001f;   // the load-balancing loss's weight in training...
  bool output_router_logits = false;     // ...added to the loss only when this is true (HF's rule)

  // Qwen3 and Qwen3-MoE: per-head RMSNorm of q and k (fixed by the architecture).
  bool qk_norm() const;
  bool moe() const { return num_experts > 0; }
  // Layer l has experts (HF's condition above); false in a dense model.
  bool sparse_layer(int l) const;

  // Throws strata::Error naming the field when the shape is unusable (non-positive sizes, NH
  // not a multiple of NKV, odd head_dim, bad rope parameters).
  void validate() const;

  // Parameters: V*C (embedding) + (tied ? 0 : V*C) + L*(C*NH*hs + 2*C*NKV*hs + NH*hs*C + 2*C
  // + (attention_bias ? (NH + 2 NKV) hs : 0) + (qk_norm ? 2 hs : 0)) + C, plus per dense layer
  // 3*C*F and per sparse layer E*C (the router) + E*3*C*moe_intermediate_size.
  std::int64_t num_params() const;
  // The parameters one token's forward reads: num_params with k experts per sparse layer for E
  // (the router counted whole). num_params() for a dense model.
  std::int64_t active_params() const;
  // The rotary frequencies of this config (kernels::host::rope_inv_freq).
  std::vector<float> rope_inv_freq() const;

  // HF config.json text, with "architectures" naming one of the six above (or, without it,
  // "model_type" llama / mistral / qwen2 / qwen3 / mixtral / qwen3_moe). Keys that would change the math are refused with an
  // Error naming the key: hidden_act other than "silu", mlp_bias true, a rope_scaling type other
  // than llama3 (linear, dynamic, yarn, longrope, ...), Qwen2's use_sliding_window true,
  // pretraining_tp > 1, attention_dropout other than 0, Mixtral's router_jitter_noise other than 0,
  // layer_types with a sliding layer. vocab_size, hidden_size,
  // intermediate_size, num_hidden_layers and num_attention_heads are required; other absent keys
  // take the defaults of the architecture's transformers config class (table in
  // llama_config.cpp). The result is validated.
  static LlamaConfig from_json(std::string_view json_text, std::string_view where = "config.json");
  // config.json as transformers writes it for this architecture (architectures, model_type, every
  // field above; keys sorted; torch_dtype "float32"). The classes' own keys only: Qwen2 and
  // Mistral write no attention_bias (fixed by the class), Qwen2 head_dim only when it is not
  // hidden_size / NH. Validates first. from_json(to_json()) == *this.
  std::string to_json() const;

  // Presets with the published shapes (random init): llama-3.2-1b, llama-3.2-3b, llama-3-8b,
  // qwen2.5-0.5b, mistral-7b (v0.3), qwen3-8b, mixtral-8x7b, qwen3-30b-a3b, and for tests
  // llama-tiny (GQA 4:2, vocab 256, ~1M parameters), qwen3-tiny, mixtral-tiny, qwen3-moe-tiny.
  // Throws listing the names when unknown.
  static LlamaConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();

  bool operator==(const LlamaConfig&) const = default;

 private:
  void validate_experts() const;
};

}  // namespace strata::models

#pragma once
// The LLaMA family's shape (Llama 3 / 3.1 / 3.2, Mistral, Qwen2 / 2.5), with the names of
// Hugging Face's config.json.
//
// One block: x += o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))),
// n1 = RMSNorm(x); x += down_proj(silu(gate_proj(n2)) * up_proj(n2)), n2 = RMSNorm(x).
// Grouped-query attention (num_key_value_heads divides num_attention_heads), rotary embeddings
// in HF's rotate_half convention (kernels/host/rope.h), no biases except q/k/v's when
// attention_bias (Qwen2 always has them), the LM head tied to the embedding or not.
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

  // Throws strata::Error naming the field when the shape is unusable (non-positive sizes, NH
  // not a multiple of NKV, odd head_dim, bad rope parameters).
  void validate() const;

  // Parameters: V*C (embedding) + (tied ? 0 : V*C) + L*(C*NH*hs + 2*C*NKV*hs + NH*hs*C + 3*C*F
  // + 2*C + (attention_bias ? (NH + 2 NKV) hs : 0)) + C.
  std::int64_t num_params() const;
  // The rotary frequencies of this config (kernels::host::rope_inv_freq).
  std::vector<float> rope_inv_freq() const;

  // HF config.json text, with "architectures" naming one of the three above (or, without it,
  // "model_type" llama / mistral / qwen2). Keys that would change the math are refused with an
  // Error naming the key: hidden_act other than "silu", mlp_bias true, a rope_scaling type other
  // than llama3 (linear, dynamic, yarn, longrope, ...), Qwen2's use_sliding_window true,
  // pretraining_tp > 1 (and attention_dropout other than 0). vocab_size, hidden_size,
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
  // qwen2.5-0.5b, mistral-7b (v0.3), and llama-tiny (GQA 4:2, vocab 256, ~1M parameters, for
  // tests). Throws listing the names when unknown.
  static LlamaConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();

  bool operator==(const LlamaConfig&) const = default;
};

}  // namespace strata::models

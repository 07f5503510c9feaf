#pragma once
// The GPT-2 family's shape, with the names of Hugging Face's config.json.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models {

struct GptConfig {
  int vocab_size = 50257;
  int n_positions = 1024;  // the longest sequence (learned position embeddings)
  int n_embd = 768;        // C
  int n_layer = 12;        // L
  int n_head = 12;         // NH; n_embd must divide by it
  float layer_norm_epsilon = 1e-5f;

  // Throws strata::Error naming the field when the shape is unusable.
  void validate() const;

  int head_size() const { return n_embd / n_head; }
  // Parameters (the LM head is tied to the token embedding and not counted twice):
  // V*C + P*C + L*(12*C^2 + 13*C) + 2*C.
  std::int64_t num_params() const;

  // HF config.json text. Keys other than the six above are ignored, except those that would
  // change the math (activation_function other than gelu_new, tie_word_embeddings false,
  // scale_attn_weights false, ...), which are refused. The result is validated.
  static GptConfig from_json(std::string_view json_text, std::string_view where = "config.json");
  static GptConfig from_file(const std::string& path);
  std::string to_json() const;  // the six keys plus model_type and activation_function

  // Presets: gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl, and byte-level models for
  // machines without a tokenizer: tiny (vocab 256, ~0.8M), bytes-30m (vocab 256, ~32M).
  static GptConfig preset(std::string_view name);  // throws listing the names when unknown
  static std::vector<std::string> preset_names();

  bool operator==(const GptConfig&) const = default;
};

}  // namespace strata::models

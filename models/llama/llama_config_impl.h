#pragma once
// Internal to models/llama: the architectures LlamaConfig knows (llama_config.cpp validates
// them, llama_config_json.cpp reads and writes them).
#include <string_view>

namespace strata::models::llama_detail {

inline constexpr const char* kLlama = "LlamaForCausalLM";
inline constexpr const char* kMistral = "MistralForCausalLM";
inline constexpr const char* kQwen2 = "Qwen2ForCausalLM";
inline constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";

// HF's model_type of an architecture; nullptr for one strata does not know.
inline const char* model_type_of(std::string_view architecture) {
  if (architecture == kLlama) return "llama";
  if (architecture == kMistral) return "mistral";
  if (architecture == kQwen2) return "qwen2";
  return nullptr;
}

}  // namespace strata::models::llama_detail

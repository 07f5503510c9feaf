#pragma once
// Internal to models/llama: the architectures LlamaConfig knows (llama_config.cpp validates
// them, llama_config_json.cpp reads and writes them).
#include <string_view>

namespace strata::models::llama_detail {

inline constexpr const char* kLlama = "LlamaForCausalLM";
inline constexpr const char* kMistral = "MistralForCausalLM";
inline constexpr const char* kQwen2 = "Qwen2ForCausalLM";
inline constexpr const char* kQwen3 = "Qwen3ForCausalLM";
inline constexpr const char* kMixtral = "MixtralForCausalLM";
inline constexpr const char* kQwen3Moe = "Qwen3MoeForCausalLM";
inline constexpr const char* kSupported =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
    "Qwen3MoeForCausalLM";
inline constexpr const char* kArchitectures[] = {kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen3Moe};

// HF's model_type of an architecture; nullptr for one strata does not know.
inline const char* model_type_of(std::string_view architecture) {
  if (architecture == kLlama) return "llama";
  if (architecture == kMistral) return "mistral";
  if (architecture == kQwen2) return "qwen2";
  if (architecture == kQwen3) return "qwen3";
  if (architecture == kMixtral) return "mixtral";
  if (architecture == kQwen3Moe) return "qwen3_moe";
  return nullptr;
}

}  // namespace strata::models::llama_detail

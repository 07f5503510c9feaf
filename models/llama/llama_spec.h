#pragma once
// The LLaMA family as the registry sees it (models/model_spec.h, models/stack_spec.h):
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, and the mixtures of
// experts MixtralForCausalLM and Qwen3MoeForCausalLM (one family: the same attention, config
// keys and driver parts; the sparse MLP is models/moe/moe_mlp.h).
//
// Initialization (init_module), as HF's LlamaPreTrainedModel._init_weights with
// initializer_range 0.02: every Linear weight and the embedding N(0, 0.02), biases 0, RMSNorm
// weights 1.
#include <memory>

#include "models/llama/llama_config.h"
#include "models/stack_spec.h"

namespace strata::models {

class LlamaSpec final : public StackSpec {
 public:
  using Config = LlamaConfig;
  explicit LlamaSpec(const LlamaConfig& config);
  const LlamaConfig& config() const { return config_; }
  // LLaMA's parts of the block-stack driver (models/llama/llama_model.cpp).
  static std::unique_ptr<StackParts> make_parts(const LlamaConfig& config, DType dtype);

  std::string architecture() const override { return config_.architecture; }
  std::string to_json() const override { return config_.to_json(); }
  std::string describe() const override;
  std::vector<int> stop_token_ids() const override { return config_.eos_token_ids; }
  ExpertRouting expert_routing() const override;
  void init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const override;

 private:
  std::unique_ptr<StackParts> parts(DType dtype) const override { return make_parts(config_, dtype); }

  LlamaConfig config_;
};

const Family& llama_family();

}  // namespace strata::models

#pragma once
// The LLaMA family as the registry sees it (models/model_spec.h): LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM.
//
// Initialization (init_module), as HF's LlamaPreTrainedModel._init_weights with
// initializer_range 0.02: every Linear weight and the embedding N(0, 0.02), biases 0, RMSNorm
// weights 1.
#include "models/llama/llama_config.h"
#include "models/model_spec.h"

namespace strata::models {

class LlamaSpec final : public ModelSpec {
 public:
  explicit LlamaSpec(const LlamaConfig& config);
  const LlamaConfig& config() const { return config_; }

  std::string_view family() const override { return "llama"; }
  std::string architecture() const override { return config_.architecture; }
  std::string to_json() const override { return config_.to_json(); }
  std::string describe() const override;
  int vocab_size() const override { return config_.vocab_size; }
  int hidden_size() const override { return config_.hidden_size; }
  int max_positions() const override { return config_.max_position_embeddings; }
  std::string_view max_positions_key() const override { return "max_position_embeddings"; }
  std::int64_t num_params() const override { return config_.num_params(); }
  ModelLayout layout() const override;
  const HfNaming& hf_naming() const override { return naming_; }
  std::vector<int> stop_token_ids() const override { return config_.eos_token_ids; }
  std::uint64_t activation_bytes(const ModelOptions& options, int B, int T) const override;
  std::uint64_t inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                KvPlacement kv = KvPlacement::device) const override;
  KvShape kv_shape() const override;
  std::unique_ptr<Model> make_model(const ModelOptions& options, runtime::device::Device& device,
                                    runtime::device::Stream& compute,
                                    runtime::params::ParamProvider& params) const override;
  void init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const override;

 private:
  LlamaConfig config_;
  HfNaming naming_;
};

const Family& llama_family();

}  // namespace strata::models

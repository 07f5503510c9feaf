#pragma once
// The GPT-2 family as the registry sees it (models/model_spec.h).
#include "models/gpt/gpt_config.h"
#include "models/model_spec.h"

namespace strata::models {

class GptSpec final : public ModelSpec {
 public:
  explicit GptSpec(const GptConfig& config);
  const GptConfig& config() const { return config_; }

  std::string_view family() const override { return "gpt2"; }
  std::string architecture() const override { return "GPT2LMHeadModel"; }
  std::string to_json() const override { return config_.to_json(); }
  std::string describe() const override;
  int vocab_size() const override { return config_.vocab_size; }
  int hidden_size() const override { return config_.n_embd; }
  int max_positions() const override { return config_.n_positions; }
  std::string_view max_positions_key() const override { return "n_positions"; }
  std::int64_t num_params() const override { return config_.num_params(); }
  ModelLayout layout() const override;
  const HfNaming& hf_naming() const override { return naming_; }
  // GptConfig keeps no token ids: the tokenizer's or generation_config.json's end tokens apply.
  std::vector<int> stop_token_ids() const override { return {}; }
  std::uint64_t activation_bytes(const ModelOptions& options, int B, int T) const override;
  std::uint64_t inference_bytes(const ModelOptions& options, int batch, int prompt_T, int max_T,
                                KvPlacement kv = KvPlacement::device) const override;
  KvShape kv_shape() const override;
  std::unique_ptr<Model> make_model(const ModelOptions& options, runtime::device::Device& device,
                                    runtime::device::Stream& compute,
                                    runtime::params::ParamProvider& params) const override;
  void init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const override;

 private:
  GptConfig config_;
  HfNaming naming_;
};

const Family& gpt_family();

}  // namespace strata::models

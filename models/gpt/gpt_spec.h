#pragma once
// The GPT-2 family as the registry sees it (models/model_spec.h, models/stack_spec.h).
#include <memory>

#include "models/gpt/gpt_config.h"
#include "models/stack_spec.h"

namespace strata::models {

class GptSpec final : public StackSpec {
 public:
  using Config = GptConfig;
  explicit GptSpec(const GptConfig& config);
  const GptConfig& config() const { return config_; }
  // GPT-2's parts of the block-stack driver (models/gpt/gpt_model.cpp).
  static std::unique_ptr<StackParts> make_parts(const GptConfig& config, DType dtype);

  std::string architecture() const override { return "GPT2LMHeadModel"; }
  std::string to_json() const override { return config_.to_json(); }
  std::string describe() const override;
  // GptConfig keeps no token ids: the tokenizer's or generation_config.json's end tokens apply.
  std::vector<int> stop_token_ids() const override { return {}; }
  void init_module(const ModuleLayout& module, std::uint64_t seed, float* out) const override;

 private:
  std::unique_ptr<StackParts> parts(DType dtype) const override { return make_parts(config_, dtype); }

  GptConfig config_;
};

const Family& gpt_family();

}  // namespace strata::models

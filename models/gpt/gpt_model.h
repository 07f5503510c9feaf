#pragma once
// GPT-2 (models/model.h) on a runtime device: the family's parts of the block-stack driver
// (models/block_stack.h): the token and position embedding, the pre-LayerNorm block
// (attention, GELU MLP), the final LayerNorm, and the LM head tied to wte.
//
// Modules (models/gpt/gpt_layout.h): the embedding (wte, wpe) is acquired twice per forward,
// once for the embedding and once for the LM head, which is tied to wte; in backward its
// gradient is final last (after the embedding's backward).
#include <cstdint>

#include "models/block_stack.h"
#include "models/gpt/gpt_config.h"

namespace strata::models {

class GptModel final : public BlockStack {
 public:
  // `device`, `compute` and `params` are borrowed and must outlive the model. `params` must
  // have the layout's modules (module_numel(m) == layout().modules[m].numel) in options.dtype.
  GptModel(const GptConfig& config, ModelOptions options, runtime::device::Device& device,
           runtime::device::Stream& compute, runtime::params::ParamProvider& params);

  const GptConfig& config() const { return config_; }

  // Device bytes that reserve(B, T) allocates (BlockStack::activation_bytes).
  static std::uint64_t activation_bytes(const GptConfig& config, const ModelOptions& options, int B, int T);
  // Device bytes of generation (BlockStack::inference_bytes).
  static std::uint64_t inference_bytes(const GptConfig& config, const ModelOptions& options, int batch, int prompt_T,
                                       int max_T, KvPlacement kv = KvPlacement::device);
  static KvShape kv_shape(const GptConfig& config);

 private:
  GptConfig config_;
};

}  // namespace strata::models

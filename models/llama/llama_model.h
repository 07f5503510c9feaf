#pragma once
// The LLaMA family (models/model.h) on a runtime device: the family's parts of the block-stack
// driver (models/block_stack.h): RMSNorm, rotary embeddings on q and k, grouped-query
// attention, SwiGLU.
//
// Modules (models/llama/llama_layout.h). With a tied head the embedding is acquired twice per
// forward (embedding, LM head) and its gradient is final last, as GPT-2's; with an untied head
// the head module (final norm and lm_head) is held from the head's forward to its backward.
//
// Roundings follow HF's where the kernels say so (kernels/host/rmsnorm.h, rope.h, swiglu.h);
// fp32 runs match a float64 reference to ~1e-6 relative (tests/reference/llama_vs_torch.py).
#include <cstdint>

#include "models/block_stack.h"
#include "models/llama/llama_config.h"

namespace strata::models {

class LlamaModel final : public BlockStack {
 public:
  // `device`, `compute` and `params` are borrowed and must outlive the model (BlockStack).
  LlamaModel(const LlamaConfig& config, ModelOptions options, runtime::device::Device& device,
             runtime::device::Stream& compute, runtime::params::ParamProvider& params);

  const LlamaConfig& config() const { return config_; }

  // Device bytes that reserve(B, T) allocates (BlockStack::activation_bytes).
  static std::uint64_t activation_bytes(const LlamaConfig& config, const ModelOptions& options, int B, int T);
  // Device bytes of generation (BlockStack::inference_bytes).
  static std::uint64_t inference_bytes(const LlamaConfig& config, const ModelOptions& options, int batch,
                                       int prompt_T, int max_T, KvPlacement kv = KvPlacement::device);
  static KvShape kv_shape(const LlamaConfig& config);

 private:
  LlamaConfig config_;
};

}  // namespace strata::models

#pragma once
// The LLaMA family's forward, backward and KV-cached decoding (models/model.h) on a runtime
// device: RMSNorm, rotary embeddings on q and k, grouped-query attention, SwiGLU.
//
// Modules (models/llama/llama_layout.h). With a tied head the embedding is acquired twice per
// forward (embedding, LM head) and its gradient is final last, as GPT-2's; with an untied head
// the head module (final norm and lm_head) is held from the head's forward to its backward.
//
// Roundings follow HF's where the kernels say so (kernels/host/rmsnorm.h, rope.h, swiglu.h);
// fp32 runs match a float64 reference to ~1e-6 relative (tests/reference/llama_vs_torch.py).
#include <cstdint>
#include <memory>
#include <vector>

#include "models/llama/llama_config.h"
#include "models/llama/llama_layout.h"
#include "models/lm_head.h"
#include "models/model.h"
#include "models/model_parts.h"

namespace strata::models {

class LlamaModel final : public Model {
 public:
  LlamaModel(const LlamaConfig& config, ModelOptions options, runtime::device::Device& device,
             runtime::device::Stream& compute, runtime::params::ParamProvider& params);
  ~LlamaModel() override;

  const LlamaConfig& config() const { return config_; }
  const ModelLayout& layout() const override { return layout_; }
  const ModelOptions& options() const override { return options_; }

  // Device bytes that reserve(B, T) allocates (see GptModel::activation_bytes).
  static std::uint64_t activation_bytes(const LlamaConfig& config, const ModelOptions& options, int B, int T);

  // Device bytes of generation for `batch` prompts of up to prompt_T tokens and max_T positions in
  // all: the KV cache and the larger of the prefill's and a decoding step's scratch.
  static std::uint64_t inference_bytes(const LlamaConfig& config, const ModelOptions& options, int batch,
                                       int prompt_T, int max_T, KvPlacement kv = KvPlacement::device);

  void reserve(int B, int T) override;
  float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T, bool for_backward,
                float* logits_out = nullptr) override;
  void backward(float loss_scale = 1.0f) override;
  KvCache make_kv_cache(int batch, int max_T, const KvCacheOptions& kv = {}) override;
  static KvShape kv_shape(const LlamaConfig& config);
  void forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, float* logits_out) override;
  void prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
               float* last_logits) override;

 private:
  struct Activations;
  struct BlockActs;
  struct BlockParams;

  BlockParams block_params(const runtime::params::ModuleView& view) const;
  void block_forward(const BlockParams& p, const BlockActs& a, const void* res_in, void* res_out, int B, int T);
  void block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a, const void* res_in, int B,
                      int T);
  void check_length(int T) const;
  static std::vector<std::size_t> decode_sizes(const LlamaConfig& cfg, const ModelOptions& options, int B, int T_new,
                                               bool prefill);
  void decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
              float* logits_out);
  LmHeadGeometry head_geometry(std::int64_t rows) const;
  // The module whose view holds the LM head's weight: the embedding when tied, else the head.
  int head_weight_module() const;
  const TensorSlot& head_weight_slot() const;

  LlamaConfig config_;
  ModelOptions options_;
  ModelLayout layout_;
  LlamaBlockSlots slots_;
  runtime::device::Device& device_;
  runtime::device::Stream& compute_;
  ModuleAccess modules_;
  runtime::device::DeviceBuffer inv_freq_;  // (head_dim / 2) fp32, the rotary frequencies
  std::vector<float> host_inv_freq_;

  std::unique_ptr<Activations> acts_;
  int reserved_B_ = 0, reserved_T_ = 0;
  int B_ = 0, T_ = 0;  // the last forward, for backward
  bool backward_ready_ = false;
  // Held from the LM head's forward to its backward: the view of head_weight_module().
  runtime::params::ModuleView head_;
  std::vector<std::int32_t> host_tokens_;
  std::vector<float> host_losses_;
};

}  // namespace strata::models

#pragma once
// GPT-2 forward and backward (models/model.h) on a runtime device.
//
// Modules (models/gpt/gpt_layout.h): the embedding (wte, wpe) is acquired twice per forward,
// once for the embedding and once for the LM head, which is tied to wte; in backward its
// gradient is final last (after the embedding's backward).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_layout.h"
#include "models/lm_head.h"
#include "models/model.h"
#include "models/model_parts.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::models {

class GptModel final : public Model {
 public:
  // `device`, `compute` and `params` are borrowed and must outlive the model. `params` must
  // have the layout's modules (module_numel(m) == layout().modules[m].numel) in options.dtype.
  GptModel(const GptConfig& config, ModelOptions options, runtime::device::Device& device,
           runtime::device::Stream& compute, runtime::params::ParamProvider& params);
  ~GptModel() override;

  const GptConfig& config() const { return config_; }
  const ModelLayout& layout() const override { return layout_; }
  const ModelOptions& options() const override { return options_; }

  // Device bytes that reserve(B, T) allocates: activations saved for backward (all blocks, or
  // only block inputs plus one block with checkpointing), the LM head's logits chunk and
  // padded weights, per-token losses, gradient scratch and the token ids. With
  // options.vocab_multiple 0 (the device decides) it counts the larger choice, 128.
  static std::uint64_t activation_bytes(const GptConfig& config, const ModelOptions& options, int B,
                                        int T);

  // Device bytes of generation for `batch` prompts of up to prompt_T tokens and max_T positions in
  // all: the KV cache and the larger of the prefill's and a decoding step's scratch.
  static std::uint64_t inference_bytes(const GptConfig& config, const ModelOptions& options, int batch, int prompt_T,
                                       int max_T, KvPlacement kv = KvPlacement::device);

  void reserve(int B, int T) override;
  float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T,
                bool for_backward, float* logits_out = nullptr) override;
  void backward(float loss_scale = 1.0f) override;
  KvCache make_kv_cache(int batch, int max_T, const KvCacheOptions& kv = {}) override;
  static KvShape kv_shape(const GptConfig& config);
  void forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new,
                      float* logits_out) override;
  void prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
               float* last_logits) override;

 private:
  struct Activations;
  struct BlockActs;
  struct BlockParams;

  BlockParams block_params(const runtime::params::ModuleView& view) const;
  void block_forward(const BlockParams& p, const BlockActs& a, const void* res_in, void* res_out,
                     int B, int T);
  void block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a,
                      const void* res_in, int B, int T);
  LmHeadGeometry head_geometry(std::int64_t rows) const;
  static std::vector<std::size_t> decode_sizes(const GptConfig& cfg, const ModelOptions& options, int B, int T_new,
                                               bool prefill);
  void decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
              float* logits_out);

  GptConfig config_;
  ModelOptions options_;
  ModelLayout layout_;
  runtime::device::Device& device_;
  runtime::device::Stream& compute_;
  ModuleAccess modules_;

  std::unique_ptr<Activations> acts_;
  int reserved_B_ = 0, reserved_T_ = 0;
  // The last forward, for backward.
  int B_ = 0, T_ = 0;
  bool backward_ready_ = false;
  runtime::params::ModuleView head_;  // module 0 held from the LM head's forward to its backward
  std::vector<std::int32_t> host_tokens_;  // inputs then targets, kept until the copy ran
  std::vector<float> host_losses_;
};

}  // namespace strata::models

#pragma once
// GPT-2 forward and backward on a runtime device, over parameters reached only through a
// runtime::ParamProvider (runtime/params/param_provider.h): the model never knows where its
// states live.
//
// The step, on one compute stream (every op enqueued through runtime/ops):
//   forward:  embedding (acquire 0) -> blocks 1..L -> final norm -> LM head (acquire 0 again:
//             the head is tied to wte) -> softmax cross-entropy
//   backward: cross-entropy -> LM head (grads of module 0 acquired) -> final norm -> blocks
//             L..1 -> embedding; grads_ready(m) after each module's last contribution, so
//             module 0's gradient is final last.
// Activations (and, with checkpointing, the one block being recomputed), logits and scratch
// live in one device-arena allocation made by reserve(); activation_bytes() says how big it
// is, so that a plan can count it before anything is allocated.
//
// Threading: a GptModel is used by one thread at a time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_layout.h"
#include "models/gpt/lm_head.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::models {

struct GptOptions {
  DType dtype = DType::f32;    // storage of parameters, activations and gradients
  bool checkpointing = false;  // keep only each block's input; recompute the block in backward
  // The LM head (models/gpt/lm_head.h) pads the vocabulary to a multiple of this on the device
  // (aligned GEMMs); 0 = the device's choice (vocab_multiple_for), resolved by the model. It
  // holds at most head_chunk_bytes of logits at once.
  int vocab_multiple = 0;
  std::uint64_t head_chunk_bytes = std::uint64_t{1} << 30;
};

// 128 on CUDA, where cuBLAS runs the head's GEMMs on its fast kernels only for aligned sizes; 1
// on the host backend, where padding buys nothing and its copy of wte costs ~4 % of a GPT-2
// step (docs/benchmarks.md). The padded path is tested on the host with vocab_multiple = 128.
int vocab_multiple_for(runtime::device::Backend backend);

// Keys and values of every layer for incremental decoding: (B, max_T, C) per layer, in the
// model's dtype, from the device arena.
class GptKvCache {
 public:
  GptKvCache(runtime::device::Device& device, const GptConfig& config, DType dtype, int batch, int max_T);
  int batch() const { return batch_; }
  int max_T() const { return max_T_; }
  int length() const { return length_; }  // positions filled so far
  void reset() { length_ = 0; }
  static std::uint64_t bytes(const GptConfig& config, DType dtype, int batch, int max_T);

 private:
  friend class GptModel;
  int batch_;
  int max_T_;
  int length_ = 0;
  std::vector<runtime::device::DeviceBuffer> k_, v_;  // one per layer
};

class GptModel {
 public:
  // `device`, `compute` and `params` are borrowed and must outlive the model. `params` must
  // have the layout's modules (module_numel(m) == layout().modules[m].numel) in options.dtype.
  GptModel(const GptConfig& config, GptOptions options, runtime::device::Device& device,
           runtime::device::Stream& compute, runtime::params::ParamProvider& params);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const GptLayout& layout() const { return layout_; }
  const GptOptions& options() const { return options_; }

  // Device bytes that reserve(B, T) allocates: activations saved for backward (all blocks, or
  // only block inputs plus one block with checkpointing), the LM head's logits chunk and
  // padded weights, per-token losses, gradient scratch and the token ids. With
  // options.vocab_multiple 0 (the device decides) it counts the larger choice, 128.
  static std::uint64_t activation_bytes(const GptConfig& config, const GptOptions& options, int B,
                                        int T);

  // Allocates the activations for micro-batches up to (B, T) (OutOfMemory naming them when the
  // arena is too small). forward() reserves on first use.
  void reserve(int B, int T);

  // Runs the forward pass on host token ids `inputs` (B*T, values in [0, vocab_size)), and
  // returns the mean cross-entropy over `targets` (B*T), or NaN without targets. With
  // `for_backward`, the state backward() needs is kept (targets required). `logits_out`, when
  // given, receives the (B, T, V) logits as fp32. Blocks until the loss is known. Throws
  // strata::Error for tokens out of range or T > n_positions.
  float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T,
                bool for_backward, float* logits_out = nullptr);

  // Backward of the last forward (which had for_backward): accumulates (+=) into the
  // gradient views of the provider. d(loss)/d(logits) is scaled by loss_scale (fp16 loss
  // scaling; 1 otherwise). Returns after enqueueing; the provider's grads_ready events say
  // when each module's gradient is final.
  void backward(float loss_scale = 1.0f);

  // Incremental decoding: runs `tokens` (B, T_new) at positions [cache.length(), +T_new),
  // appends their keys / values to the cache and writes the (B, T_new, V) logits as fp32 to
  // logits_out. B must equal cache.batch(). Blocks until the logits are copied.
  void forward_decode(GptKvCache& cache, const std::int32_t* tokens, int B, int T_new,
                      float* logits_out);

 private:
  struct Activations;
  struct BlockActs;
  struct BlockParams;

  runtime::params::ModuleView acquire(int module);
  void release(int module);
  runtime::params::ModuleView acquire_grads(int module);
  void grads_ready(int module);
  BlockParams block_params(const runtime::params::ModuleView& view) const;
  void block_forward(const BlockParams& p, const BlockActs& a, const void* res_in, void* res_out,
                     int B, int T);
  void block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a,
                      const void* res_in, int B, int T);
  void check_tokens(const std::int32_t* tokens, std::size_t n, const char* what) const;
  LmHeadGeometry head_geometry(std::int64_t rows) const;

  GptConfig config_;
  GptOptions options_;
  GptLayout layout_;
  runtime::device::Device& device_;
  runtime::device::Stream& compute_;
  runtime::params::ParamProvider& params_;
  std::unique_ptr<runtime::device::Event> done_;  // recorded before each release / grads_ready

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

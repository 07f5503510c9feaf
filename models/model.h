#pragma once
// A model of any family (models/registry.h) on a runtime device: forward, backward and KV-cached
// decoding over parameters reached only through a runtime::ParamProvider
// (runtime/params/param_provider.h), so that the model never knows where its states live.
//
// Every family follows the same protocol, on one compute stream (every op enqueued through
// runtime/ops), over the modules of its ModelLayout (models/model_layout.h):
//   forward:  embedding -> blocks 1..L -> head (final norm, LM head) -> softmax cross-entropy
//   backward: cross-entropy -> head -> blocks L..1 -> embedding; grads_ready(m) after each
//             module's last contribution (module 0's last when the head is tied to it).
// Activations (and, with checkpointing, the one block being recomputed), logits and scratch live
// in one device-arena allocation made by reserve(); ModelSpec::activation_bytes says how big it
// is, so that a plan can count it before anything is allocated.
//
// Threading: a Model is used by one thread at a time.
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "models/kv_cache.h"
#include "models/model_layout.h"
#include "runtime/device/device.h"

namespace strata::models {

struct ModelOptions {
  DType dtype = DType::f32;    // storage of parameters, activations and gradients
  bool checkpointing = false;  // keep only each block's input; recompute the block in backward
  // The LM head (models/lm_head.h) pads the vocabulary to a multiple of this on the device
  // (aligned GEMMs); 0 = the device's choice (vocab_multiple_for), resolved by the model. It
  // holds at most head_chunk_bytes of logits at once.
  int vocab_multiple = 0;
  std::uint64_t head_chunk_bytes = std::uint64_t{1} << 30;
  // Decoding a mixture of experts (models/moe/moe_mlp.h): once a layer's experts are hinted, run
  // the next sparse layer's router on the layer's input and hint the experts it picks to the
  // provider (ParamProvider::prefetch) behind them, withdrawn (cancel_prefetch) where the next
  // router disagrees (Note [Guessing the next layer's experts] in models/moe/moe_mlp.cpp); only
  // where the next block is resident, and not for a batch expected to pick most experts. A
  // wrong guess costs bytes, never tokens: the real router decides what is computed.
  bool moe_lookahead = false;
  // A mixture's routed expert with at most this many rows (tokens) routed to it, that the
  // provider keeps in pinned host memory and has not fetched (ParamProvider::acquire_host), is
  // computed on the host where it lives instead of copied to the device: its rows go to the host
  // and its outputs come back (models/moe/moe_mlp.h). 0 = never (the default); strata infer's
  // --moe-cpu-experts on is every row count, auto the count a machine profile says pays
  // (runtime/estimate/cpu_experts.h).
  std::int64_t moe_cpu_expert_rows = 0;
  // Fetch every expert of a sparse layer each pass whatever its router picked, and compute only
  // the picked ones: how a dense streaming engine (DeepSpeed's ZeRO-Inference) moves a mixture,
  // the baseline for the bytes routing saves (strata infer --moe-fetch all). Same tokens.
  bool moe_fetch_every_expert = false;
};

// 128 on CUDA, where cuBLAS runs the head's GEMMs on its fast kernels only for aligned sizes; 1
// on the host backend, where padding buys nothing and its copy of the head costs ~4 % of a GPT-2
// step (docs/benchmarks.md). The padded path is tested on the host with vocab_multiple = 128.
int vocab_multiple_for(runtime::device::Backend backend);

// `options` with vocab_multiple 0 replaced by the backend's choice; throws strata::Error for a
// negative one. Sizing before a device exists passes Backend::cuda: it counts the larger choice.
ModelOptions resolved_options(ModelOptions options, runtime::device::Backend backend);

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual const ModelLayout& layout() const = 0;
  virtual const ModelOptions& options() const = 0;

  // Allocates the activations for micro-batches up to (B, T) (OutOfMemory naming them when the
  // arena is too small). forward() reserves on first use.
  virtual void reserve(int B, int T) = 0;

  // Runs the forward pass on host token ids `inputs` (B*T, values in [0, vocab_size)), and
  // returns the mean cross-entropy over `targets` (B*T), or NaN without targets. With
  // `for_backward`, the state backward() needs is kept (targets required), and the loss is the
  // training loss: with a mixture of experts whose config has output_router_logits, the mean
  // cross-entropy plus router_aux_loss_coef x the load-balancing loss, as HF trains it
  // (models/moe/moe_mlp.h); backward() differentiates that. `logits_out`, when
  // given, receives the (B, T, V) logits as fp32. Blocks until the loss is known. Throws
  // strata::Error for tokens out of range or T longer than the model allows.
  virtual float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T,
                        bool for_backward, float* logits_out = nullptr) = 0;

  // Backward of the last forward (which had for_backward): accumulates (+=) into the gradient
  // views of the provider. d(loss)/d(logits) is scaled by loss_scale (fp16 loss scaling; 1
  // otherwise). Returns after enqueueing; the provider's grads_ready events say when each
  // module's gradient is final.
  virtual void backward(float loss_scale = 1.0f) = 0;

  // A KV cache (models/kv_cache.h) for `batch` sequences of up to max_T positions (at most the
  // model's longest), on the device or in pinned host memory (`kv`).
  virtual KvCache make_kv_cache(int batch, int max_T, const KvCacheOptions& kv = {}) = 0;

  // Incremental decoding: runs `tokens` (B, T_new) of row b at positions [cache.length(b),
  // + T_new), appends their keys / values to the cache and writes the (B, T_new, V) logits as
  // fp32 to logits_out. B must equal cache.batch(). Blocks until the logits are copied.
  virtual void forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new,
                              float* logits_out) = 0;

  // The prompts of a batch at once, after what each row holds (an empty cache for a whole
  // prompt; a row already holding the first chunks of a long prompt for its next chunk):
  // `tokens` (B, T) holds row b's lengths[b] (1..T) tokens then padding (any valid token: causal
  // attention keeps the real tokens from seeing it). Adds lengths[b] to row b's length and writes
  // the logits of each row's last real token, (B, V) fp32, to last_logits. Blocks until they are
  // copied.
  virtual void prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
                       float* last_logits) = 0;

 protected:
  Model() = default;
};

}  // namespace strata::models

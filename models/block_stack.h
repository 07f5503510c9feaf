#pragma once
// The one driver of every model family (models/model.h): forward, backward with activation
// checkpointing, prefill and KV-cached decoding over a stack of blocks, through the
// ParamProvider (runtime/params/param_provider.h) on one compute stream.
//
// The driver owns the order in which modules are acquired, computed, released and reported
// (grads_ready), the activation allocation and its accounting, the LM head and its loss
// (models/lm_head.h), the token staging and the decode pass over the KV cache. A family owns
// the math of its parts and the named buffers they keep, through StackParts (below):
//
//   forward:  embed -> block_forward x L -> final_norm -> LM head (driver) -> losses
//   backward: LM head (driver) -> final_norm_backward -> [block_forward again when
//             checkpointing] block_backward x L..1 -> embed_backward
//   decode:   embed -> block_decode x L (attention over the KV cache) -> final_norm -> LM head
//
// How a family plugs in. A family is a folder (models/gpt/, models/llama/) with its config,
// its layout (models/model_layout.h: 0 embedding, 1..L blocks, L + 1 head), a StackParts
// implementation and a StackSpec (models/stack_spec.h) that makes them; then one line in
// models/registry.cpp (stack_family<Spec>). The driver never names a tensor: the parts turn a module's
// view into the family's own named parameter struct, and carve their own named activation and
// scratch structs when the driver hands them the Carver (the order is fixed below, so that
// activation_bytes / inference_bytes are the same sum the allocations make).
//
// Blocks that span more modules (an MoE layer: attention and router, then one module per
// expert, models/moe/moe_mlp.h). The driver acquires the block's module
// (ModelLayout::block_module(l)) around each block call and passes the call's ModuleAccess in
// BlockCall: a block that needs more modules (the experts its router picked) acquires, releases
// and reports them itself through it, in the order it computes, with the same protocol
// (ModuleAccess, models/model_parts.h), reporting grads_ready for every module it owns in each
// backward. A family's own loss terms (the load-balancing loss) join the training loss through
// extra_loss / begin_backward.
//
// Decoding with a tied head releases the head module as soon as the final norm has read it,
// before a prefill gathers each row's last token: the module goes back as early as it can.
//
// Threading: one thread at a time, as every Model.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "models/kv_cache.h"
#include "models/lm_head.h"
#include "models/model.h"
#include "models/model_layout.h"
#include "models/model_parts.h"
#include "runtime/device/device.h"
#include "runtime/params/param_provider.h"

namespace strata::models {

// One call of a block: the layer, its parameters (and gradients in backward), already waited
// on by the compute stream, and the pass's shape: B rows of T tokens (T_new when decoding).
struct BlockCall {
  runtime::device::Stream& compute;
  ModuleAccess& modules;                      // for blocks over more modules (above)
  int layer;
  const runtime::params::ModuleView& params;  // module block_module(layer)
  const runtime::params::ModuleView* grads;   // its gradient view in backward, else null
  int B;
  int T;
};

// What a family supplies. Buffers named in a part's own structs are carved by the driver's
// Carver at the part's turn; with a measuring Carver (base null) they are null and the part
// must not use them. Every op goes on the stream given (the model's compute stream).
class StackParts {
 public:
  virtual ~StackParts() = default;
  StackParts(const StackParts&) = delete;
  StackParts& operator=(const StackParts&) = delete;

  virtual const ModelLayout& layout() const = 0;
  virtual int width() const = 0;  // C, the residual stream's
  virtual int vocab() const = 0;  // V
  virtual int layers() const = 0;  // L
  // The LM head's weight (V, C): the embedding's tensor when tied, else one of the head's.
  virtual bool tied_head() const = 0;
  virtual const TensorSlot& head_weight_slot() const = 0;
  virtual KvShape kv_shape() const = 0;
  // Throw strata::Error when a pass of T tokens (a KV cache of max_T positions) is longer than
  // the model allows.
  virtual void check_length(int T) const = 0;
  virtual void check_cache_length(int max_T) const { check_length(max_T); }
  // Device state the parts keep for the model's life (LLaMA's rotary frequencies), made once
  // when the model is, after its module access, with the model's resolved options; none by
  // default.
  virtual void attach(runtime::device::Device& /*device*/, runtime::device::Stream& /*compute*/,
                      const ModelOptions& /*options*/) {}

  // ---- Training storage. reserve(B, T) carves one allocation, BT = B*T, in this order:
  //   residual stream, L + 1 of (BT, C)                                   driver
  //   carve_blocks: `saved` blocks' activations (L, or 1 with checkpointing) and the blocks'
  //                 forward scratch                                       family
  //   the final norm's output (BT, C)                                     driver
  //   carve_final_norm: what its backward needs (statistics)             family
  //   the LM head's buffers, losses (BT) fp32, dres (BT, C), dx (BT, grad_width())  driver
  //   carve_block_grads: the blocks' gradient scratch                    family
  //   token ids: inputs, targets (BT) int32                               driver
  virtual void carve_blocks(Carver& c, int B, int T, int saved) = 0;
  virtual void carve_final_norm(Carver& c, std::size_t BT) = 0;
  virtual std::size_t grad_width() const = 0;  // >= C: dx is also the blocks' scratch
  virtual void carve_block_grads(Carver& c, int B, int T) = 0;

  // ---- Decoding storage, carved per pass of (B, T_new) tokens:
  //   x (BT, C) the residual stream, n (BT, C) a norm's output          driver
  //   carve_decode: the block's decoding scratch                         family
  //   the LM head's logits chunk and padded weight, token ids, a prefill's last tokens  driver
  virtual void carve_decode(Carver& c, int B, int T_new) = 0;

  // ---- Compute.
  // x (B*T, C) = the embedding of tokens (B, T) (device ids); with `cache`, row b's tokens
  // stand at positions cache->length(b) onwards, else at 0 onwards.
  virtual void embed(runtime::device::Stream& s, const runtime::params::ModuleView& emb, void* x,
                     const std::int32_t* tokens, int B, int T, const KvCache* cache) = 0;
  // grads += d(embedding) from dx (B*T, C).
  virtual void embed_backward(runtime::device::Stream& s, const runtime::params::ModuleView& grads,
                              const void* dx, const std::int32_t* tokens, int B, int T) = 0;
  // res_out (BT, C) = block(res_in), keeping what backward needs in saved block `saved`.
  virtual void block_forward(const BlockCall& call, int saved, const void* res_in, void* res_out) = 0;
  // On entry dres holds d(block output), on exit d(block input); gradients accumulate (+=) into
  // call.grads. dx (BT, grad_width()) is scratch.
  virtual void block_backward(const BlockCall& call, int saved, const void* res_in, void* dres, void* dx) = 0;
  // x (B*T_new, C) = block(x) in place at the cache's positions: the block calls
  // cache.begin_layer(call.layer) before its attention and end_layer after. n (B*T_new, C) is
  // scratch.
  virtual void block_decode(const BlockCall& call, KvCache& cache, void* x, void* n) = 0;
  // out (rows, C) = final_norm(in), with the statistics its backward needs when `save` (into
  // carve_final_norm's buffers; rows is then BT of the reserve).
  virtual void final_norm(runtime::device::Stream& s, const runtime::params::ModuleView& head, void* out,
                          const void* in, std::int64_t rows, bool save) = 0;
  // dres (rows, C) += d(final norm input) from dout; grads += its parameters' gradients.
  virtual void final_norm_backward(runtime::device::Stream& s, const runtime::params::ModuleView& head,
                                   const runtime::params::ModuleView& grads, void* dres, const void* dout,
                                   const void* in, std::int64_t rows) = 0;

  // ---- The family's training-loss terms beyond the mean cross-entropy (a mixture of experts'
  // load-balancing loss), from what the last forward's blocks recorded over B*T tokens: added to
  // a forward-for-backward's loss once its stream work is complete. 0 by default.
  virtual double extra_loss(int /*B*/, int /*T*/) { return 0.0; }
  // Before a backward's first block, with its loss scale (the blocks add loss_scale x
  // d(extra_loss)); nothing by default.
  virtual void begin_backward(runtime::device::Stream& /*s*/, float /*loss_scale*/, int /*B*/, int /*T*/) {}

 protected:
  StackParts() = default;
};

class BlockStack : public Model {
 public:
  // `device`, `compute` and `params` are borrowed and must outlive the model. `params` must
  // have the layout's modules (module_numel(m) == layout().modules[m].numel) in options.dtype.
  BlockStack(std::unique_ptr<StackParts> parts, ModelOptions options, runtime::device::Device& device,
             runtime::device::Stream& compute, runtime::params::ParamProvider& params);
  ~BlockStack() override;

  const ModelLayout& layout() const override { return parts_->layout(); }
  const ModelOptions& options() const override { return options_; }

  // Device bytes that reserve(B, T) allocates for `parts` (in options.dtype): activations
  // saved for backward (all blocks, or only block inputs plus one block with checkpointing),
  // the LM head's logits chunk and padded weights, per-token losses, gradient scratch and the
  // token ids. With options.vocab_multiple 0 (the device decides) it counts the larger, 128.
  static std::uint64_t activation_bytes(StackParts& parts, const ModelOptions& options, int B, int T);
  // Device bytes of generation for `batch` prompts of up to prompt_T tokens and max_T positions in
  // all: the KV cache and the larger of the prefill's and a decoding step's scratch.
  static std::uint64_t inference_bytes(StackParts& parts, const ModelOptions& options, int batch, int prompt_T,
                                       int max_T, KvPlacement kv);

  void reserve(int B, int T) override;
  float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T, bool for_backward,
                float* logits_out = nullptr) override;
  void backward(float loss_scale = 1.0f) override;
  KvCache make_kv_cache(int batch, int max_T, const KvCacheOptions& kv = {}) override;
  void forward_decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, float* logits_out) override;
  void prefill(KvCache& cache, const std::int32_t* tokens, const int* lengths, int B, int T,
               float* last_logits) override;

 protected:
  StackParts& parts() { return *parts_; }

 private:
  struct Activations;
  struct DecodeBuffers;

  LmHeadGeometry head_geometry(std::int64_t rows) const;
  // The module whose view holds the LM head's weight: the embedding when tied, else the head.
  int head_weight_module() const;
  BlockCall block_call(int layer, const runtime::params::ModuleView& view,
                       const runtime::params::ModuleView* grads, int B, int T);
  int saved_block(int layer) const { return options_.checkpointing ? 0 : layer; }
  void decode(KvCache& cache, const std::int32_t* tokens, int B, int T_new, const int* last_of_row,
              float* logits_out);

  std::unique_ptr<StackParts> parts_;
  ModelOptions options_;
  runtime::device::Device& device_;
  runtime::device::Stream& compute_;
  ModuleAccess modules_;

  std::unique_ptr<Activations> acts_;
  int reserved_B_ = 0, reserved_T_ = 0;
  int B_ = 0, T_ = 0;  // the last forward, for backward
  bool backward_ready_ = false;
  // Held from the LM head's forward to its backward: the view of head_weight_module().
  runtime::params::ModuleView head_;
  std::vector<std::int32_t> host_tokens_;  // inputs then targets, kept until the copy ran
  std::vector<float> host_losses_;
};

}  // namespace strata::models

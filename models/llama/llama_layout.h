#pragma once
// The LLaMA family's modules (models/model_layout.h), with HF's full tensor names:
//   embedding  model.embed_tokens.weight (V, C)
//   block l    "layers.{l}": input_layernorm (C); q_proj (NH hs, C), k_proj (NKV hs, C) and
//              v_proj (NKV hs, C) packed: one (NH + 2 NKV) hs x C matrix, the packed qkv of
//              kernels/host/attention.h; their biases, packed the same way, when the config has
//              them; o_proj (C, NH hs); q_norm (hs) and k_norm (hs) with qk_norm (Qwen3);
//              post_attention_layernorm (C); then
//                dense: mlp.gate_proj (F, C) and mlp.up_proj (F, C) packed: one (2F, C) matrix,
//                       the [gate | up] rows kernels/host/swiglu.h takes; mlp.down_proj (C, F)
//                sparse: the router (E, C): Mixtral's block_sparse_moe.gate, Qwen3-MoE's mlp.gate
//   expert e   "layers.{l}.experts.{e}", after a sparse layer's block, one module per expert:
//              its gate (Fe, C) and up (Fe, C) packed as [gate | up], its down (C, Fe) (the
//              tensors kExpertGateUp and kExpertDown of models/moe/moe_mlp.h):
//              Mixtral's block_sparse_moe.experts.{e}.w1 / w3 / w2, Qwen3-MoE's
//              mlp.experts.{e}.gate_proj / up_proj / down_proj
//   head       model.norm.weight (C), and lm_head.weight (V, C) unless it is tied
// No tensor is transposed: HF's Linear weights are (out, in) already.
#include "models/llama/llama_config.h"
#include "models/model_layout.h"

namespace strata::models {

// Where a block's tensors are in ModuleLayout::tensors (the same in every dense block, and in
// every sparse one).
struct LlamaBlockSlots {
  int attn_norm = -1;
  int qkv = -1;       // q_proj.weight, the first of the packed three
  int qkv_bias = -1;  // q_proj.bias, the first of the packed three; -1 without biases
  int o_proj = -1;
  int q_norm = -1;    // -1 without qk_norm
  int k_norm = -1;
  int mlp_norm = -1;
  int gate_up = -1;   // gate_proj.weight, the first of the packed two; -1 in a sparse block
  int down = -1;      // -1 in a sparse block
  int router = -1;    // -1 in a dense block

  static LlamaBlockSlots of(const LlamaConfig& config, bool sparse);
};


ModelLayout llama_layout(const LlamaConfig& config);

}  // namespace strata::models

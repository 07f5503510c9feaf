#pragma once
// The LLaMA family's modules (models/model_layout.h), with HF's full tensor names:
//   0          embedding: model.embed_tokens.weight (V, C)
//   1 .. L     block i-1, "layers.{i-1}": input_layernorm (C); q_proj (NH hs, C), k_proj
//              (NKV hs, C) and v_proj (NKV hs, C) packed: one (NH + 2 NKV) hs x C matrix, the
//              packed qkv of kernels/host/attention.h; their biases, packed the same way, when
//              the config has them; o_proj (C, NH hs); post_attention_layernorm (C);
//              mlp.gate_proj (F, C) and mlp.up_proj (F, C) packed: one (2F, C) matrix, the
//              [gate | up] rows kernels/host/swiglu.h takes; mlp.down_proj (C, F)
//   L + 1      head: model.norm.weight (C), and lm_head.weight (V, C) unless it is tied
// No tensor is transposed: HF's Linear weights are (out, in) already.
#include "models/llama/llama_config.h"
#include "models/model_layout.h"

namespace strata::models {

// Where a block's tensors are in ModuleLayout::tensors (the same in every block).
struct LlamaBlockSlots {
  int attn_norm = -1;
  int qkv = -1;       // q_proj.weight, the first of the packed three
  int qkv_bias = -1;  // q_proj.bias, the first of the packed three; -1 without biases
  int o_proj = -1;
  int mlp_norm = -1;
  int gate_up = -1;   // gate_proj.weight, the first of the packed two
  int down = -1;

  static LlamaBlockSlots of(const LlamaConfig& config);
};

ModelLayout llama_layout(const LlamaConfig& config);

}  // namespace strata::models

#pragma once
// GPT-2's modules (models/model_layout.h), in forward order:
//   0          embedding: wte (V, C), wpe (P, C)          (wte is also the tied LM head)
//   1 .. L     block i-1: ln_1 w/b (C), attn.c_attn w (3C, C) b (3C), attn.c_proj w (C, C)
//              b (C), ln_2 w/b (C), mlp.c_fc w (4C, C) b (4C), mlp.c_proj w (C, 4C) b (C)
//   L + 1      head: ln_f w/b (C)
// Hugging Face's GPT-2 stores its Conv1D weights (in, out), so those are transposed on the way
// in and out (models/hf_weights.h). Names are HF's without "transformer.".
#include "models/gpt/gpt_config.h"
#include "models/model_layout.h"

namespace strata::models {

// Indices of a block's tensors in ModuleLayout::tensors.
enum BlockTensor : int {
  kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW,
  kFcProjB, kBlockTensors
};
enum EmbeddingTensor : int { kWte, kWpe };
enum FinalNormTensor : int { kLnfW, kLnfB };

ModelLayout gpt_layout(const GptConfig& config);

}  // namespace strata::models

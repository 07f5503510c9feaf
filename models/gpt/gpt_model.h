#pragma once
// GPT-2 (models/model.h) on a runtime device: the family's parts of the block-stack driver
// (models/block_stack.h), in gpt_model.cpp: the token and position embedding, the
// pre-LayerNorm block (attention, GELU MLP), the final LayerNorm, and the LM head tied to wte.
//
// Modules (models/gpt/gpt_layout.h): the embedding (wte, wpe) is acquired twice per forward,
// once for the embedding and once for the LM head, which is tied to wte; in backward its
// gradient is final last (after the embedding's backward).
#include "models/gpt/gpt_spec.h"
#include "models/stack_spec.h"

namespace strata::models {

// GptModel(config, options, device, compute, params); GptModel::activation_bytes(config, ...).
using GptModel = FamilyModel<GptSpec>;

}  // namespace strata::models

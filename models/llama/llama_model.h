#pragma once
// The LLaMA family (models/model.h) on a runtime device: the family's parts of the block-stack
// driver (models/block_stack.h), in llama_model.cpp: RMSNorm, rotary embeddings on q and k,
// grouped-query attention, SwiGLU.
//
// Modules (models/llama/llama_layout.h). With a tied head the embedding is acquired twice per
// forward (embedding, LM head) and its gradient is final last, as GPT-2's; with an untied head
// the head module (final norm and lm_head) is held from the head's forward to its backward.
//
// Roundings follow HF's where the kernels say so (kernels/host/rmsnorm.h, rope.h, swiglu.h);
// fp32 runs match a float64 reference to ~1e-6 relative (tests/reference/llama_vs_torch.py).
#include "models/llama/llama_spec.h"
#include "models/stack_spec.h"

namespace strata::models {

// LlamaModel(config, options, device, compute, params); LlamaModel::activation_bytes(config, ...).
using LlamaModel = FamilyModel<LlamaSpec>;

}  // namespace strata::models

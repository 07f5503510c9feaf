#pragma once
// GPT-2's initialization (as HF's GPT2PreTrainedModel._init_weights): weights N(0, 0.02), the
// residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm
// weights 1. Deterministic and independent of the thread count: element i of a tensor is a
// function of (seed, tensor name, i) only (a counter-based generator), so a module can be
// initialized alone, on any rank, in any order.
#include <cstdint>

#include "models/gpt/gpt_config.h"
#include "models/model_layout.h"

namespace strata::models {

// Fills out[0, module.numel) (fp32, host memory) with the initial values of `module`;
// alignment gaps are zero.
void init_module(const GptConfig& config, const ModuleLayout& module, std::uint64_t seed,
                 float* out);

}  // namespace strata::models

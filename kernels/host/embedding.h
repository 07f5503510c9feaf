#pragma once
// Token + position embedding (GPT-2's wte / wpe), forward and backward.
// Shapes are in comments as (B, T, C); tensors are contiguous, row-major, in `dtype` (fp32, or
// bf16 / fp16 storage with fp32 arithmetic) unless a parameter says otherwise.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[pos_offset + t,:]
// out (B,T,C), tokens (B,T) int32 in [0, V), wte (V,C), wpe (n_positions,C);
// pos_offset + T <= n_positions (pos_offset > 0 when decoding after a KV-cached prefix).
// wpe null: no position embedding (the LLaMA family), out = wte[tokens].
// The caller validates the tokens (out-of-range tokens are a STRATA_ASSERT on the host).
void embedding_fwd(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                   int B, int T, int C, int pos_offset, DType dtype);

// dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += sum over b of dout[b,t,:]
// dout (B,T,C), dwte (V,C), dwpe (n_positions,C). Accumulates (+=) into the gradients; either
// may be null (not computed).
// Deterministic: every row is accumulated in the order (b, t) with fp32 sums, whatever the
// thread count.
void embedding_bwd(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, int B,
                   int T, int C, DType dtype);

}  // namespace strata::kernels::host

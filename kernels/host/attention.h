#pragma once
// Causal multi-head self-attention (GPT-2), forward, backward and KV-cached decoding.
//
// qkv (B,T,3C) is the output of the c_attn matmul: for token (b,t) the channels are
// [q (C) | k (C) | v (C)], and head h owns channels [h*hs, (h+1)*hs) of each, hs = C / NH.
// Scores are q.k / sqrt(hs) with the causal mask (token t sees tokens 0..t), softmax in fp32.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out (B,T,C): for each head, softmax(q k^T / sqrt(hs) + mask) v, heads concatenated.
// lse (B,NH,T) fp32: the log-sum-exp of each row of scaled, masked scores, saved so that the
// backward recomputes the probabilities instead of storing (B,NH,T,T); may be null.
void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                   DType dtype);

// dqkv (B,T,3C) is overwritten with the gradient of q, k and v, from dout (B,T,C), the
// forward's qkv, out and lse. Deterministic.
void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int C, int NH, DType dtype);

// Incremental decoding. k_cache, v_cache (B, max_T, C) hold the keys and values of positions
// [0, past); the T_new new tokens' k and v (from qkv (B,T_new,3C)) are written at positions
// [past, past + T_new), then out (B,T_new,C) is computed with new token t attending to
// positions [0, past + t]. past + T_new <= max_T. With past = 0 and T_new = T, out equals
// attention_fwd's up to rounding.
void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int C, int NH, DType dtype);

}  // namespace strata::kernels::host

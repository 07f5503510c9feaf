#pragma once
// Causal self-attention with grouped-query heads (GPT-2 is the case NKV = NH), forward,
// backward and KV-cached decoding.
//
// qkv (B, T, (NH + 2 NKV) hs) is the output of the c_attn matmul: for token (b, t) the channels
// are [q (NH hs) | k (NKV hs) | v (NKV hs)]; query head h owns channels [h hs, (h+1) hs) of q
// and uses key/value head h / (NH / NKV) (consecutive query heads share a key/value head).
// NKV = NH is GPT-2's layout (B, T, 3C) with C = NH hs; NKV = 1 is multi-query attention.
// Scores are q.k / sqrt(hs) with the causal mask (token t sees tokens 0..t), softmax in fp32.
// NH % NKV != 0 is a strata::Error.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out (B, T, NH hs): for each query head, softmax(q k^T / sqrt(hs) + mask) v, heads
// concatenated. lse (B, NH, T) fp32: the log-sum-exp of each row of scaled, masked scores,
// saved so that the backward recomputes the probabilities instead of storing (B, NH, T, T);
// may be null.
void attention_fwd(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV, int hs,
                   DType dtype);

// dqkv (B, T, (NH + 2 NKV) hs), qkv's layout, is overwritten with the gradient of q, k and v,
// from dout (B, T, NH hs), the forward's qkv, out and lse. The gradient of a key/value head
// sums over its query heads in order (h = g r, g r + 1, ...). Deterministic.
void attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out,
                   const float* lse, int B, int T, int NH, int NKV, int hs, DType dtype);

// Incremental decoding. k_cache, v_cache (B, max_T, NKV hs) hold the keys and values of
// positions [0, past); the T_new new tokens' k and v (from qkv (B, T_new, (NH + 2 NKV) hs))
// are written at positions [past, past + T_new), then out (B, T_new, NH hs) is computed with
// new token t attending to positions [0, past + t]. past + T_new <= max_T. With past = 0 and
// T_new = T, out equals attention_fwd's bit for bit.
void attention_decode(void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                      int T_new, int past, int max_T, int NH, int NKV, int hs, DType dtype);

}  // namespace strata::kernels::host

#pragma once
// Qwen3's per-head RMSNorm of the queries and keys, forward and backward: HF's
// Qwen3RMSNorm(head_dim) applied to q_proj(x).view(..., hs) and k_proj(x).view(..., hs) before
// RoPE. Every head of q shares one weight q_weight (hs), every head of k one weight k_weight.
//
// qkv (N, (NH + 2 NKV) hs) is the packed layout of kernels/host/attention.h: each row holds NH
// query heads, then NKV key heads, then NKV value heads, each hs wide. The NH + NKV q and k heads
// are normalised one by one (head n, h of the row uses rstd[n, h], h < NH + NKV); v is left
// alone.
//
// Roundings: those of rmsnorm_fwd (kernels/host/rmsnorm.h): out = rnd(w * rnd(x * rstd)), the
// mean of squares summed in double on the host (fp32 on CUDA), rstd = 1 / sqrt(mean + eps)
// rounded to fp32.
//
// NH, NKV and hs must be positive (a strata::Error otherwise: a bad model config).
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out (N, (NH + 2 NKV) hs): q heads rnd(q_weight * rnd(q * rstd)), k heads rnd(k_weight *
// rnd(k * rstd)), v copied bit for bit. rstd (N, NH + NKV) fp32, saved for backward (may be
// null). out may equal qkv (in place: then v is not written at all); otherwise the two must not
// overlap. q_weight, k_weight (hs) in dtype.
void qk_rmsnorm_fwd(void* out, float* rstd, const void* qkv, const void* q_weight,
                    const void* k_weight, std::int64_t N, int NH, int NKV, int hs, float eps,
                    DType dtype);

// In place. On entry the q and k parts of dqkv (N, (NH + 2 NKV) hs) hold the gradient of the
// normalised q and k; on exit the gradient of q and k before the norm (overwritten, not
// accumulated), per head as rmsnorm_bwd's dinp: with xhat = x * rstd, g = dy * w,
//   dx = rstd * (g - xhat * mean(g * xhat)).
// The v part of dqkv is not touched. dq_weight, dk_weight (hs), in dtype, accumulate (+=)
//   dq_weight += sum over rows and q heads of dy * rnd(xhat)    (dk_weight: the k heads)
// as fp32 sums in a fixed order (chunks of rows, the chunks added in order: the same bits for
// any thread count), added to the old value once and rounded. Either may be null (skipped).
// qkv is the forward's INPUT (before the norm), rstd the forward's. The forward's inner
// rounding is straight-through in dx, as in rmsnorm_bwd.
void qk_rmsnorm_bwd(void* dqkv, void* dq_weight, void* dk_weight, const void* qkv,
                    const void* q_weight, const void* k_weight, const float* rstd, std::int64_t N,
                    int NH, int NKV, int hs, DType dtype);

}  // namespace strata::kernels::host

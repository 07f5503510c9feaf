#pragma once
// LayerNorm over the last dimension, forward and backward (torch.nn.LayerNorm semantics:
// biased variance, eps inside the square root).
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out[n,:] = (inp[n,:] - mean[n]) * rstd[n] * weight + bias, rstd = 1 / sqrt(var + eps).
// inp, out (N,C); weight, bias (C); mean, rstd (N) fp32, saved for backward (either may be
// null when no backward follows). Statistics in fp32 (two passes: mean, then variance).
// out may not alias inp.
void layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                   const void* bias, std::int64_t N, int C, float eps, DType dtype);

// The residual add of a pre-LN block fused with the LayerNorm after it (GPT's res2 + ln_2):
// res_out (N,C) = a + b, rounded to dtype, then ln_out, mean, rstd = layernorm_fwd of res_out
// as stored. Equals residual_fwd(res_out, a, b, N*C) then layernorm_fwd(ln_out, ..., res_out).
// res_out may alias a or b; ln_out may alias nothing.
void residual_layernorm_fwd(void* res_out, void* ln_out, float* mean, float* rstd, const void* a,
                            const void* b, const void* weight, const void* bias, std::int64_t N,
                            int C, float eps, DType dtype);

// Accumulates (+=): dinp (N,C), dweight (C), dbias (C); from dout (N,C), inp (N,C), weight,
// and the mean / rstd saved by the forward. dinp += is what the residual stream wants (the
// gradient of a pre-LN block adds into the residual's). dweight / dbias sums over n are fp32,
// in a fixed order (deterministic for a given thread count).
void layernorm_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                   const void* weight, const float* mean, const float* rstd, std::int64_t N,
                   int C, DType dtype);

}  // namespace strata::kernels::host

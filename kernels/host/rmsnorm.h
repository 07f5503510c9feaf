#pragma once
// RMSNorm over the last dimension, forward and backward: Hugging Face's LlamaRMSNorm (also
// Qwen2's and Mistral's), no bias, no mean subtraction.
//
// Roundings (the same on CUDA, kernels/cuda/rmsnorm.cu). As HF does
//   h = (x.float() * rsqrt(mean(x.float()^2) + eps)).to(dtype);  out = weight * h
// the normalised value is rounded to the storage dtype before the weight multiplies it, and
// the product is rounded again: out = rnd(w * rnd(x * rstd)), the fp32 product of two values
// of the storage dtype rounded once, as torch's bf16 multiply does. In fp32 both roundings are
// the identity. (The one op with two roundings: every other op rounds its result once.)
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out[n,:] = rnd(weight * rnd(inp[n,:] * rstd[n])), rstd = 1 / sqrt(mean(inp[n,:]^2) + eps).
// inp, out (N,C); weight (C); rstd (N) fp32, saved for backward (may be null when no backward
// follows). The mean of squares is summed in double; rstd is fp32. out may not alias inp.
void rmsnorm_fwd(void* out, float* rstd, const void* inp, const void* weight, std::int64_t N,
                 int C, float eps, DType dtype);

// Accumulates (+=), as layernorm_bwd: dinp (N,C) and dweight (C), from dout (N,C), inp (N,C),
// weight and the rstd saved by the forward. With xhat = inp * rstd and g = dout * weight (fp32,
// neither rounded):
//   dinp    += rstd * (g - xhat * mean(g * xhat))
//   dweight += sum_n dout * rnd(xhat)      (rnd(xhat): the value the weight multiplied)
// The forward's inner rounding is treated as the identity in dinp (a straight-through cast, as
// autograd differentiates .to(dtype)). Either of dinp, dweight may be null (not computed). The
// dweight sums over n are fp32 in a fixed order (deterministic for any thread count).
void rmsnorm_bwd(void* dinp, void* dweight, const void* dout, const void* inp,
                 const void* weight, const float* rstd, std::int64_t N, int C, DType dtype);

}  // namespace strata::kernels::host

#pragma once
// Matmul with bias (torch.nn.Linear: weight stored (OC, C)), forward and backward, on
// OpenBLAS sgemm. bf16 / fp16 operands are widened to fp32 first: fp32 accumulation always.
// A forward of few rows (matmul_rows.h's matmul_takes_rows: a decoded token) reads the weight
// once with the row kernel of matmul_rows.h instead.
//
// Also the two matmuls of a GPT MLP fused with their GELU (the tanh approximation of
// elementwise.h): matmul_bias_gelu_fwd (c_fc and the GELU after it) and matmul_bwd_dgelu
// (c_proj's backward, which also yields the gradient of the GELU's input and the bias
// gradient of the layer before it). On the host each is today's ops in sequence, so the
// results are bit for bit those of the unfused calls; kernels/cuda fuses them into cuBLASLt
// epilogues.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC); bias may be null.
void matmul_fwd(void* out, const void* inp, const void* weight, const void* bias,
                std::int64_t N, int C, int OC, DType dtype);

// dinp (N,C)     = dout (N,OC) @ weight (OC,C)       (overwritten; skipped when null)
// dweight (OC,C) += dout^T @ inp                       (accumulated; skipped when null)
// dbias (OC)     += sum over n of dout[n,:]            (accumulated; skipped when null)
void matmul_bwd(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                const void* weight, std::int64_t N, int C, int OC, DType dtype);

// c_fc + GELU. pre (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC), saved for the backward;
// out (N,OC) = gelu(pre), computed from pre as stored (rounded to dtype). bias may be null.
// Equals matmul_fwd(pre, ...) then gelu_fwd(out, pre, N*OC). out may not alias pre or inp.
void matmul_bias_gelu_fwd(void* out, void* pre, const void* inp, const void* weight,
                          const void* bias, std::int64_t N, int C, int OC, DType dtype);

// The backward of a layer whose input was gelu(pre) (GPT's c_proj after c_fc + GELU):
//   dpre (N,C)      = (dout (N,OC) @ weight (OC,C)) * gelu'(pre)   (overwritten)
//   dpre_bias (C)  += sum over n of dpre[n,:]   (the bias gradient of the layer that made pre;
//                                                  accumulated; skipped when null)
//   dweight (OC,C) += dout^T @ inp, inp = gelu(pre) (N,C) as the forward saved it
//                                                 (accumulated; skipped when null)
//   dbias (OC)     += sum over n of dout[n,:]   (accumulated; skipped when null)
// Equals matmul_bwd(dpre, dweight, dbias, dout, inp, weight, ...), gelu_bwd(dpre, pre, dpre,
// N*C), then matmul_bwd(nullptr, nullptr, dpre_bias, dpre, ...) with dpre as the dout of an
// (N,C) output. dpre may not alias any input.
void matmul_bwd_dgelu(void* dpre, void* dpre_bias, void* dweight, void* dbias, const void* dout,
                      const void* inp, const void* pre, const void* weight, std::int64_t N, int C,
                      int OC, DType dtype);

// Grouped (a mixture's experts over their sorted rows): for each group g with weights[g] not
// null, rows [offsets[g], offsets[g+1]) of out (., OC) = the same rows of inp (., C) @
// weights[g] (OC, C)^T. Rows of a group without a weight are left as they are. offsets has
// groups + 1 non-decreasing entries. Bit for bit matmul_fwd on each group's rows (no bias).
void matmul_grouped_fwd(void* out, const void* inp, const void* const* weights, const std::int32_t* offsets,
                        int groups, int C, int OC, DType dtype);

}  // namespace strata::kernels::host

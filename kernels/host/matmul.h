#pragma once
// Matmul with bias (torch.nn.Linear: weight stored (OC, C)), forward and backward, on
// OpenBLAS sgemm. bf16 / fp16 operands are widened to fp32 first: fp32 accumulation always.
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

}  // namespace strata::kernels::host

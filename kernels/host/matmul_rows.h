#pragma once
// out (N, OC) = inp (N, C) @ weight (OC, C)^T for a weight read once, with few rows: how the host
// computes a mixture's expert where it lives (models/moe/moe_mlp.cpp, Note [Experts on the host]).
// matmul_fwd (matmul.h) widens a bf16 / fp16 weight into a new fp32 copy of all of it before its
// sgemm: three passes over the weight's bytes and a fresh allocation per call, where one row
// needs one pass. Here each output channel's weight row is widened into a small buffer and dotted
// with every input row at once, so the weight streams through once in its dtype.
//
// Each output element is summed in a fixed order (eight fp32 lanes over the row, then the lanes
// in order), whatever the thread count: the same bits for any team size. They differ from
// matmul_fwd's sgemm in the last bits. fp32 weights, and more than kMatmulFewRows rows (where the
// widened copy is paid back by sgemm's blocking), go to matmul_fwd.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

inline constexpr std::int64_t kMatmulFewRows = 16;

void matmul_rows_fwd(void* out, const void* inp, const void* weight, std::int64_t N, int C, int OC, DType dtype);

}  // namespace strata::kernels::host

#pragma once
// out (N, OC) = inp (N, C) @ weight (OC, C)^T (+ bias) for few rows: a weight read once. Decoding
// (a row per sequence) and a mixture's expert computed where it lives (models/moe/moe_mlp.cpp,
// Note [Experts on the host]) are such matmuls; matmul_fwd (matmul.h) sends them here where
// matmul_takes_rows says (Note [Few-row matmuls] in matmul_rows.cpp).
//
// Each output element is summed in a fixed order (eight fp32 lanes over the row, then the lanes
// in order), whatever the thread count and whatever N: a row's result does not depend on the rows
// beside it, nor on the team size. They differ from sgemm's in the last bits.
#include <cstdint>

#include "core/dtype.h"

namespace strata::kernels::host {

// The most rows matmul_fwd computes here: in bf16 / fp16 (where sgemm needs a widened fp32 copy
// of the whole weight first) and in fp32 (where sgemm's own packing of the weight is the cost).
inline constexpr std::int64_t kMatmulFewRows = 16;
inline constexpr std::int64_t kMatmulFewRowsF32 = 4;

// Whether matmul_fwd computes N rows in `dtype` with matmul_rows_fwd.
inline bool matmul_takes_rows(std::int64_t N, DType dtype) {
  return N <= (dtype == DType::f32 ? kMatmulFewRowsF32 : kMatmulFewRows);
}

// The row kernel itself, for any N (slow for many rows: each weight row is dotted with every
// input row in turn). bias (OC) may be null.
void matmul_rows_fwd(void* out, const void* inp, const void* weight, const void* bias, std::int64_t N, int C, int OC,
                     DType dtype);

}  // namespace strata::kernels::host

#pragma once
// out (N, OC) = inp (N, C) @ weight (OC, C)^T (+ bias) for few rows: a weight read once. Decoding
// (a row per sequence) and a mixture's expert computed where it lives (models/moe/moe_mlp.cpp,
// Note [Experts on the host]) are such matmuls; matmul_fwd (matmul.h) sends them here where
// matmul_takes_rows says (Note [Few-row matmuls] in matmul_rows.cpp).
//
// Each output element is summed in a fixed order (eight fp32 lanes over the row, with FMAs in the
// AVX2 kernel, then the lanes in order), whatever the thread count and whatever N: a row's result
// does not depend on the rows beside it, nor on the team size. They differ from sgemm's (and the
// portable kernel's from the AVX2 kernel's) in the last bits.
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace strata::kernels::host {

// The most rows matmul_fwd computes here: in bf16 / fp16 (where sgemm needs a widened fp32 copy
// of the weight first) and, with the AVX2 kernel, in fp32 (where sgemm's own packing of the
// weight is the cost). The portable kernel (no AVX2: STRATA_SIMD=scalar, other CPUs) stops at
// kMatmulFewRowsPortableF32 in fp32.
inline constexpr std::int64_t kMatmulFewRows = 16;
inline constexpr std::int64_t kMatmulFewRowsPortableF32 = 4;

// The most rows matmul_fwd computes in `dtype` with matmul_rows_fwd, at active_simd().
std::int64_t matmul_few_rows(DType dtype);

// Whether matmul_fwd computes N rows in `dtype` with matmul_rows_fwd.
inline bool matmul_takes_rows(std::int64_t N, DType dtype) { return N <= matmul_few_rows(dtype); }

// The row kernel itself, for any N (slow for many rows: each weight row is dotted with every
// input row in turn). bias (OC) may be null.
void matmul_rows_fwd(void* out, const void* inp, const void* weight, const void* bias, std::int64_t N, int C, int OC,
                     DType dtype);

// The same with a given SIMD variant (active_simd() above), for tests and benchmarks. `level`
// must not be above detected_simd() (checked with STRATA_ASSERT). Each level sums in its own
// fixed order: their results differ in the last bits.
void matmul_rows_fwd_with(SimdLevel level, void* out, const void* inp, const void* weight, const void* bias,
                          std::int64_t N, int C, int OC, DType dtype);

}  // namespace strata::kernels::host

#pragma once
// Vectorized, deterministic helpers on gradient shards, in the style of the Adam step (same
// variants, same dispatch, OpenMP over fixed chunks).
//
// Determinism: the sum of squares is reduced in a fixed tree (16 double lanes per chunk of 4096
// elements in a fixed order, chunks combined in index order; cpu_adam/grad_ops_impl.h), so the
// same inputs give the same bits for every thread count, and every SIMD variant.
//
// threads: 0 = the CPUs of the affinity mask; shards under 64K elements run on the calling
// thread. simd must not be above detected_simd(). Null grads are accepted when numel == 0.
#include <cstddef>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace strata::cpu_adam {

// Squared L2 norm of grads * scale, accumulated in double (for global gradient clipping).
double grad_sq_norm(SimdLevel simd, int threads, const void* grads, DType dtype, std::size_t numel,
                    float scale = 1.0f);

// True when every element is finite (no Inf or NaN): the fp16 overflow check.
bool all_finite(SimdLevel simd, int threads, const void* grads, DType dtype, std::size_t numel);

// acc[i] += grads[i] (fp32 accumulation across micro-batches; grads in any dtype).
void accumulate_grads(SimdLevel simd, int threads, float* acc, const void* grads, DType dtype,
                      std::size_t numel);

// acc[i] = 0.0f + grads[i]: the first micro-batch's gradient into an accumulator whatever it
// held, bitwise what accumulate_grads into zeros gives, without reading acc or zeroing it first
// (the engine's host accumulators are never zeroed between steps).
void store_first_grads(SimdLevel simd, int threads, float* acc, const void* grads, DType dtype,
                       std::size_t numel);

// The same two into an accumulator of any dtype (DeepSpeed's data_types.grad_accum_dtype):
//   acc[i] = acc_dtype(float(acc[i]) + float(grads[i]))
// one fp32 addition, then one rounding to acc_dtype (round to nearest even; none for fp32, where
// these are exactly the functions above). With `first`, float(acc[i]) is replaced by +0.0f and acc
// is not read. A bf16 / fp16 accumulator is widened, added to and narrowed in blocks that stay in
// L1, with the conversions of core/dtype.h: the bits do not depend on the SIMD variant or threads.
void accumulate_grads(SimdLevel simd, int threads, void* acc, DType acc_dtype, const void* grads, DType dtype,
                      std::size_t numel);
void store_first_grads(SimdLevel simd, int threads, void* acc, DType acc_dtype, const void* grads,
                       DType dtype, std::size_t numel);

}  // namespace strata::cpu_adam

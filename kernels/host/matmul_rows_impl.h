#pragma once
// Internal to kernels/host: the row kernel's SIMD variants, which matmul_rows.cpp picks at run
// time (core/cpu_features.h).
//
// Each variant lives in its own file compiled with its own -m flags (matmul_rows_avx2.cpp).
// Such a file includes only this header and <immintrin.h> and keeps its code in an anonymous
// namespace: an inline function emitted from a file built with -mavx2 could otherwise be the
// copy the linker keeps, and run on a CPU without AVX2 (as core/dtype_impl.h says).
#include <cstdint>

namespace strata::kernels::host::detail {

// How the weight is stored (core/dtype.h's DType, restated so that no inline code of that
// header is compiled with the variants' flags).
enum class RowWeights { f32, bf16, f16 };

// y[n * OC + oc] = sum over c of x[n * C + c] * weight[oc * C + c], plus bias[oc] when bias is
// not null, for n < N and oc_begin <= oc < oc_end. x, y and bias are fp32; the weight is read
// where it lies, in `kind`.
using RowsFn = void (*)(float* y, const float* x, const void* weight, RowWeights kind, const float* bias,
                        std::int64_t N, int C, int OC, int oc_begin, int oc_end);

#if defined(STRATA_X86_SIMD)
RowsFn avx2_rows();  // matmul_rows_avx2.cpp
#endif

}  // namespace strata::kernels::host::detail

#pragma once
// Vector fp32 -> bf16 rounding (internal to strata's SIMD files): round to nearest even on the
// integer bits, NaN quieted, exactly as fp32_to_bf16() in core/dtype.h. Shared by the bulk
// converters (core/dtype_avx*.cpp) and the Adam step (cpu_adam/adam_avx*.cpp).
//
// Include it only from a file compiled with the matching -m flags. Everything here has
// internal linkage (an anonymous namespace; `inline` only silences unused-function warnings),
// so each such file gets its own copy and the linker can never hand an AVX-512 body to code
// that runs on a CPU without AVX-512 (see core/dtype_impl.h).
#include <immintrin.h>

namespace strata::detail {
namespace {

#if defined(__AVX2__)
// 8 fp32 (as bits) -> 8 bf16 in the low halves of the 32-bit lanes.
inline __m256i bf16_lanes_avx2(__m256i x) {
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}
#endif

#if defined(__AVX512F__)
// 16 fp32 (as bits) -> 16 packed bf16.
inline __m256i bf16_avx512(__m512i x) {
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb);
  r = _mm512_mask_or_epi32(r, is_nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
#endif

}  // namespace
}  // namespace strata::detail

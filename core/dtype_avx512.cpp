// AVX-512 (F, BW, VL, DQ) bulk conversions. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq (core/CMakeLists.txt) and only called when detected_simd() >= avx512. See
// dtype_impl.h for why this file includes no other strata header with inline code.
//
// The tail (fewer than 16 elements) uses masked loads and stores: masked-off lanes are
// neither read nor written and do not fault, so no scalar loop is needed.
//
// fp32 -> bf16 deliberately does not use AVX512-BF16's vcvtneps2bf16: it flushes subnormal
// inputs to zero and always rounds to a canonical NaN; the integer RNE below is exact.
#include <immintrin.h>

#include <cstdint>

#include "core/bf16_simd_impl.h"
#include "core/dtype_impl.h"

namespace strata::detail {
namespace {

constexpr int kToNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

using Bytes = const unsigned char*;
using MutBytes = unsigned char*;

// Lanes [0, count) of a 16-lane vector, count < 16.
__mmask16 tail_mask(std::size_t count) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(count)) - 1u);
}

__m512i load16_f32(Bytes p) { return _mm512_loadu_si512(p); }
__m512i load16_f32(Bytes p, __mmask16 m) { return _mm512_maskz_loadu_epi32(m, p); }
__m256i load16_u16(Bytes p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i load16_u16(Bytes p, __mmask16 m) { return _mm256_maskz_loadu_epi16(m, p); }

void store16_f32(MutBytes p, __m512i v) { _mm512_storeu_si512(p, v); }
void store16_f32(MutBytes p, __m512i v, __mmask16 m) { _mm512_mask_storeu_epi32(p, m, v); }
void store16_u16(MutBytes p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
void store16_u16(MutBytes p, __m256i v, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, v); }

// 16 fp32 (as bits) -> 16 bf16: RNE on the integer bits, NaN quieted (as dtype.h).
__m256i to_bf16(__m512i x) { return detail::bf16_avx512(x); }

__m512i widen_bf16(__m256i h) { return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16); }

__m256i to_fp16(__m512i x) { return _mm512_cvtps_ph(_mm512_castsi512_ps(x), kToNearest); }
__m512i widen_fp16(__m256i h) { return _mm512_castps_si512(_mm512_cvtph_ps(h)); }

// One loop shape for all six conversions: `convert` maps a loaded vector to the one to store;
// element widths are 4 bytes (fp32, 16 in a __m512i) or 2 bytes (16 in a __m256i).
template <int kSrcBytes, int kDstBytes, typename Convert>
void convert_loop(const void* src, void* dst, std::size_t n, Convert convert) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  auto load = [](Bytes p, auto... mask) {
    if constexpr (kSrcBytes == 4) return load16_f32(p, mask...);
    else return load16_u16(p, mask...);
  };
  auto store = [](MutBytes p, auto v, auto... mask) {
    if constexpr (kDstBytes == 4) store16_f32(p, v, mask...);
    else store16_u16(p, v, mask...);
  };
  std::size_t i = 0;
  // Two vectors per iteration: independent chains for the out-of-order core.
  for (; i + 32 <= n; i += 32) {
    const auto a = convert(load(s + kSrcBytes * i));
    const auto b = convert(load(s + kSrcBytes * (i + 16)));
    store(d + kDstBytes * i, a);
    store(d + kDstBytes * (i + 16), b);
  }
  for (; i + 16 <= n; i += 16) store(d + kDstBytes * i, convert(load(s + kSrcBytes * i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    store(d + kDstBytes * i, convert(load(s + kSrcBytes * i, m)), m);
  }
}

void fp32_to_bf16(const void* src, void* dst, std::size_t n) {
  convert_loop<4, 2>(src, dst, n, [](__m512i x) { return to_bf16(x); });
}
void bf16_to_fp32(const void* src, void* dst, std::size_t n) {
  convert_loop<2, 4>(src, dst, n, [](__m256i h) { return widen_bf16(h); });
}
void fp32_to_fp16(const void* src, void* dst, std::size_t n) {
  convert_loop<4, 2>(src, dst, n, [](__m512i x) { return to_fp16(x); });
}
void fp16_to_fp32(const void* src, void* dst, std::size_t n) {
  convert_loop<2, 4>(src, dst, n, [](__m256i h) { return widen_fp16(h); });
}
// Through fp32, which holds fp16 and bf16 exactly: one rounding, as the scalar kernel.
void fp16_to_bf16(const void* src, void* dst, std::size_t n) {
  convert_loop<2, 2>(src, dst, n, [](__m256i h) { return to_bf16(widen_fp16(h)); });
}
void bf16_to_fp16(const void* src, void* dst, std::size_t n) {
  convert_loop<2, 2>(src, dst, n, [](__m256i h) { return to_fp16(widen_bf16(h)); });
}

constexpr ConvertKernels kAvx512Kernels = {fp32_to_bf16, bf16_to_fp32, fp32_to_fp16,
                                           fp16_to_fp32, fp16_to_bf16, bf16_to_fp16};

}  // namespace

const ConvertKernels& avx512_convert_kernels() { return kAvx512Kernels; }

}  // namespace strata::detail

// AVX2 + F16C bulk conversions. Compiled with -mavx2 -mfma -mf16c (core/CMakeLists.txt) and
// only called when detected_simd() >= avx2. See dtype_impl.h for why this file includes no
// other strata header with inline code and keeps everything in an anonymous namespace.
//
// fp16 uses the F16C instructions (vcvtps2ph with an explicit round-to-nearest-even
// immediate, so MXCSR does not matter). bf16 rounding is done on the integer bits, exactly
// like fp32_to_bf16() in dtype.h. Tails shorter than one vector go to the scalar kernels.
#include <immintrin.h>

#include <cstdint>

#include "core/bf16_simd_impl.h"
#include "core/dtype_impl.h"

namespace strata::detail {
namespace {

constexpr int kToNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

using Bytes = const unsigned char*;
using MutBytes = unsigned char*;

__m256 load8_f32(Bytes p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
__m128i load8_u16(Bytes p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
void store8_f32(MutBytes p, __m256 v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
void store8_u16(MutBytes p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

// 8 fp32 (as bits) -> 8 bf16 in the low halves of 32-bit lanes: RNE, NaN quieted.
__m256i bf16_lanes(__m256i x) { return detail::bf16_lanes_avx2(x); }

// Two vectors of bf16 lanes -> 16 packed u16 in order. The lanes hold values <= 0xFFFF, so
// the unsigned saturation of packus never triggers; packus works per 128-bit half, and the
// permute puts the halves back in order.
__m256i pack16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}
__m128i pack8(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

__m256i widen_bf16(__m128i h) { return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16); }

void fp32_to_bf16(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_lanes(_mm256_castps_si256(load8_f32(s + 4 * i)));
    const __m256i b = bf16_lanes(_mm256_castps_si256(load8_f32(s + 4 * i + 32)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 2 * i), pack16(a, b));
  }
  for (; i + 8 <= n; i += 8)
    store8_u16(d + 2 * i, pack8(bf16_lanes(_mm256_castps_si256(load8_f32(s + 4 * i)))));
  scalar_convert_kernels().fp32_to_bf16(s + 4 * i, d + 2 * i, n - i);
}

void bf16_to_fp32(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store8_f32(d + 4 * i, _mm256_castsi256_ps(widen_bf16(load8_u16(s + 2 * i))));
    store8_f32(d + 4 * i + 32, _mm256_castsi256_ps(widen_bf16(load8_u16(s + 2 * i + 16))));
  }
  for (; i + 8 <= n; i += 8)
    store8_f32(d + 4 * i, _mm256_castsi256_ps(widen_bf16(load8_u16(s + 2 * i))));
  scalar_convert_kernels().bf16_to_fp32(s + 2 * i, d + 4 * i, n - i);
}

void fp32_to_fp16(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store8_u16(d + 2 * i, _mm256_cvtps_ph(load8_f32(s + 4 * i), kToNearest));
    store8_u16(d + 2 * i + 16, _mm256_cvtps_ph(load8_f32(s + 4 * i + 32), kToNearest));
  }
  for (; i + 8 <= n; i += 8) store8_u16(d + 2 * i, _mm256_cvtps_ph(load8_f32(s + 4 * i), kToNearest));
  scalar_convert_kernels().fp32_to_fp16(s + 4 * i, d + 2 * i, n - i);
}

void fp16_to_fp32(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store8_f32(d + 4 * i, _mm256_cvtph_ps(load8_u16(s + 2 * i)));
    store8_f32(d + 4 * i + 32, _mm256_cvtph_ps(load8_u16(s + 2 * i + 16)));
  }
  for (; i + 8 <= n; i += 8) store8_f32(d + 4 * i, _mm256_cvtph_ps(load8_u16(s + 2 * i)));
  scalar_convert_kernels().fp16_to_fp32(s + 2 * i, d + 4 * i, n - i);
}

// fp16 -> fp32 is exact, so fp16 -> bf16 rounds once, like the scalar kernel.
void fp16_to_bf16(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_lanes(_mm256_castps_si256(_mm256_cvtph_ps(load8_u16(s + 2 * i))));
    const __m256i b =
        bf16_lanes(_mm256_castps_si256(_mm256_cvtph_ps(load8_u16(s + 2 * i + 16))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 2 * i), pack16(a, b));
  }
  for (; i + 8 <= n; i += 8)
    store8_u16(d + 2 * i,
               pack8(bf16_lanes(_mm256_castps_si256(_mm256_cvtph_ps(load8_u16(s + 2 * i))))));
  scalar_convert_kernels().fp16_to_bf16(s + 2 * i, d + 2 * i, n - i);
}

void bf16_to_fp16(const void* src, void* dst, std::size_t n) {
  auto s = static_cast<Bytes>(src);
  auto d = static_cast<MutBytes>(dst);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wide = _mm256_castsi256_ps(widen_bf16(load8_u16(s + 2 * i)));
    store8_u16(d + 2 * i, _mm256_cvtps_ph(wide, kToNearest));
  }
  scalar_convert_kernels().bf16_to_fp16(s + 2 * i, d + 2 * i, n - i);
}

constexpr ConvertKernels kAvx2Kernels = {fp32_to_bf16, bf16_to_fp32, fp32_to_fp16,
                                         fp16_to_fp32, fp16_to_bf16, bf16_to_fp16};

}  // namespace

const ConvertKernels& avx2_convert_kernels() { return kAvx2Kernels; }

}  // namespace strata::detail

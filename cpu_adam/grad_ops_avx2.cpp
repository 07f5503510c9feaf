// The grad helpers with AVX2 + F16C. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off and
// only called when the CPU has AVX2 (see adam_impl.h for the rules such a file follows).
// Same bits as the scalar kernels: the chunk sum keeps the 16 lanes of grad_ops_impl.h in
// four registers of 4 doubles; tails go to the scalar kernels (the sum pads its last block
// with zeros instead, which adds +0 to a lane: exact).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_adam/grad_ops_impl.h"

namespace strata::cpu_adam::detail {
namespace {

using Bytes = const unsigned char*;

__m128i load8_u16(Bytes p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Elements [i, i + 8) as fp32 (bf16 and fp16 widen exactly).
__m256 load8(Bytes g, GradKind kind, std::size_t i) {
  switch (kind) {
    case GradKind::f32: return _mm256_loadu_ps(reinterpret_cast<const float*>(g + 4 * i));
    case GradKind::bf16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8_u16(g + 2 * i)), 16));
    case GradKind::f16: return _mm256_cvtph_ps(load8_u16(g + 2 * i));
  }
  return _mm256_setzero_ps();
}

// lane[4k .. 4k+3] += (double(x[4k..]) * scale)^2 for the 8 floats of x into two registers.
void add_squares(__m256 x, __m256d scale, __m256d& lo, __m256d& hi) {
  const __m256d a = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), scale);
  const __m256d b = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), scale);
  lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
  hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
}

double sq_sum(const void* grads, GradKind kind, std::size_t n, double scale_d) {
  const auto* g = static_cast<Bytes>(grads);
  const __m256d scale = _mm256_set1_pd(scale_d);
  __m256d l0 = _mm256_setzero_pd(), l4 = l0, l8 = l0, l12 = l0;  // lanes 0-3, 4-7, 8-11, 12-15
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    add_squares(load8(g, kind, i), scale, l0, l4);
    add_squares(load8(g, kind, i + 8), scale, l8, l12);
  }
  if (i < n) {  // the last block, zero-padded
    const std::size_t size = kind == GradKind::f32 ? 4 : 2;
    alignas(32) unsigned char block[64] = {};
    std::memcpy(block, g + size * i, size * (n - i));
    add_squares(load8(block, kind, 0), scale, l0, l4);
    add_squares(load8(block, kind, 8), scale, l8, l12);
  }
  const __m256d s_lo = _mm256_add_pd(l0, l8);   // s[0..3]
  const __m256d s_hi = _mm256_add_pd(l4, l12);  // s[4..7]
  const __m256d t = _mm256_add_pd(s_lo, s_hi);
  const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
  return _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));
}

bool all_finite(const void* grads, GradKind kind, std::size_t n) {
  const auto* g = static_cast<Bytes>(grads);
  std::size_t i = 0;
  if (kind == GradKind::f32) {
    const __m256i exponent = _mm256_set1_epi32(0x7F800000);
    for (; i + 8 <= n; i += 8) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 4 * i));
      const __m256i e = _mm256_and_si256(x, exponent);
      if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(e, exponent)) != 0) return false;
    }
    return scalar_grad_ops().all_finite(g + 4 * i, kind, n - i);
  }
  const __m256i exponent = _mm256_set1_epi16(kind == GradKind::bf16 ? 0x7F80 : 0x7C00);
  for (; i + 16 <= n; i += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 2 * i));
    const __m256i e = _mm256_and_si256(x, exponent);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(e, exponent)) != 0) return false;
  }
  return scalar_grad_ops().all_finite(g + 2 * i, kind, n - i);
}

void accumulate(float* acc, const void* grads, GradKind kind, std::size_t n, bool first) {
  const auto* g = static_cast<Bytes>(grads);
  std::size_t i = 0;
  if (first) {
    const __m256 zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_add_ps(zero, load8(g, kind, i)));
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), load8(g, kind, i)));
  }
  const std::size_t size = kind == GradKind::f32 ? 4 : 2;
  scalar_grad_ops().accumulate(acc + i, g + size * i, kind, n - i, first);
}

constexpr GradOpsKernels kAvx2 = {sq_sum, all_finite, accumulate};

}  // namespace

const GradOpsKernels& avx2_grad_ops() { return kAvx2; }

}  // namespace strata::cpu_adam::detail

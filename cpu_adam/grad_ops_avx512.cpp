// The grad helpers with AVX-512 F/BW/VL/DQ. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -ffp-contract=off and only called when the CPU has them (see adam_impl.h for the
// rules such a file follows). Same bits as the scalar kernels: the chunk sum keeps the 16
// lanes of grad_ops_impl.h in two registers of 8 doubles. Tails use masked loads and stores
// (masked-off lanes read as zero, which adds +0 to a lane and is finite).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_adam/grad_ops_impl.h"

namespace strata::cpu_adam::detail {
namespace {

using Bytes = const unsigned char*;

__mmask16 mask16(std::size_t count) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(count)) - 1u);
}
__mmask32 mask32(std::size_t count) {
  return static_cast<__mmask32>((std::uint64_t{1} << count) - 1u);
}

// Elements [i, i + 16) as fp32, lanes outside `m` zero.
__m512 load16(Bytes g, GradKind kind, std::size_t i, __mmask16 m) {
  if (kind == GradKind::f32) return _mm512_maskz_loadu_ps(m, g + 4 * i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, g + 2 * i);
  if (kind == GradKind::bf16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

double sq_sum(const void* grads, GradKind kind, std::size_t n, double scale_d) {
  const auto* g = static_cast<Bytes>(grads);
  const __m512d scale = _mm512_set1_pd(scale_d);
  __m512d lo = _mm512_setzero_pd(), hi = lo;  // lanes 0-7, 8-15
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : mask16(n - i);
    const __m512 x = load16(g, kind, i, m);
    const __m512d a = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), scale);
    const __m512d b = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), scale);
    lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
    hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
  }
  const __m512d s = _mm512_add_pd(lo, hi);
  const __m256d t = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
  const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
  return _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));
}

bool all_finite(const void* grads, GradKind kind, std::size_t n) {
  const auto* g = static_cast<Bytes>(grads);
  if (kind == GradKind::f32) {
    // vfpclassps categories: QNaN 0x01, +Inf 0x08, -Inf 0x10, SNaN 0x80.
    for (std::size_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : mask16(n - i);
      const __m512 x = _mm512_maskz_loadu_ps(m, g + 4 * i);
      if (_mm512_fpclass_ps_mask(x, 0x99) != 0) return false;
    }
    return true;
  }
  const __m512i exponent = _mm512_set1_epi16(kind == GradKind::bf16 ? 0x7F80 : 0x7C00);
  for (std::size_t i = 0; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? static_cast<__mmask32>(0xFFFFFFFFu) : mask32(n - i);
    const __m512i x = _mm512_maskz_loadu_epi16(m, g + 2 * i);
    if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exponent), exponent) != 0) return false;
  }
  return true;
}

void accumulate(float* acc, const void* grads, GradKind kind, std::size_t n, bool first) {
  const auto* g = static_cast<Bytes>(grads);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : mask16(n - i);
    const __m512 prev = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, acc + i);
    const __m512 sum = _mm512_add_ps(prev, load16(g, kind, i, m));
    _mm512_mask_storeu_ps(acc + i, m, sum);
  }
}

constexpr GradOpsKernels kAvx512 = {sq_sum, all_finite, accumulate};

}  // namespace

const GradOpsKernels& avx512_grad_ops() { return kAvx512; }

}  // namespace strata::cpu_adam::detail

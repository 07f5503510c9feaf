// The Adam step with AVX2 + F16C, 8 parameters per iteration. Compiled with -mavx2 -mfma
// -mf16c -ffp-contract=off (cpu_adam/CMakeLists.txt) and only called when the CPU has AVX2;
// see adam_impl.h for why it includes no other strata header and keeps its code in an
// anonymous namespace.
//
// bf16 / fp16 grads are loaded as 16-bit values and widened in registers (a shift for bf16,
// vcvtph2ps for fp16), both exact. The operations are those of the scalar kernel, in the same
// order and without FMA, so the bits are the same; the last (< 8) elements go to it.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/bf16_simd_impl.h"
#include "cpu_adam/adam_impl.h"

namespace strata::cpu_adam::detail {
namespace {

constexpr int kToNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
constexpr std::size_t kLanes = 8;

template <GradKind kGrad>
__m256 load_grad(const unsigned char* grads, std::size_t i) {
  if constexpr (kGrad == GradKind::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(grads + 4 * i));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(grads + 2 * i));
    if constexpr (kGrad == GradKind::bf16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else return _mm256_cvtph_ps(h);
  }
}

// 8 fp32 -> 8 bf16: round to nearest even on the integer bits, NaN quieted (core/dtype.h).
__m128i to_bf16(__m256 p) {
  const __m256i lanes = strata::detail::bf16_lanes_avx2(_mm256_castps_si256(p));
  // Lanes hold values <= 0xFFFF: packus does not saturate.
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
}

template <GradKind kGrad, OutKind kOut>
void run(const AdamScalars& s, const AdamSpan& span) {
  const auto* grads = static_cast<const unsigned char*>(span.grads);
  auto* out = static_cast<unsigned char*>(span.params_out);
  float* params = span.params;
  float* exp_avg = span.exp_avg;
  float* exp_avg_sq = span.exp_avg_sq;
  const float* params_in = span.params_in;
  const float* exp_avg_in = span.exp_avg_in;
  const float* exp_avg_sq_in = span.exp_avg_sq_in;
  const __m256 grad_scale = _mm256_set1_ps(s.grad_scale);
  const __m256 beta1 = _mm256_set1_ps(s.beta1);
  const __m256 one_minus_beta1 = _mm256_set1_ps(s.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(s.beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(s.one_minus_beta2);
  const __m256 step_size = _mm256_set1_ps(s.step_size);
  const __m256 bc2_sqrt = _mm256_set1_ps(s.bc2_sqrt);
  const __m256 eps = _mm256_set1_ps(s.eps);
  const __m256 l2 = _mm256_set1_ps(s.l2);
  const __m256 decay = _mm256_set1_ps(s.decay);
  // Copies: read through `s` they would be reloaded after every float store (may alias).
  const bool has_l2 = s.has_l2;
  const bool has_decay = s.has_decay;
  const std::size_t n = span.numel;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    __m256 g = _mm256_mul_ps(load_grad<kGrad>(grads, i), grad_scale);
    __m256 p = _mm256_loadu_ps(params_in + i);
    if (has_l2) g = _mm256_add_ps(g, _mm256_mul_ps(l2, p));
    if (has_decay) p = _mm256_mul_ps(p, decay);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(exp_avg_in + i)),
                                   _mm256_mul_ps(one_minus_beta1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(exp_avg_sq_in + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step_size, m), denom));
    _mm256_storeu_ps(params + i, p);
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
    if constexpr (kOut == OutKind::bf16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), to_bf16(p));
    if constexpr (kOut == OutKind::f16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(p, kToNearest));
  }
  if (i == n) return;
  const std::size_t grad_bytes = kGrad == GradKind::f32 ? 4 : 2;
  AdamSpan tail = span;
  tail.params += i;
  tail.grads = grads + grad_bytes * i;
  tail.exp_avg += i;
  tail.exp_avg_sq += i;
  tail.params_in += i;
  tail.exp_avg_in += i;
  tail.exp_avg_sq_in += i;
  tail.params_out = kOut == OutKind::none ? nullptr : out + 2 * i;
  tail.numel = n - i;
  adam_span_scalar(s, tail);
}

template <GradKind kGrad>
void run_grad(const AdamScalars& s, const AdamSpan& span) {
  switch (span.out) {
    case OutKind::none: return run<kGrad, OutKind::none>(s, span);
    case OutKind::bf16: return run<kGrad, OutKind::bf16>(s, span);
    case OutKind::f16: return run<kGrad, OutKind::f16>(s, span);
  }
}

}  // namespace

void adam_span_avx2(const AdamScalars& s, const AdamSpan& span) {
  switch (span.grad) {
    case GradKind::f32: return run_grad<GradKind::f32>(s, span);
    case GradKind::bf16: return run_grad<GradKind::bf16>(s, span);
    case GradKind::f16: return run_grad<GradKind::f16>(s, span);
  }
}

}  // namespace strata::cpu_adam::detail

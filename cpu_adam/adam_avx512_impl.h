#pragma once
// The AVX-512 Adam kernel, 16 parameters per iteration, masked tail (masked-off lanes are
// neither read nor written and do not fault). Included by exactly two files, each compiled
// with its own flags (cpu_adam/CMakeLists.txt):
//   adam_avx512.cpp       -mavx512f/bw/vl/dq                       -> adam_span_avx512
//   adam_avx512_bf16.cpp  the same + -mavx512bf16, with
//                         STRATA_ADAM_BF16_INSN defined            -> adam_span_avx512_bf16
// Everything here is in an anonymous namespace, so each file gets its own copy compiled with
// its own flags (see adam_impl.h).
//
// The operations are those of the scalar kernel, in the same order and without FMA: the same
// bits. The bf16 params_out of the two files are the same bits too (the proof is at
// to_bf16_insn below).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/bf16_simd_impl.h"
#include "cpu_adam/adam_impl.h"

namespace strata::cpu_adam::detail {
namespace {

constexpr int kToNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
constexpr std::size_t kLanes = 16;

// Either no mask (full vector) or the mask of the lanes to read and write.
struct Full {};

inline __m512 load_f32(const float* p, Full) { return _mm512_loadu_ps(p); }
inline __m512 load_f32(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store_f32(float* p, __m512 v, Full) { _mm512_storeu_ps(p, v); }
inline void store_f32(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline __m256i load_u16(const unsigned char* p, Full) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256i load_u16(const unsigned char* p, __mmask16 m) {
  return _mm256_maskz_loadu_epi16(m, p);
}
inline void store_u16(unsigned char* p, __m256i v, Full) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
inline void store_u16(unsigned char* p, __m256i v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, v);
}

template <GradKind kGrad, typename Mask>
__m512 load_grad(const unsigned char* grads, std::size_t i, Mask mask) {
  if constexpr (kGrad == GradKind::f32) {
    return load_f32(reinterpret_cast<const float*>(grads + 4 * i), mask);
  } else {
    const __m256i h = load_u16(grads + 2 * i, mask);
    if constexpr (kGrad == GradKind::bf16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else return _mm512_cvtph_ps(h);
  }
}

// 16 fp32 -> 16 bf16: round to nearest even on the integer bits, NaN quieted (core/dtype.h).
inline __m256i to_bf16_int(__m512 p) { return strata::detail::bf16_avx512(_mm512_castps_si512(p)); }

#if defined(STRATA_ADAM_BF16_INSN)
// vcvtneps2bf16 (AVX512-BF16), per the Intel SDM's convert_fp32_to_bfloat16(x):
//   zero or denormal x -> signed zero               (differs from integer RNE for denormals)
//   infinity           -> x[31:16]                  (= integer RNE: 0x7FFF + 0 never carries)
//   NaN                -> x[31:16] | 0x0040          (= the quieted NaN of core/dtype.h)
//   normal             -> (x + 0x7FFF + x[16]) >> 16 (= integer RNE, overflow to Inf included)
// MXCSR is neither read nor written. So the two agree on every input except fp32 denormals,
// which the step can produce (a tiny param with a zero update). Those vectors (vfpclassps
// category 0x20 = denormal, one instruction) take the integer path: identical bits for all
// 2^32 inputs. The unit test checks denormals, NaNs, Infs and rounding boundaries through
// both variants.
inline __m256i to_bf16_insn(__m512 p) {
  if (_mm512_fpclass_ps_mask(p, 0x20) != 0) [[unlikely]] return to_bf16_int(p);
  return (__m256i)_mm512_cvtneps_pbh(p);
}
#endif

// The per-step scalars broadcast once per span (read through a reference they would be
// reloaded after every store: a float store may alias them).
struct Consts {
  __m512 grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps,
      l2, decay;
  bool has_l2, has_decay;
};

template <GradKind kGrad, OutKind kOut, typename Mask>
inline void step16(const Consts& c, const AdamSpan& span, std::size_t i, Mask mask) {
  const auto* grads = static_cast<const unsigned char*>(span.grads);
  auto* out = static_cast<unsigned char*>(span.params_out);
  __m512 g = _mm512_mul_ps(load_grad<kGrad>(grads, i, mask), c.grad_scale);
  __m512 p = load_f32(span.params_in + i, mask);
  if (c.has_l2) g = _mm512_add_ps(g, _mm512_mul_ps(c.l2, p));
  if (c.has_decay) p = _mm512_mul_ps(p, c.decay);
  const __m512 m = _mm512_add_ps(_mm512_mul_ps(c.beta1, load_f32(span.exp_avg_in + i, mask)),
                                 _mm512_mul_ps(c.one_minus_beta1, g));
  const __m512 v = _mm512_add_ps(_mm512_mul_ps(c.beta2, load_f32(span.exp_avg_sq_in + i, mask)),
                                 _mm512_mul_ps(_mm512_mul_ps(c.one_minus_beta2, g), g));
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bc2_sqrt), c.eps);
  p = _mm512_sub_ps(p, _mm512_div_ps(_mm512_mul_ps(c.step_size, m), denom));
  store_f32(span.params + i, p, mask);
  store_f32(span.exp_avg + i, m, mask);
  store_f32(span.exp_avg_sq + i, v, mask);
  if constexpr (kOut == OutKind::bf16) {
#if defined(STRATA_ADAM_BF16_INSN)
    store_u16(out + 2 * i, to_bf16_insn(p), mask);
#else
    store_u16(out + 2 * i, to_bf16_int(p), mask);
#endif
  }
  if constexpr (kOut == OutKind::f16) store_u16(out + 2 * i, _mm512_cvtps_ph(p, kToNearest), mask);
}

template <GradKind kGrad, OutKind kOut>
void run(const AdamScalars& s, const AdamSpan& span) {
  const Consts c = {_mm512_set1_ps(s.grad_scale),      _mm512_set1_ps(s.beta1),
                    _mm512_set1_ps(s.one_minus_beta1), _mm512_set1_ps(s.beta2),
                    _mm512_set1_ps(s.one_minus_beta2), _mm512_set1_ps(s.step_size),
                    _mm512_set1_ps(s.bc2_sqrt),        _mm512_set1_ps(s.eps),
                    _mm512_set1_ps(s.l2),              _mm512_set1_ps(s.decay),
                    s.has_l2,                          s.has_decay};
  const std::size_t n = span.numel;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) step16<kGrad, kOut>(c, span, i, Full{});
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << static_cast<unsigned>(n - i)) - 1u);
    step16<kGrad, kOut>(c, span, i, mask);
  }
}

template <GradKind kGrad>
void run_grad(const AdamScalars& s, const AdamSpan& span) {
  switch (span.out) {
    case OutKind::none: return run<kGrad, OutKind::none>(s, span);
    case OutKind::bf16: return run<kGrad, OutKind::bf16>(s, span);
    case OutKind::f16: return run<kGrad, OutKind::f16>(s, span);
  }
}

void run_span(const AdamScalars& s, const AdamSpan& span) {
  switch (span.grad) {
    case GradKind::f32: return run_grad<GradKind::f32>(s, span);
    case GradKind::bf16: return run_grad<GradKind::bf16>(s, span);
    case GradKind::f16: return run_grad<GradKind::f16>(s, span);
  }
}

}  // namespace
}  // namespace strata::cpu_adam::detail

// The portable Adam step: the element update of adam_impl.h in plain C++, compiled for the
// baseline (no FMA, -ffp-contract=off). The SIMD variants call it for their tails, and give
// the same bits as it does.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "cpu_adam/adam_impl.h"

namespace strata::cpu_adam::detail {
namespace {

template <GradKind kGrad>
float load_grad(const unsigned char* grads, std::size_t i) {
  if constexpr (kGrad == GradKind::f32) {
    float g;
    std::memcpy(&g, grads + 4 * i, 4);
    return g;
  } else {
    std::uint16_t h;
    std::memcpy(&h, grads + 2 * i, 2);
    if constexpr (kGrad == GradKind::bf16) return bf16_to_fp32(h);
    else return fp16_to_fp32(h);
  }
}

template <GradKind kGrad, OutKind kOut>
void run(const AdamScalars& scalars, const AdamSpan& span) {
  // A copy: read through the reference, the scalars would be reloaded after every float
  // store (which may alias them).
  const AdamScalars s = scalars;
  const auto* grads = static_cast<const unsigned char*>(span.grads);
  auto* out = static_cast<unsigned char*>(span.params_out);
  float* params = span.params;
  float* exp_avg = span.exp_avg;
  float* exp_avg_sq = span.exp_avg_sq;
  const float* params_in = span.params_in;
  const float* exp_avg_in = span.exp_avg_in;
  const float* exp_avg_sq_in = span.exp_avg_sq_in;
  for (std::size_t i = 0; i < span.numel; ++i) {
    float g = load_grad<kGrad>(grads, i) * s.grad_scale;
    float p = params_in[i];
    if (s.has_l2) g = g + s.l2 * p;
    if (s.has_decay) p = p * s.decay;
    const float m = s.beta1 * exp_avg_in[i] + s.one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq_in[i] + (s.one_minus_beta2 * g) * g;
    const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    p = p - (s.step_size * m) / denom;
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if constexpr (kOut != OutKind::none) {
      const std::uint16_t h = kOut == OutKind::bf16 ? fp32_to_bf16(p) : fp32_to_fp16(p);
      std::memcpy(out + 2 * i, &h, 2);
    }
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

}  // namespace

void adam_span_scalar(const AdamScalars& s, const AdamSpan& span) {
  switch (span.grad) {
    case GradKind::f32: return run_grad<GradKind::f32>(s, span);
    case GradKind::bf16: return run_grad<GradKind::bf16>(s, span);
    case GradKind::f16: return run_grad<GradKind::f16>(s, span);
  }
}

}  // namespace strata::cpu_adam::detail

#pragma once
// The per-step scalars of the Adam / AdamW element update: computed once per (hyper-parameters,
// step, grad scale) by cpu_adam::adam_scalars() (cpu_adam/adam.h), in double and rounded to
// float once, and used by every CPU variant (cpu_adam/adam_impl.h) and, copied field for field,
// by the CUDA AdamW (kernels/cuda/adamw.h, through runtime/ops). One computation, so the CPU
// and the GPU update with the same values.
//
// Like cpu_adam/adam_impl.h, which includes it, this header has no inline functions and
// includes no strata header (see there for why).
//
// The element update, in this order, every operation rounded to fp32:
//   g = grad * grad_scale
//   if has_l2:    g = g + l2 * p
//   if has_decay: p = p * decay
//   m = beta1 * m + one_minus_beta1 * g
//   v = beta2 * v + (one_minus_beta2 * g) * g
//   denom = sqrt(v) / bc2_sqrt + eps
//   p = p - (step_size * m) / denom
namespace strata::cpu_adam {

struct AdamScalars {
  float grad_scale;
  float beta1;
  float one_minus_beta1;  // 1 - beta1
  float beta2;
  float one_minus_beta2;  // 1 - beta2
  float step_size;  // lr / (1 - beta1^t), or lr without bias correction
  float bc2_sqrt;   // sqrt(1 - beta2^t), or 1 without bias correction
  float eps;
  float l2;         // adam mode: weight_decay (used when has_l2)
  float decay;      // adamw mode: 1 - lr * weight_decay (used when has_decay)
  bool has_l2;
  bool has_decay;
};

}  // namespace strata::cpu_adam

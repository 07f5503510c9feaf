#pragma once
// Adam / AdamW on a CUDA device, for optimizer states kept in device memory: the math of
// cpu_adam/adam.h (torch.optim.Adam / AdamW), element by element, in the same order of fp32
// operations and without FMA contraction, so it agrees with the CPU Adam to within an ulp or
// two per element and step. Includes no CUDA header.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace strata::kernels::cuda {

// The per-step scalars of the element update, field for field cpu_adam::AdamScalars
// (cpu_adam/adam_scalars.h; kernels/ may not include cpu_adam/): runtime/ops computes them with
// cpu_adam::adam_scalars() from the hyper-parameters and the step, and copies them here, so
// the CPU and the CUDA Adam run with the same values (computed in double, rounded once).
struct AdamwScalars {
  float grad_scale;       // multiplies every gradient (1/loss_scale x clip coefficient)
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float step_size;        // lr / (1 - beta1^t), or lr without bias correction
  float bc2_sqrt;         // sqrt(1 - beta2^t), or 1 without bias correction
  float eps;
  float l2;               // Adam (L2): weight_decay, used when has_l2 (g += l2 * p)
  float decay;            // AdamW: 1 - lr * weight_decay, used when has_decay (p *= decay)
  bool has_l2;
  bool has_decay;
};

// params, exp_avg, exp_avg_sq: fp32, numel elements, updated in place; grads in grad_dtype
// (f32, bf16, f16); params_out (optional, may be null): the updated params in out_dtype (bf16
// or f16, round to nearest even). The hyper-parameters were checked where the scalars were
// computed (cpu_adam::adam_scalars). Throws strata::Error for invalid dtypes or a failed launch.
void adamw(float* params, const void* grads, DType grad_dtype, float* exp_avg, float* exp_avg_sq,
           std::size_t numel, const AdamwScalars& scalars, void* params_out, DType out_dtype,
           cudaStream_t stream);

}  // namespace strata::kernels::cuda
